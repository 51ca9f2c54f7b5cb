// Writes the seed corpus fuzz/corpus/<target>/ with the project's own writers, so the seeds
// are valid inputs of the current formats (run again when a format changes):
//   build-san/fuzz/make_corpus fuzz/corpus
// The tokenizer seeds are files (tests/tokenizer/data, the demo's byte-level tokenizer.json)
// that scripts/fuzz.sh --make-corpus copies.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "protocol/records.h"
#include "protocol/update.h"
#include "proxy_seeds.h"
#include "util/safetensors.h"

using namespace brl;
namespace fs = std::filesystem;

namespace {
fs::path root;

void put(const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(root / target);
  std::ofstream(root / target / name, std::ios::binary) << bytes;
}

// A small delta of two LoRA-shaped tensors with an odd element count (int4 padding).
std::vector<codec::Tensor> small_delta() {
  codec::Tensor a{"base_model.model.layers.0.self_attn.q_proj.lora_A.weight", {2, 5}, {}};
  codec::Tensor b{"base_model.model.layers.0.self_attn.q_proj.lora_B.weight", {3, 3}, {}};
  for (int i = 0; i < 10; ++i) a.data.push_back(0.01f * static_cast<float>(i * i - 20));
  for (int i = 0; i < 9; ++i) b.data.push_back(i % 2 ? -0.5f / static_cast<float>(i + 1) : 0.0f);
  return {a, b};
}

void safetensors_seeds() {
  put("safetensors", "empty", st::serialize_safetensors({}));
  const float f[6] = {1, -2, 3.5f, 0, 1e-30f, -7};
  put("safetensors", "f32_2x3", st::serialize_safetensors({{"w", st::DType::F32, {2, 3}, f, sizeof f}}));
  const uint8_t bytes[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  put("safetensors", "dtypes_meta",
      st::serialize_safetensors({{"a", st::DType::BF16, {2}, bytes, 4},
                                 {"b", st::DType::I8, {2, 2}, bytes, 4},
                                 {"c", st::DType::U8, {}, bytes, 1},
                                 {"d", st::DType::I64, {1}, bytes, 8},
                                 {"e", st::DType::BOOL, {0, 4}, bytes, 0},
                                 {"f", st::DType::F16, {1, 1, 2}, bytes, 4}},
                                {{"format", "pt"}, {"note", "seed"}}));
}

void codec_seeds() {
  for (codec::Kind k : {codec::Kind::fp32, codec::Kind::bf16, codec::Kind::int8, codec::Kind::int4,
                        codec::Kind::topk_int2, codec::Kind::topk_int4}) {
    const std::string kn = codec::kind_name(k);
    codec::Options o{k, 8, 0};
    o.topk_chunk = 16;
    o.topk_density = 0.3;
    // Mode byte 0: a whole payload (stored and zstd); 1: a body that the target frames.
    for (int level : {0, 3}) {
      o.zstd_level = level;
      put("codec", kn + "_z" + std::to_string(level), std::string(1, '\0') + codec::encode(small_delta(), o));
    }
    o.zstd_level = 0;
    put("codec", kn + "_body", std::string(1, '\1') + codec::unframe(codec::encode(small_delta(), o)).value());
  }
  // Mode byte 2 (int2) / 6 (int4): floats for the topk round trip; run length 16 + 20, density 80/256.
  std::string floats = {'\2', 20, 0, 79};
  for (auto& t : small_delta()) floats.append(reinterpret_cast<const char*>(t.data.data()), 4 * t.data.size());
  put("codec", "topk_round_trip_int2", floats);
  floats[0] = '\6';
  put("codec", "topk_round_trip_int4", floats);
}

void update_seeds() {
  protocol::UpdateHeader h{.worker = "w0",
                           .id = protocol::make_update_id(1764770000000, 0xabcdef12),
                           .base_version = 3,
                           .steps = 4,
                           .samples = 64,
                           .reward_mean = 0.25,
                           .reward_std = 0.5,
                           .accuracy = 0.125,
                           .created_ms = 1764770000000,
                           .seconds = 1.5};
  for (codec::Kind k : {codec::Kind::fp32, codec::Kind::int4}) {
    h.codec = codec::kind_name(k);
    put("update", h.codec, protocol::encode_update(h, codec::encode(small_delta(), {k, 8, 3})));
  }
}

void records_seeds() {
  // The first byte picks the parser: 0 run.json, 1 manifest, 2 heartbeat, 3 eval.
  protocol::RunDescription r{
      .run_id = "run-1",
      .created_ms = 1764770000000,
      .base_sha256 = std::string(64, 'd'),
      .base_files = {{"config.json", std::string(64, 'a'), 612}, {"model.safetensors", std::string(64, 'b'), 1 << 20}},
      .data_files = {{"0123456789abcdef-train.jsonl", std::string(64, 'c'), 4096}},
      .config = {{"lora", {{"r", 8}, {"lora_alpha", 16}}}, {"sync", {{"codec", "int8"}}}}};
  put("records", "run", std::string(1, '\0') + r.to_json().dump());

  protocol::Manifest m{.version = 2,
                       .parent = 1,
                       .created_ms = 1764770000000,
                       .proxy = "proxy-a",
                       .payload_key = "global/v00000002/adapter-0123456789abcdef.safetensors",
                       .payload_sha256 = std::string(64, 'e'),
                       .payload_size = 123456,
                       .updates = {{"w0", "1764770000000-abcdef12", std::string(64, 'f'), std::string(64, '0'), 999, 1,
                                    1, 4, 64, 0.75, 0.25, 0.5}},
                       .rejected = {{"w1", "1764770000001-00000001", "stale: base_version 0, 2 versions behind"}},
                       .cursors = {{"w0", "1764770000000-abcdef12"}, {"w1", "1764770000001-00000001"}},
                       .stats = {{"samples", 64}, {"seconds", 0.01}}};
  put("records", "manifest", std::string(1, '\1') + m.to_json().dump());

  protocol::Heartbeat hb{.worker = "w0",
                         .host = "node-1",
                         .state = "training",
                         .pid = 4242,
                         .time_ms = 1764770000000,
                         .step = 17,
                         .version = 2,
                         .updates = 3,
                         .samples_per_s = 12.5,
                         .bytes_uploaded = 1 << 20};
  put("records", "heartbeat", std::string(1, '\2') + hb.to_json().dump());

  protocol::EvalRecord e{2, 200, 1764770000000, 0.55, 0.55};
  put("records", "eval", std::string(1, '\3') + e.to_json().dump());
}
// Byte 0: odd = the signed run, even = the unsigned one (proxy_admission_fuzz.cpp).
void proxy_admission_seeds() {
  auto updates = fuzz::proxy_seed_updates();
  for (size_t i = 0; i < updates.size(); ++i) {
    put("proxy_admission", "signed_run_" + std::to_string(i), std::string(1, 1) + updates[i]);
    put("proxy_admission", "unsigned_run_" + std::to_string(i), std::string(1, 0) + updates[i]);
  }
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_corpus DIR   (writes DIR/<target>/<seed>)\n");
    return 2;
  }
  root = argv[1];
  safetensors_seeds();
  codec_seeds();
  update_seeds();
  records_seeds();
  proxy_admission_seeds();
  return 0;
}
