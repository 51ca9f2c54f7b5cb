// The single-process training loop shared by `bucketrl train` and `bucketrl demo`:
// GRPO steps with logging, periodic held-out eval, PEFT checkpoints, resume, a time limit.
#pragma once

#include <string>

#include "config/run_config.h"

namespace brl::grpo {

struct TrainSummary {
  int64_t steps = 0;
  double initial_accuracy = 0, final_accuracy = 0, seconds = 0;
  std::string adapter_dir;
};

// Runs until grpo.max_steps, or `time_limit_s` (> 0), or when held-out accuracy reaches
// `target_accuracy` (> 0) at an evaluation. Writes train.output_dir/{checkpoint-N,adapter,metrics.jsonl}.
TrainSummary run_training(RunConfig cfg, bool resume, double time_limit_s = 0, double target_accuracy = 0);

// The newest checkpoint-<N> folder under out holding an adapter and trainer state, or "".
std::string latest_checkpoint(const std::string& out);

}  // namespace brl::grpo
