// The run and the updates of the proxy admission fuzzer (proxy_admission_fuzz.cpp), shared
// with make_corpus.cpp, which writes the updates as its seeds: the fuzzer knows which objects
// the run's key signed, because it makes them the same way.
#pragma once

#include <string>
#include <vector>

#include "codec/codec.h"
#include "protocol/update.h"
#include "util/ed25519.h"

namespace brl::fuzz {

inline const ed25519::SigningKey& proxy_seed_key() {
  static const auto key = ed25519::SigningKey::from_seed(std::string(ed25519::kSeedSize, '\x2a'));
  return key;
}

inline const std::string kSeedA = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
inline const std::string kSeedB = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight";

// Version 0: one LoRA module whose A has full row rank, so the gauge fix runs.
inline std::vector<codec::Tensor> proxy_seed_v0() {
  return {{kSeedA, {2, 4}, {1, 0, 0.5f, 0, 0, 1, 0, 0.5f}}, {kSeedB, {4, 2}, std::vector<float>(8, 0.0f)}};
}

// Update i of worker w1 in each codec, signed by the key, and one more unsigned (not with
// signed_only).
inline std::vector<std::string> proxy_seed_updates(bool signed_only = false) {
  std::vector<codec::Tensor> d{{kSeedA, {2, 4}, {0.01f, -0.02f, 0.03f, 0, 0.02f, 0.01f, -0.01f, 0.04f}},
                               {kSeedB, {4, 2}, {0.05f, -0.05f, 0.02f, 0.01f, 0, 0.03f, -0.02f, 0.01f}}};
  const codec::Kind kinds[] = {codec::Kind::fp32, codec::Kind::bf16,      codec::Kind::int8,
                               codec::Kind::int4, codec::Kind::topk_int4, codec::Kind::fp32};
  std::vector<std::string> out;
  for (int i = 0; i < (signed_only ? 5 : 6); ++i) {
    codec::Options o;
    o.kind = kinds[i];
    o.block_size = 8;
    o.topk_chunk = 16;
    o.topk_density = 0.25;
    protocol::UpdateHeader h;
    h.worker = "w1";
    h.id = protocol::make_update_id(1700000000000 + i, 0x1000 + static_cast<uint64_t>(i));
    h.base_version = 0;
    h.steps = 1;
    h.samples = 8;
    h.codec = codec::kind_name(o.kind);
    h.created_ms = 1700000000000 + i;
    out.push_back(protocol::encode_update(h, codec::encode(d, o), i < 5 ? &proxy_seed_key() : nullptr));
  }
  return out;
}

}  // namespace brl::fuzz
