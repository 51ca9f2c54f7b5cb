// generate_bench: prompt and decode throughput of the decoder on a named shape with random
// weights (the llama.cpp side of the comparison is tools/llamacpp's). Reports medians.
//   generate_bench [--shape small|qwen2.5-0.5b] [--dtype f32|bf16] [--prompt 64]
//                  [--new-tokens 32] [--group 8] [--repeats 3] [--threads N]
//                  [--device cpu|cuda] [--prompts P] [--lora-r R] [--min-p X]
//                  [--repetition-penalty X]
// With --prompts (or on cuda), the rollout benchmark instead: generate() of P prompts x group
// completions x new-tokens (sampling at T = 1, no stop token), in tokens/s; on cuda with the
// decode steps replayed as CUDA graphs and run eagerly, side by side. --lora-r R attaches a
// LoRA adapter of rank R to all seven linear modules (random factors), as a GRPO worker
// generates with its adapter on; --min-p and --repetition-penalty sample the rollouts with them.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "generate/generate.h"
#include "generate/sample_rows.h"
#include "model/threads.h"
#include "model/loader.h"
#include "bench_adapter.h"
#include "bench_util.h"

using namespace brl;

namespace {
// Where an eager decode step of B rows goes: the decoder (forward_static over a cache of
// `capacity` slots), the LM head, and sampling, each timed alone over 20 calls (synchronised).
void step_breakdown(const model::Model& m, int64_t B, int64_t capacity) {
  c10::InferenceMode guard;
  const auto dev = at::TensorOptions().device(m.device());
  auto cache = m.new_cache(B, capacity);
  cache.valid.narrow(1, 0, capacity / 2).fill_(true);
  auto tok = at::randint(0, m.config.vocab_size, {B, 1}, dev.dtype(at::kLong));
  auto pos = at::full({B, 1}, capacity / 2, dev.dtype(at::kLong));
  auto slot = at::full({1}, capacity / 2, dev.dtype(at::kLong));
  auto u = at::rand({B}, dev.dtype(at::kDouble));
  auto h = m.forward_static(tok, pos, cache, slot);
  auto logits = m.lm_logits(h.select(1, 0)).to(at::kFloat);
  auto sync = [&] { (void)logits.sum().item<double>(); };
  auto time = [&](const char* what, const std::function<void()>& f) {
    f();
    sync();
    std::vector<double> t;
    for (int i = 0; i < 20; ++i)
      t.push_back(bench::seconds_of([&] {
        f();
        sync();
      }));
    std::printf("  %-34s %8.3f ms\n", what, 1e3 * bench::median(t));
  };
  std::printf("eager decode step of %lld rows over %lld cache slots:\n", (long long)B, (long long)capacity);
  time("decoder (forward_static)", [&] { h = m.forward_static(tok, pos, cache, slot); });
  time("LM head (to f32)", [&] { logits = m.lm_logits(h.select(1, 0)).to(at::kFloat); });
  time("sample_rows (T = 1)", [&] { (void)gen::sample_rows(logits, u, {1.0, 0, 1.0}); });
  time("sample_rows (T = 1, top_p 0.95)", [&] { (void)gen::sample_rows(logits, u, {1.0, 0, 0.95}); });
  time("sample_rows (T = 1, min_p 0.05)", [&] { (void)gen::sample_rows(logits, u, {1.0, 0, 1.0, 0.05}); });
  const auto seen = at::rand(logits.sizes(), dev.dtype(at::kFloat)) < 0.005;  // ~ a prompt's worth of tokens
  time("sample_rows (T = 1, repetition 1.1)", [&] {
    (void)gen::sample_rows(logits, u, {1.0, 0, 1.0, 0.0, 1.1}, seen);
  });
}

// generate() over P random prompts x G completions, every completion new_tokens long.
int rollouts(model::Model& m, const std::string& device, const std::string& dtype, int64_t P, int64_t G, int64_t prompt,
             int64_t new_tokens, int64_t repeats, const gen::SamplerConfig& sampling) {
  if (device == "cuda") m.to(at::Device(at::kCUDA));
  std::vector<std::vector<int32_t>> prompts(P, std::vector<int32_t>(prompt));
  auto ids = at::randint(0, m.config.vocab_size, {P, prompt}, at::kLong);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t i = 0; i < prompt; ++i) prompts[p][i] = static_cast<int32_t>(ids[p][i].item<int64_t>());
  step_breakdown(m, P * G, prompt + new_tokens);
  std::vector<bool> modes = device == "cuda" ? std::vector<bool>{true, false} : std::vector<bool>{false};
  std::printf(
      "rollouts: device %s dtype %s prompts %lld x group %lld, prompt %lld + new %lld tokens, repeats %lld, min_p %g, "
      "repetition_penalty %g\n",
      device.c_str(), dtype.c_str(), (long long)P, (long long)G, (long long)prompt, (long long)new_tokens,
      (long long)repeats, sampling.min_p, sampling.repetition_penalty);
  for (bool graphs : modes) {
    std::vector<double> tps;
    for (int64_t r = 0; r <= repeats; ++r) {  // r == 0 warms up
      gen::GenerateOptions o;
      o.num_generations = G;
      o.max_new_tokens = new_tokens;
      o.temperature = 1.0;
      o.min_p = sampling.min_p;
      o.repetition_penalty = sampling.repetition_penalty;
      o.seed = r;
      o.cuda_graphs = graphs;
      size_t n = 0;
      double t = bench::seconds_of([&] {
        for (auto& c : gen::generate(m, prompts, o)) n += c.tokens.size();
      });
      if (r > 0) tps.push_back(n / t);
    }
    std::printf("generate %s: %lld seqs, %.1f tokens/s (median)\n",
                device != "cuda" ? "eager"
                : graphs         ? "cuda graphs"
                                 : "eager (no graphs)",
                (long long)(P * G), bench::median(tps));
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  std::string shape = "small", dtype = "f32";
  int64_t prompt = 64, new_tokens = 32, group = 8, repeats = 3;
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  std::string device = "cpu";
  int64_t prompts = 0, lora_r = 0;
  gen::SamplerConfig sampling;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--shape") shape = v;
    else if (a == "--dtype") dtype = v;
    else if (a == "--prompt") prompt = std::stoll(v);
    else if (a == "--new-tokens") new_tokens = std::stoll(v);
    else if (a == "--group") group = std::stoll(v);
    else if (a == "--repeats") repeats = std::stoll(v);
    else if (a == "--threads") threads = std::stoi(v);
    else if (a == "--device") device = v;
    else if (a == "--prompts") prompts = std::stoll(v);
    else if (a == "--lora-r") lora_r = std::stoll(v);
    else if (a == "--min-p") sampling.min_p = std::stod(v);
    else if (a == "--repetition-penalty") sampling.repetition_penalty = std::stod(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  threads = brl::model::set_compute_threads(threads);
  auto cfg = model::named_shape(shape);
  auto dt = dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  std::fprintf(stderr, "building random %s (%.0fM params, %s)...\n", shape.c_str(), cfg.num_parameters() / 1e6,
               dtype.c_str());
  auto m = model::random_model(cfg, 1, 0.02, dt, device == "cuda" ? at::Device(at::kCUDA) : at::Device(at::kCPU));
  if (lora_r > 0) {
    bench::attach_random_adapter(m, lora_r);
    std::fprintf(stderr, "LoRA r=%lld on all linear modules\n", static_cast<long long>(lora_r));
  }
  if (device == "cuda" && prompts == 0) prompts = 8;
  if (prompts > 0) return rollouts(m, device, dtype, prompts, group, prompt, new_tokens, repeats, sampling);
  c10::InferenceMode guard;
  auto ids = at::randint(0, cfg.vocab_size, {1, prompt}, at::kLong);
  auto pos = at::arange(prompt, at::kLong).unsqueeze(0);

  // Prompt: one forward of the prompt, logits of the last position (as llama-bench's pp).
  auto prefill = [&](model::KvCache& cache) {
    auto h = m.forward(ids, pos, &cache);
    return m.lm_logits(h.select(1, prompt - 1));  // [1, V]
  };
  // Decode `rows` sequences for new_tokens greedy steps from a prefilled prompt.
  auto decode = [&](int64_t rows) {
    auto cache = m.new_cache(1, prompt + new_tokens);
    auto logits = prefill(cache);
    if (rows > 1) {
      auto rep = at::zeros({rows}, at::kLong);
      cache.keep_rows(rep);
      logits = logits.index_select(0, rep);
    }
    auto p = at::full({rows, 1}, prompt, at::kLong);
    double t = bench::seconds_of([&] {
      for (int64_t s = 0; s < new_tokens; ++s) {
        auto tok = logits.argmax(-1, true);  // [rows, 1]
        logits = m.lm_logits(m.forward(tok, p, &cache).select(1, 0));
        p = p + 1;
      }
    });
    return rows * new_tokens / t;
  };

  std::vector<double> pp, d1, dg, gen;
  for (int64_t r = 0; r <= repeats; ++r) {  // r == 0 warms up
    auto cache = m.new_cache(1, prompt);
    double t = bench::seconds_of([&] { prefill(cache); });
    double a = decode(1), b = decode(group);
    gen::GenerateOptions o;
    o.num_generations = group;
    o.max_new_tokens = new_tokens;
    o.temperature = 1.0;
    o.seed = r;
    std::vector<int32_t> pr(prompt);
    for (int64_t i = 0; i < prompt; ++i) pr[i] = ids[0][i].item<int64_t>();
    double tg = bench::seconds_of([&] { gen::generate(m, {pr}, o); });
    if (r == 0) continue;
    pp.push_back(prompt / t);
    d1.push_back(a);
    dg.push_back(b);
    gen.push_back(group * new_tokens / tg);
  }
  std::printf("shape %s dtype %s threads %d prompt %lld new %lld group %lld repeats %lld\n", shape.c_str(),
              dtype.c_str(), threads, (long long)prompt, (long long)new_tokens, (long long)group, (long long)repeats);
  std::printf("prompt tok/s            %8.1f\n", bench::median(pp));
  std::printf("decode 1 seq tok/s      %8.1f\n", bench::median(d1));
  std::printf("decode %lld seqs tok/s     %8.1f\n", (long long)group, bench::median(dg));
  std::printf("generate() %lld seqs tok/s %8.1f  (sampling at T=1, prefill included)\n", (long long)group,
              bench::median(gen));
  return 0;
}
