// generate_bench: prompt and decode throughput of the decoder on a named shape with random
// weights (the llama.cpp side of the comparison is tools/llamacpp's). Reports medians.
//   generate_bench [--shape small|qwen2.5-0.5b] [--dtype f32|bf16] [--prompt 64]
//                  [--new-tokens 32] [--group 8] [--repeats 3] [--threads N]
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
#include "model/threads.h"
#include "model/loader.h"
#include "bench_util.h"

using namespace brl;

int main(int argc, char** argv) {
  std::string shape = "small", dtype = "f32";
  int64_t prompt = 64, new_tokens = 32, group = 8, repeats = 3;
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--shape") shape = v;
    else if (a == "--dtype") dtype = v;
    else if (a == "--prompt") prompt = std::stoll(v);
    else if (a == "--new-tokens") new_tokens = std::stoll(v);
    else if (a == "--group") group = std::stoll(v);
    else if (a == "--repeats") repeats = std::stoll(v);
    else if (a == "--threads") threads = std::stoi(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  threads = brl::model::set_compute_threads(threads);
  auto cfg = model::named_shape(shape);
  auto dt = dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  std::fprintf(stderr, "building random %s (%.0fM params, %s)...\n", shape.c_str(),
               cfg.num_parameters() / 1e6, dtype.c_str());
  auto m = model::random_model(cfg, 1, 0.02, dt);
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
        auto tok = logits.argmax(-1, true);                  // [rows, 1]
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
  std::printf("shape %s dtype %s threads %d prompt %lld new %lld group %lld repeats %lld\n",
              shape.c_str(), dtype.c_str(), threads, (long long)prompt, (long long)new_tokens,
              (long long)group, (long long)repeats);
  std::printf("prompt tok/s            %8.1f\n", bench::median(pp));
  std::printf("decode 1 seq tok/s      %8.1f\n", bench::median(d1));
  std::printf("decode %lld seqs tok/s     %8.1f\n", (long long)group, bench::median(dg));
  std::printf("generate() %lld seqs tok/s %8.1f  (sampling at T=1, prefill included)\n",
              (long long)group, bench::median(gen));
  return 0;
}
