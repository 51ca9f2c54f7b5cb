// `bucketrl evaluator`: follows the run's newest global version and writes its held-out
// evaluation (greedy by default, train.eval_max_examples prompts) to evals/v<N>.json, so the
// reward curve over versions is in the bucket for `status`, the dashboard and the demo.
// Versions published while one is being evaluated are skipped: it always takes the newest.
#pragma once

#include <atomic>
#include <string>

namespace brl::worker {

struct EvaluatorOptions {
  std::string bucket;
  std::string cache_dir;
  int threads = 1;
  double poll_interval_s = 1;
  double min_interval_s = 0;  // at most one evaluation per this many seconds (it competes with workers for CPU)
  std::string device;         // "" = the run's [model] device
};

void run_evaluator(const EvaluatorOptions& opt, const std::atomic<bool>& stop);

}  // namespace brl::worker
