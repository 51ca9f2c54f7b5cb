// aggregate_bench: time for the proxy to fold N updates of one adapter, per aggregation mode
// (proxy/aggregate.h).
//
//   aggregate_bench [--updates 256] [--reps 3] [--layers 24] [--modes fedavg,exact,trimmed_mean,median,nesterov]
// Shape: Qwen2.5-0.5B (hidden 896, 14 x 64 query heads, 2 kv heads, intermediate 4864), LoRA
// r = 16 on q, k, v, o, gate, up, down: 8.8 M floats per update, so 256 updates are 9 GB of
// F32, more than this machine can spare. The bench therefore streams module by module: it
// makes one module's global factors and its N deltas (uniform random, fixed seed), times
// aggregate() on that module in every mode, and moves on; a mode's time for the adapter is
// the sum over the 168 modules. Every mode works tensor by tensor (exact: module by module),
// so this is the same work as one call on the whole adapter, without its memory. Per mode:
// the median of --reps such totals. "nesterov" = fedavg with server_momentum 0.9.
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "launch/aten_factorizer.h"
#include "proxy/aggregate.h"
#include "bench_util.h"
#include "util/error.h"

using namespace brl;

namespace {

struct Mod {
  const char* name;
  int in, out;
};

// xorshift64*: the data only has to be incompressible and unsorted, and 2 G floats of
// std::normal_distribution would take longer than the folds.
struct Fast {
  uint64_t s;
  float next() {
    s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
    return static_cast<float>(static_cast<int64_t>(s * 2685821657736338717ull) >> 11) * (1.0f / 4503599627370496.0f);
  }
};

std::vector<codec::Tensor> module(const std::string& base, const Mod& m, int r, Fast& rng, float scale) {
  codec::Tensor a{base + ".lora_A.weight", {r, m.in}, std::vector<float>(size_t(r) * m.in)};
  codec::Tensor b{base + ".lora_B.weight", {m.out, r}, std::vector<float>(size_t(r) * m.out)};
  for (auto& x : a.data) x = scale * rng.next();
  for (auto& x : b.data) x = scale * rng.next();
  return {std::move(a), std::move(b)};
}

}  // namespace

int main(int argc, char** argv) {
  int updates = 256, reps = 3, layers = 24;
  std::vector<std::string> modes{"fedavg", "nesterov", "trimmed_mean", "median", "exact"};
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--updates") && i + 1 < argc) updates = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--layers") && i + 1 < argc) layers = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--modes") && i + 1 < argc) {
      modes.clear();
      std::stringstream ss(argv[++i]);
      for (std::string m; std::getline(ss, m, ',');) modes.push_back(m);
    } else {
      std::fprintf(stderr,
                   "usage: aggregate_bench [--updates 256] [--reps 3] [--layers 24] [--modes "
                   "fedavg,nesterov,trimmed_mean,median,exact]\n");
      return 2;
    }
  }
  const int hidden = 896, q = 14 * 64, kv = 2 * 64, inter = 4864, r = 16;
  const Mod mods[] = {{"self_attn.q_proj", hidden, q},  {"self_attn.k_proj", hidden, kv},
                      {"self_attn.v_proj", hidden, kv}, {"self_attn.o_proj", q, hidden},
                      {"mlp.gate_proj", hidden, inter}, {"mlp.up_proj", hidden, inter},
                      {"mlp.down_proj", inter, hidden}};
  std::map<std::string, AggregationConfig> cfgs;
  for (auto& m : modes) {
    AggregationConfig c;
    c.server_momentum = m == "nesterov" ? 0.9 : 0.0;
    try {
      c.table().set_from_json({{"mode", m == "nesterov" ? "fedavg" : m}}, "--modes");
      c.validate();
    } catch (const UserError& e) {
      std::fprintf(stderr, "aggregate_bench: --modes %s: %s\n", m.c_str(), e.what());
      return 2;
    }
    cfgs[m] = c;
  }
  std::map<std::string, std::vector<double>> secs;  // mode -> total per rep
  std::map<std::string, double> max_err;
  for (auto& m : modes) secs[m].assign(reps, 0.0);
  Fast rng{0x9e3779b97f4a7c15ull};
  size_t floats = 0;
  double gen_s = 0;
  for (int l = 0; l < layers; ++l)
    for (auto& m : mods) {
      const std::string base = "base_model.model.model.layers." + std::to_string(l) + "." + m.name;
      auto t0 = std::chrono::steady_clock::now();
      auto global = module(base, m, r, rng, 1e-2f);
      std::vector<std::vector<codec::Tensor>> deltas;
      for (int u = 0; u < updates; ++u) deltas.push_back(module(base, m, r, rng, 1e-3f));
      gen_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      floats += global[0].data.size() + global[1].data.size();
      proxy::AggregateInput in;
      in.global = &global;
      in.factorizer = &launch::aten_factorizer();
      for (int u = 0; u < updates; ++u) in.deltas.push_back(&deltas[u]), in.weights.push_back(64.0 * (1 + u % 4));
      for (auto& mode : modes)
        for (int rep = 0; rep < reps; ++rep) {
          proxy::OuterState st;  // nesterov: its first step (allocating the zero buffer included)
          auto t1 = std::chrono::steady_clock::now();
          auto res = proxy::aggregate(cfgs[mode], in, &st);
          secs[mode][rep] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
          if (res.stats.contains("reconstruction_error"))
            max_err[mode] = std::max(max_err[mode], res.stats["reconstruction_error"]["max"].get<double>());
        }
    }
  std::printf(
      "adapter: %d layers x 7 modules, r %d, %.2f M floats per update; %d updates (%.2f GB F32, streamed per module)\n",
      layers, r, floats / 1e6, updates, 4.0 * floats * updates / 1e9);
  std::printf("torch threads %d; data generation %.1f s (not timed)\n", at::get_num_threads(), gen_s);
  std::printf("| mode | seconds (median of %d) | min | max |\n|---|---|---|---|\n", reps);
  for (auto& m : modes) {
    auto& v = secs[m];
    std::printf("| %s | %.2f | %.2f | %.2f |", m.c_str(), bench::median(v), *std::min_element(v.begin(), v.end()),
                *std::max_element(v.begin(), v.end()));
    if (max_err.count(m)) std::printf(" max reconstruction error %.3f", max_err[m]);
    std::printf("\n");
  }
  return 0;
}
