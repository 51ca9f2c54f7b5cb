// What a worker's AdamW state does when it adopts a new version (issue 21), in one process on
// the chaos recipe (tests/launch/async_util.h: the "say seven" task on a random 2-layer base,
// lr 5e-3, LoRA r 4, 8 x 8 completions a step). Adopting a version every K steps is modelled by
// touching AdamW every K steps as the worker would: keep (nothing), reset (a fresh AdamW),
// reset_momentum (the first moment zeroed). Same seeds for every mode. Prints per mode the mean
// train reward after step 200, the lowest, the steps below 0.3, and the adapter's norm as it
// grows (a fresh AdamW steps sign(g) x lr in every coordinate, noise included).
//   adam_reset_bench [--steps 3000] [--every 25] [--modes keep,reset,reset_momentum] [--threads 1]
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "../tests/launch/async_util.h"
#include "grpo/train_loop.h"
#include "grpo/trainer.h"
#include "lora/lora.h"
#include "model/threads.h"

using namespace brl;

namespace {
double adapter_norm(model::Model& m) {
  double s = 0;
  for (auto& p : lora::parameters(m)) s += p.detach().to(torch::kDouble).pow(2).sum().item<double>();
  return std::sqrt(s);
}
}  // namespace

int main(int argc, char** argv) {
  int steps = 3000, every = 25, threads = 1;
  std::string modes = "keep,reset,reset_momentum";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--every")) every = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--modes")) modes = argv[i + 1];
    else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    else return std::fprintf(stderr, "adam_reset_bench: unknown argument %s\n", argv[i]), 2;
  }
  model::set_compute_threads(threads);
  test::TempDir tmp;
  const std::string base = test::make_base(tmp.str("base"));
  std::printf(
      "| mode (every %d steps) | mean reward, steps 200..%d | lowest | steps < 0.3 | adapter norm at 25%% / 50%% / "
      "100%% |\n|---|---|---|---|---|\n",
      every, steps);
  std::stringstream ms(modes);
  for (std::string mode; std::getline(ms, mode, ',');) {
    RunConfig cfg = test::learnable_config(base, tmp.str("out-" + mode));
    auto ses = grpo::open_session(cfg);
    grpo::GrpoTrainer tr(ses.model, ses.tokenizer, *ses.task, cfg.grpo, 0, 1, ses.reward_weights);
    double sum = 0, lowest = 1;
    int n = 0, low = 0;
    std::vector<double> norms;
    for (int i = 0; i < steps; ++i) {
      if (i > 0 && i % every == 0) {
        if (mode == "reset") tr.reset_optimizer();
        else if (mode == "reset_momentum") tr.reset_momentum();
        else if (mode != "keep") return std::fprintf(stderr, "adam_reset_bench: unknown mode %s\n", mode.c_str()), 2;
      }
      const auto s = tr.step();
      if (i >= 200) sum += s.reward_mean, ++n, lowest = std::min(lowest, s.reward_mean), low += s.reward_mean < 0.3;
      if ((i + 1) * 4 % steps == 0 && (i + 1) * 4 / steps != 3) norms.push_back(adapter_norm(ses.model));
    }
    std::printf("| %s | %.3f | %.3f | %d | %s |\n", mode.c_str(), n ? sum / n : 0.0, lowest, low,
                [&] {
                  std::string t;
                  for (double x : norms) t += (t.empty() ? "" : " / ") + std::to_string(x).substr(0, 5);
                  return t;
                }()
                    .c_str());
    std::fflush(stdout);
  }
  return 0;
}
