// The single-process training loop shared by `bucketrl train` and `bucketrl demo`:
// GRPO steps with logging, periodic held-out eval, PEFT checkpoints, resume, a time limit.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "grpo/trainer.h"
#include "model/llama.h"
#include "tasks/task.h"
#include "tokenizer/tokenizer.h"

namespace brl::grpo {

// What every training or evaluating process opens from a run config: the base model from
// cfg.model.path with the LoRA adapter attached (PEFT init), its tokenizer, the task and the
// reward weights (1 each, task.format_weight for the format reward).
struct Session {
  model::Model model;
  tok::Tokenizer tokenizer;
  std::unique_ptr<tasks::Task> task;
  std::vector<double> reward_weights;
};
Session open_session(const RunConfig& cfg);

// The held-out evaluation a run config asks for: train.eval_* (pass@k too), greedy or at
// train.eval_temperature, grpo.max_completion_length tokens, grpo.chat_template_kwargs.
EvalResult evaluate_held_out(const model::Model& m, const tok::Tokenizer& tk, tasks::Task& task, const RunConfig& cfg);

struct TrainSummary {
  int64_t steps = 0;
  double initial_accuracy = 0, final_accuracy = 0, seconds = 0;
  EvalResult initial_eval, final_eval;  // with pass@k when train.eval_pass_k asks for it
  std::string adapter_dir;
};

// Runs until grpo.max_steps, or `time_limit_s` (> 0), or when held-out accuracy (or pass@1,
// TargetMetric::pass_at_1) reaches `target_accuracy` (> 0) at an evaluation. Writes
// train.output_dir/{checkpoint-N,adapter,metrics.jsonl}.
TrainSummary run_training(RunConfig cfg, bool resume, double time_limit_s = 0, double target_accuracy = 0,
                          TargetMetric target_metric = TargetMetric::accuracy);

// The newest checkpoint-<N> folder under out holding an adapter and trainer state, or "".
std::string latest_checkpoint(const std::string& out);

}  // namespace brl::grpo
