// Shared set-up of the tests that drive the real Proxy in-process on a directory bucket: a
// run as `bucketrl init` leaves it (without a base model: the proxy never reads it) and
// hand-made worker updates, optionally signed. Temporary buckets: TempDir (test_files.h).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "codec/codec.h"
#include "config/run_config.h"
#include "protocol/bucket.h"
#include "protocol/layout.h"
#include "protocol/update.h"
#include "proxy/proxy.h"
#include "store/object_store.h"
#include "util/hash.h"
#include "../test_files.h"

namespace brl::test {

// A two-tensor adapter (one q_proj LoRA pair) for version 0, and a delta of it whose every
// element is c (|delta| = 4c).
inline const std::string kTinyA = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
inline const std::string kTinyB = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight";
inline std::vector<codec::Tensor> tiny_v0() {
  return {{kTinyA, {2, 4}, std::vector<float>(8, 0.5f)}, {kTinyB, {4, 2}, std::vector<float>(8, 0.0f)}};
}
inline std::vector<codec::Tensor> tiny_delta(float c) {
  return {{kTinyA, {2, 4}, std::vector<float>(8, c)}, {kTinyB, {4, 2}, std::vector<float>(8, c)}};
}

// The options of an in-process proxy on `bucket` (the rest as `bucketrl proxy` defaults them).
inline proxy::ProxyOptions proxy_options(const std::string& bucket, const std::string& id) {
  proxy::ProxyOptions o;
  o.bucket = bucket;
  o.id = id;
  return o;
}

// run.json + version 0.
inline void make_run(store::ObjectStore& s, RunConfig cfg, const std::vector<codec::Tensor>& v0) {
  protocol::Manifest m;
  m.version = 0;
  m.parent = -1;
  m.proxy = "init";
  ASSERT_TRUE(protocol::publish_version(
                  s, m, protocol::encode_adapter(v0, cfg.aggregation.publish_bf16() ? st::DType::BF16 : st::DType::F32))
                  .is_ok());
  protocol::RunDescription r;
  r.run_id = "proxy-test";
  r.base_files = {{"config.json", std::string(64, 'a'), 10}};
  r.base_sha256 = sha256_hex(protocol::base_digest(r.base_files));
  r.config = cfg.to_json();
  ASSERT_TRUE(s.put(protocol::run_key(), r.to_json().dump()).is_ok());
}

// The header of a worker's seq-th update: ids and times follow seq, so they sort by it.
inline protocol::UpdateHeader update_header(const std::string& worker, int64_t seq, int64_t base, int64_t samples) {
  protocol::UpdateHeader h;
  h.worker = worker;
  h.id = protocol::make_update_id(1700000000000 + seq, 0x1000 + seq);
  h.base_version = base;
  h.steps = 1;
  h.samples = samples;
  h.codec = "fp32";
  h.created_ms = 1700000000000 + seq;
  return h;
}

inline std::string fp32_payload(const std::vector<codec::Tensor>& d) {
  codec::Options o;
  o.kind = codec::Kind::fp32;
  return codec::encode(d, o);
}

inline void upload(store::ObjectStore& s, const std::string& worker, int64_t seq, int64_t base, int64_t samples,
                   const std::vector<codec::Tensor>& d, const ed25519::SigningKey* key = nullptr) {
  auto h = update_header(worker, seq, base, samples);
  ASSERT_TRUE(s.put(protocol::update_key(worker, h.id), protocol::encode_update(h, fp32_payload(d), key)).is_ok());
}

}  // namespace brl::test
