// `bucketrl run` and the demo: one machine, a local-directory bucket (or any bucket URL),
// the proxy, N workers and an evaluator as child processes of this one, a progress line per
// new version, a clean stop on Ctrl-C (workers upload their last delta, the proxy folds it),
// and the final global adapter exported in PEFT format.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "protocol/records.h"
#include "protocol/verify.h"

namespace brl::launch {

struct LocalRunOptions {
  std::string bucket;  // "" = <train.output_dir>/bucket
  int workers = 2;
  double time_limit_s = 0;                              // 0 = until Ctrl-C or grpo.max_steps per worker
  double target_accuracy = 0;                           // stop when an evaluation reaches this (0 = never)
  TargetMetric target_metric = TargetMetric::accuracy;  // what target_accuracy is compared with
  // The target is reached when the mean of the last this many evaluations reaches it (1 = the
  // latest alone): one evaluation of a noisy figure (sampled pass@1 moves ~0.03 between
  // versions) reaches it on a high reading, and the final version then often reads below it.
  int target_window = 1;
  std::string exe;               // the bucketrl executable ("" = this process's)
  std::string log_dir;           // child logs ("" = <train.output_dir>/logs)
  std::vector<double> slowdown;  // per worker, for benchmarks (1 = normal speed)
  bool evaluator = true;
  double eval_interval_s = 0;  // evaluator: at most one evaluation per this many seconds
  std::string http;            // the proxy's --http ADDR:PORT | off ("" = the proxy's default)
};

struct LocalRunSummary {
  int64_t versions = 0, updates = 0;
  double initial_accuracy = -1, final_accuracy = -1, best_accuracy = -1, seconds = 0;
  double seconds_to_target = -1;  // when the launcher saw an evaluation at the target
  // From the run's start to the publication of the version that evaluation scored: free of
  // the evaluator's interval and lag (what a training-speed comparison should use).
  double version_seconds_to_target = -1;
  protocol::EvalRecord first_eval, last_eval;  // version -1: none (pass@k in them when measured)
  std::string bucket, adapter_dir;
  protocol::VerifyReport verify;
};

// The stopping rule above: add() each evaluation's figure; true once `window` of them are in
// and the mean of the last `window` reaches `target`.
class TargetWindow {
 public:
  TargetWindow(int window, double target);
  bool add(double value);
  double mean() const;  // of the last `window` (or fewer, before there are that many)

 private:
  std::vector<double> last_;
  size_t window_;
  double target_;
};

LocalRunSummary run_local(RunConfig cfg, const LocalRunOptions& opt, const std::atomic<bool>& stop);

// The --device of child `index` (workers 0..N-1, then the evaluator as N) on a machine with
// `gpus` GPUs: when model.device names no particular one ("auto", "cuda") and there are two or
// more, one GPU each in turn ("cuda:K", K = index mod gpus), rather than all on the first;
// otherwise "" (each child resolves model.device itself).
std::string spread_device(const std::string& device, int gpus, int index);

// Writes global version `version` (-1 = newest) of the run at `bucket` as a PEFT folder.
std::string export_adapter(const std::string& bucket, int64_t version, const std::string& dir);

}  // namespace brl::launch
