// The GRPO step every worker runs (and `bucketrl train` runs alone), TRL's loop: one optimizer
// step over gradient_accumulation_steps micro-batches of a generation batch. A generation batch
// (prompts from the worker's shard, G completions each with the sampler's log-probs, scored,
// group-normalised advantages, shuffled) is made when the last one has fed steps_per_generation
// micro-batches num_iterations times; then the clipped objective, AdamW on the adapter only,
// gradient clipping and the LR schedule, per optimizer step.
#pragma once

#include <torch/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/grpo_config.h"
#include "generate/generate.h"
#include "grpo/loss.h"
#include "grpo/prompts.h"
#include "model/llama.h"
#include "tasks/task.h"
#include "tokenizer/tokenizer.h"

namespace torch::optim {
class AdamW;
}

namespace brl::grpo {

// One sampled completion as log_completions records it (TRL's completions table).
struct LoggedCompletion {
  std::string prompt, completion;  // the prompt as the model saw it (after the chat template)
  double reward = 0, advantage = 0;
  std::vector<double> rewards;  // each reward function's score, in the task's order
};

// TRL's sampling/ metrics (vllm_importance_sampling_correction): the sampler's mismatch weights'
// min, mean and max, and the mean and max |old - sampler log-prob| over the completion tokens.
struct SamplingStats {
  double is_ratio_min = 0, is_ratio_mean = 0, is_ratio_max = 0, logp_diff_mean = 0, logp_diff_max = 0;
};

// TRL's tools/ metrics (task.tool_command): tool calls per completion, and the share of them
// that failed.
struct ToolStats {
  double call_frequency = 0, failure_frequency = 0;
};

// An optimizer step's statistics. The rollout ones (reward ... completion_length) describe the
// generation batches made in the step, or, in a step that made none, the one it trained on;
// samples, tokens and the generation times count only what the step made.
struct StepStats {
  int64_t step = 0;
  double reward_mean = 0, reward_std = 0, accuracy = 0;  // accuracy: mean of the first reward
  double loss = 0, kl = 0, clip_ratio = 0, grad_norm = 0, lr = 0;
  double completion_length = 0;
  double frac_reward_zero_std = 0;  // groups whose G rewards are all equal: no signal (TRL's name)
  int64_t samples = 0, tokens = 0;
  double gen_seconds = 0, score_seconds = 0, train_seconds = 0;  // score: rewards, advantages, the batch
  std::optional<double> entropy;              // mean token entropy, when the loss needed it (TRL's metric)
  std::optional<double> entropy_coef;         // the bonus's coefficient after the step, when the bonus is on
  std::optional<SamplingStats> sampling;      // with vllm_importance_sampling_correction
  std::optional<ToolStats> tools;             // with task.tool_command (of the generation batches made)
  std::vector<LoggedCompletion> completions;  // every completion of the step, with log_completions
};

// Adds the statistics a step measured only with some settings to its log line: "entropy",
// "entropy_coef", importance_sampling_ratio_min / _mean / _max and
// sampling_logp_difference_mean / _max, tool_call_frequency and tool_failure_frequency.
void add_optional_stats(nlohmann::json& line, const StepStats& s);
// The first `limit` (nullopt: all) of a step's logged completions as JSON objects: prompt,
// completion, reward, advantage and "rewards" {function name: score}.
nlohmann::json completions_json(const StepStats& s, const tasks::Task& task, std::optional<int> limit = std::nullopt);

struct EvalResult {
  int64_t n = 0;
  double accuracy = 0, reward_mean = 0;  // of one answer per prompt (greedy by default)
  // pass@1 and pass@k from k answers sampled per prompt (k = 0: not measured). An answer
  // passes when its correctness reward (the task's first) is full, >= 1.
  int64_t k = 0;
  double pass_at_1 = 0, pass_at_k = 0;
};

// The sampling that pass@k measures: as the rollouts sample (GRPO's temperature, top-k,
// top-p, min-p, repetition penalty), k = num_generations unless set.
struct PassAtKOptions {
  int64_t k = 0;  // 0: off
  int64_t n = 0;  // answers sampled per prompt, >= k (0: k)
  double temperature = 1.0;
  int64_t top_k = 0;
  double top_p = 1.0, min_p = 0.0, repetition_penalty = 1.0;
  uint64_t seed = 0;
};
// train.eval_pass_k: -1 = g.eval_generations() (num_generations_eval, else G), 0 = off, else k;
// train.eval_pass_samples: n.
PassAtKOptions pass_at_k_options(const GrpoConfig& g, int eval_pass_k, int eval_pass_samples = 0);

// The unbiased estimator of pass@k from n samples of which c passed (Chen et al. 2021,
// "Evaluating Large Language Models Trained on Code"): 1 - C(n-c, k) / C(n, k).
double pass_at_k(int64_t n, int64_t c, int64_t k);

// Text completion of a generated token list: stop tokens removed, decoded.
std::string completion_text(const tok::Tokenizer& tk, const std::vector<int32_t>& tokens);
// What the built-in reward functions score: each completion's text, or with tool calling (turns:
// grpo::run_tool_loop's messages) its last assistant turn's content: the text outside its calls
// and reasoning, also where the calls' results were dropped for want of budget.
std::vector<std::string> reward_texts(const tok::Tokenizer& tk, const std::vector<gen::Completion>& comps,
                                      const std::vector<nlohmann::ordered_json>& turns);
// Weighted sum of the task's rewards per completion; weights from cfg.reward_weights or
// the task defaults (1 each, format_weight for a format reward). Also returns the first
// reward's scores (correctness) in *first.
// *per_func, when given, receives every function's scores ([function][completion]). turns:
// each completion as TRL's list of messages where tools were called (RewardFn::score_turns).
std::vector<double> combined_rewards(tasks::Task& task, const std::vector<double>& weights,
                                     const std::vector<const tasks::Example*>& ex,
                                     const std::vector<std::string>& completions, std::vector<double>* first,
                                     std::vector<std::vector<double>>* per_func = nullptr,
                                     const std::vector<nlohmann::ordered_json>* turns = nullptr);

// Greedy (or sampled) evaluation on the task's held-out prompts, and pass@k when pass.k > 0;
// with a tool command (task.tools) each answer gets its rounds of tool calls, as the rollouts
// do (max_new_tokens the whole answer's budget).
EvalResult evaluate(const model::Model& m, const tok::Tokenizer& tk, tasks::Task& task, int max_examples,
                    int max_new_tokens, double temperature = 0.0, uint64_t seed = 0, const PassAtKOptions& pass = {},
                    const nlohmann::json& chat_template_kwargs = nlohmann::json::object(),
                    std::optional<int> max_tool_calling_iterations = std::nullopt);

// One sampled and scored GRPO batch, ready to train on: prompts left-padded to prompt_len,
// completions right-padded to completion_len.
struct PolicyBatch {
  at::Tensor ids, attn, pos;   // [N, prompt_len + completion_len]: long, bool, long
  at::Tensor completion_mask;  // [N, completion_len] float: 1 for tokens that count
  // [N, completion_len]: of the policy that generated them: the sampler's, or with
  // vllm_importance_sampling_correction the trainer's (PolicyOptimizer::old_policy_pass; undefined:
  // the first training pass's own, detached), the sampler's then in sampling_logps.
  at::Tensor old_logps, sampling_logps;
  at::Tensor advantages;  // [N]
  at::Tensor ref_logps;   // [N, completion_len]: adapter off (PolicyOptimizer::reference_pass); beta > 0 only
  int64_t prompt_len = 0, completion_len = 0;
  int64_t pad_to_multiple_of = 1;  // prompt_len, completion_len and every window are multiples of it
  // Each row's prompt and completion tokens, on the host (policy_batch sets them), so that a
  // micro-batch forwards only its own window; empty: every row as long as the batch.
  std::vector<int64_t> prompt_tokens, completion_tokens;
  PolicyBatch to(const at::Device& device) const;   // every tensor moved (the trainer's GPU copy)
  PolicyBatch rows(const at::Tensor& index) const;  // these rows (tensors and lengths), in this order
};

// One micro-batch of an optimizer step: rows [begin, end) of a generation batch, and the
// normalizer of the loss types normalised by tokens (tokens_per_optimizer_step).
struct PolicySlice {
  const PolicyBatch* batch = nullptr;
  int64_t begin = 0, end = 0;
  double num_items_in_batch = 0;
};

// The batch of sampled completions (advantages left undefined): prompts left-padded to
// prompt_len, completions right-padded to completion_len, old_logps = the sampler's log-probs;
// with mask_truncated_completions a completion that hit the length limit is masked out; both
// lengths rounded up to a multiple of pad_to_multiple_of (grpo.pad_to_multiple_of).
PolicyBatch policy_batch(const std::vector<std::vector<int32_t>>& prompts, const std::vector<gen::Completion>& comps,
                         bool mask_truncated_completions, int64_t pad_to_multiple_of = 1);

// `order` (indices of b's rows) with each block of `block` consecutive entries sorted by their
// rows' lengths (completion tokens, then prompt tokens; stable): group_by_length.
std::vector<int64_t> length_grouped_order(const PolicyBatch& b, std::vector<int64_t> order, int64_t block);

// The prompt and completion columns rows [begin, end) of b forward: their longest prompt and
// completion (at least 1), rounded up to b.pad_to_multiple_of; the whole width without lengths.
std::pair<int64_t, int64_t> micro_batch_window(const PolicyBatch& b, int64_t begin, int64_t end);

// log p(completion token | prefix) [end - begin, completion_len] for rows [begin, end) of b,
// with the logits divided by `temperature` (the sampling temperature) and the log-softmax over
// the whole vocabulary, before any top-k / top-p: TRL's _get_per_token_logps_and_entropies.
// The same definition as generate's Completion::logprobs, so a policy that has not moved has
// ratio 1. Only the rows' own window is forwarded (columns that are padding in all of them are
// left out; they read 0). entropy: optionally set to the entropy of each of those distributions
// (detached, or with its gradient when entropy_grad: the entropy bonus).
at::Tensor completion_logprobs(const model::Model& m, const PolicyBatch& b, int64_t begin, int64_t end,
                               double temperature, at::Tensor* entropy = nullptr, bool entropy_grad = false);

struct PolicyStats {
  double loss = 0, kl = 0, clip_ratio = 0, grad_norm = 0;
  std::optional<double> entropy, entropy_coef;  // as StepStats
  std::optional<SamplingStats> sampling;
};

// The training half of GRPO: the reference pass (adapter off) of a generation batch when
// beta > 0, and optimizer steps: the clipped objective over micro-batches, gradient clipping,
// AdamW on the adapter only. GrpoTrainer runs it after generation; bench/train_step_bench runs
// it alone.
class PolicyOptimizer {
 public:
  // The model must have an adapter attached; the base is frozen here.
  PolicyOptimizer(model::Model& m, const GrpoConfig& cfg);
  ~PolicyOptimizer();
  // Sets b.ref_logps when beta > 0 (b on the model's device).
  void reference_pass(PolicyBatch& b);
  // With vllm_importance_sampling_correction, once per generation batch before its first step:
  // the sampler's log-probs move to b.sampling_logps, and b.old_logps become the trainer's: a
  // no-grad pass now, or, when every row is trained before the first update (on_policy),
  // undefined (each micro-batch's own, detached). Without the correction: nothing.
  void old_policy_pass(PolicyBatch& b, bool on_policy);
  // One optimizer step at learning rate lr over these micro-batches (on the model's device, with
  // ref_logps when beta > 0), each cut to micro_batch_size() rows.
  PolicyStats step(const std::vector<PolicySlice>& slices, double lr);
  // A whole generation batch as one slice: its reference pass, then num_iterations optimizer
  // steps over all of its rows (the statistics their mean).
  PolicyStats optimize(const PolicyBatch& b, double lr);
  torch::optim::AdamW& adamw() { return *opt_; }
  int64_t reference_passes() const { return ref_passes_; }
  int64_t old_policy_passes() const { return old_passes_; }
  // Sequences per training micro-batch: per_device_train_batch_size, or less once a
  // micro-batch ran out of memory (auto_find_batch_size).
  int64_t micro_batch_size() const { return mb_; }
  void reset_state();  // AdamW's moments and step count back to a fresh optimizer's
  // The first moment only: the second moment and step count stay, and the first moment's bias
  // correction restarts, as Adam's does for a moment that starts at zero (see
  // fresh_momentum_lr_scale).
  void reset_momentum();
  // AdamW's second moment per adapter parameter (in lora::parameters order) and its step
  // count; empty and 0 while AdamW has no state.
  std::vector<torch::Tensor> second_moments() const;
  int64_t adam_step() const;
  // A state of these second moments and step count whose first moment is zero, corrected as
  // after reset_momentum; empty v: a fresh optimizer.
  void set_second_moments(const std::vector<torch::Tensor>& v, int64_t adam_step);
  // The entropy bonus's coefficient (adaptive control's state, kept with the optimizer's).
  EntropyControl& entropy_control() { return entropy_; }
  const EntropyControl& entropy_control() const { return entropy_; }

 private:
  model::Model& m_;
  GrpoConfig cfg_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::AdamW> opt_;
  int64_t ref_passes_ = 0, old_passes_ = 0;
  int64_t since_momentum_reset_ = -1;  // optimizer steps since reset_momentum(); -1: never
  int64_t mb_;                         // micro_batch_size()
  EntropyControl entropy_;
  // Runs pass(micro-batch size); on running out of memory, halves the size and runs it again
  // (auto_find_batch_size), else throws UserError naming the fix. `what` names the pass.
  void with_micro_batch(const char* what, const std::function<void(int64_t)>& pass);
  // Every row's completion log-probs, without gradients, adapters on or off (`what` names the pass).
  at::Tensor no_grad_logps(const PolicyBatch& b, const char* what, bool adapters);
};

// AdamW divides its first moment by 1 - beta1^t, t counting every step, so once t is large a
// first moment zeroed at a sync (reset_momentum) is not corrected at all: the step after it is
// (1 - beta1) = a tenth of a normal one, and for a steady gradient a worker that syncs every ~6
// steps moves at ~0.3x its learning rate. The learning rate times this factor, (1 - beta1^t) /
// (1 - beta1^k) for the k-th step since the reset, makes the correction 1 - beta1^k, the one a
// moment started at zero needs; the weight decay divided by it keeps lr x weight_decay as is.
// Measured (issue 18, skill recipe, 2 workers, 5 pairs of 5-minute runs): held-out pass@1
// higher at the end of every pair, by 0.02 to 0.05, mean 0.04 (BENCHMARKS.md, "The skill demo").
double fresh_momentum_lr_scale(double beta1, int64_t step, int64_t steps_since_reset);

class TurnParser;

class GrpoTrainer {
 public:
  // The model must have an adapter attached (lora::attach); only it is trained.
  GrpoTrainer(model::Model& m, const tok::Tokenizer& tk, tasks::Task& task, GrpoConfig cfg, int shard = 0,
              int num_shards = 1, std::vector<double> reward_weights = {});
  ~GrpoTrainer();

  StepStats step();
  int64_t global_step() const { return step_; }  // optimizer steps taken
  // Whether the next step starts with a new generation batch: no rollouts of the last one are
  // left to train on (a worker syncs here, so a new global version never meets older rollouts).
  bool at_generation_boundary() const;
  uint64_t example_cursor() const { return cursor_; }
  // Optimizer state + counters, for resume.
  void save_state(const std::string& path);
  void load_state(const std::string& path);
  // What a worker keeps across restarts and machines (a safetensors buffer): AdamW's second
  // moment in bf16 (it only scales steps) and step count, the trainer's step and prompt
  // counters. Not the first moment, which a worker zeroes on every adoption anyway
  // (sync.optimizer_state); so a loaded state starts it at zero, corrected as after
  // reset_momentum. load_portable_state throws UserError naming `label` and what does not fit
  // this trainer's adapter, and changes nothing then.
  std::string portable_state() const;
  void load_portable_state(const std::string& bytes, const std::string& label);
  // The trainer step a portable state records, without loading it; nullopt if unreadable.
  static std::optional<int64_t> portable_state_step(const std::string& bytes);
  double current_lr() const;
  void reset_optimizer() { policy_->reset_state(); }
  void reset_momentum() { policy_->reset_momentum(); }
  // Whether step() fills StepStats::completions (log_completions).
  void set_log_completions(bool on) { log_completions_ = on; }
  torch::optim::AdamW& optimizer() { return policy_->adamw(); }
  // Count of reference (adapter-off) forward passes run: 0 when beta == 0.
  int64_t reference_passes() const { return policy_->reference_passes(); }
  int64_t old_policy_passes() const { return policy_->old_policy_passes(); }

 private:
  model::Model& m_;
  const tok::Tokenizer& tk_;
  tasks::Task& task_;
  GrpoConfig cfg_;
  int shard_, num_shards_;
  std::vector<double> weights_;
  std::unique_ptr<PolicyOptimizer> policy_;
  std::unique_ptr<TurnParser> turns_;  // with task.tools: how the model's turns are read
  int64_t step_ = 0;
  uint64_t cursor_ = 0;
  bool log_completions_ = false;
  int64_t gen_prompts_;  // prompts generated at once: all of a generation's, or fewer after running out of memory
  struct Rollouts;
  std::shared_ptr<Rollouts> rollouts_;  // the generation batch being trained on; none after a restart
  std::shared_ptr<Rollouts> generate(int64_t micro_batch);
};

}  // namespace brl::grpo
