// codec_bench: bytes per sync and encode/decode time of each update codec for LoRA adapter
// shapes (all linear modules: q, k, v, o, gate, up, down; A [r, in], B [out, r]).
//
//   codec_bench [--reps 5] [--level 3]
// The deltas are Gaussian (A and B with their own sigma, fixed seed). Real deltas are not:
// heavier tails make absmax blocks coarser, and structure (many near-zero rows) can make zstd
// gain more, so treat the ratios as indicative. Times are medians over --reps runs, one thread.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "bench_util.h"
#include "protocol/bucket.h"
#include "util/error.h"

using namespace brl;
using codec::Kind;

namespace {

struct Shape {
  const char* name;
  int hidden, layers, heads, kv_heads, head_dim, intermediate, rank;
};

std::vector<codec::Tensor> adapter(const Shape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> ga(0.0f, 1e-2f), gb(0.0f, 1e-3f);
  struct Mod {
    const char* name;
    int in, out;
  };
  const int q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  const Mod mods[] = {{"self_attn.q_proj", s.hidden, q},           {"self_attn.k_proj", s.hidden, kv},
                      {"self_attn.v_proj", s.hidden, kv},          {"self_attn.o_proj", q, s.hidden},
                      {"mlp.gate_proj", s.hidden, s.intermediate}, {"mlp.up_proj", s.hidden, s.intermediate},
                      {"mlp.down_proj", s.intermediate, s.hidden}};
  std::vector<codec::Tensor> ts;
  for (int l = 0; l < s.layers; ++l)
    for (auto& m : mods) {
      std::string base = "base_model.model.model.layers." + std::to_string(l) + "." + m.name;
      codec::Tensor a{base + ".lora_A.weight", {s.rank, m.in}, std::vector<float>(size_t(s.rank) * m.in)};
      codec::Tensor b{base + ".lora_B.weight", {m.out, s.rank}, std::vector<float>(size_t(s.rank) * m.out)};
      for (auto& x : a.data) x = ga(rng);
      for (auto& x : b.data) x = gb(rng);
      ts.push_back(std::move(a));
      ts.push_back(std::move(b));
    }
  return ts;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5, level = 3;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--level") && i + 1 < argc) level = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: codec_bench [--reps 5] [--level 3]\n");
      return 2;
    }
  }
  const Shape shapes[] = {{"demo (h128, 4 layers, r8)", 128, 4, 4, 2, 32, 352, 8},
                          {"Qwen2.5-0.5B (r16)", 896, 24, 14, 2, 64, 4864, 16}};
  try {
    std::printf(
        "| adapter | params | codec | block | bytes (zstd %d) | bytes/param | %% of fp32 | fp32 / bytes | stored bytes "
        "| encode ms | decode ms |\n",
        level);
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (auto& s : shapes) {
      const auto ts = adapter(s, 7);
      size_t params = 0;
      for (auto& t : ts) params += t.data.size();
      double fp32_bytes = 0;
      // block: elements per scale (int8, int4); topk: elements sent per run of 4096 (SparseLoCo's
      // 64 of 4096 and the denser ones that keep up with fp32 sooner, issue 23).
      struct Run {
        Kind kind;
        int block;
        double density = 0;
      };
      const Run runs[] = {{Kind::fp32, 64},
                          {Kind::bf16, 64},
                          {Kind::int8, 64},
                          {Kind::int8, 128},
                          {Kind::int4, 64},
                          {Kind::int4, 128},
                          {Kind::topk_int2, 4096, 1.0 / 64},
                          {Kind::topk_int2, 4096, 1.0 / 16},
                          {Kind::topk_int2, 4096, 1.0 / 8},
                          {Kind::topk_int2, 4096, 1.0 / 4},
                          {Kind::topk_int4, 4096, 1.0 / 64}};
      for (auto [k, block, density] : runs) {
        codec::Options opt{k, codec::is_sparse(k) ? 64 : block, level};
        opt.topk_chunk = 4096;
        if (density > 0) opt.topk_density = density;
        std::string bytes;
        std::vector<double> enc, dec;
        for (int r = 0; r < reps; ++r) {
          enc.push_back(1e3 * bench::seconds_of([&] { bytes = codec::encode(ts, opt); }));
          dec.push_back(1e3 * bench::seconds_of([&] { codec::decode(bytes).status().throw_if_error(); }));
        }
        codec::Options stored_opt = opt;
        stored_opt.zstd_level = 0;
        const size_t stored = codec::encode(ts, stored_opt).size();
        if (k == Kind::fp32) fp32_bytes = static_cast<double>(bytes.size());
        const bool blocked = k != Kind::fp32 && k != Kind::bf16;
        const std::string block_col =
            density > 0 ? std::to_string(static_cast<int>(density * block)) + "/" + std::to_string(block)
                        : (blocked ? std::to_string(block) : "-");
        std::printf("| %s | %.2fM | %s | %s | %zu | %.3f | %.1f %% | %.1fx | %zu | %.1f | %.1f |\n", s.name,
                    params / 1e6, codec::kind_name(k), block_col.c_str(), bytes.size(),
                    static_cast<double>(bytes.size()) / params, 100.0 * bytes.size() / fp32_bytes,
                    fp32_bytes / bytes.size(), stored, bench::median(enc), bench::median(dec));
      }
    }
    // What every worker downloads per published version ([aggregation] publish_dtype).
    std::printf("\n| adapter | version payload float32 | bfloat16 | %% of float32 |\n|---|---|---|---|\n");
    for (auto& s : shapes) {
      const auto ts = adapter(s, 7);
      const size_t f32 = protocol::encode_adapter(ts, st::DType::F32).size(),
                   bf16 = protocol::encode_adapter(ts, st::DType::BF16).size();
      std::printf("| %s | %zu | %zu | %.1f %% |\n", s.name, f32, bf16,
                  100.0 * static_cast<double>(bf16) / static_cast<double>(f32));
    }
  } catch (const UserError& e) {
    std::fprintf(stderr, "codec_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
