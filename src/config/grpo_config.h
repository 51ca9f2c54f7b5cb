// GRPO configuration with TRL's GRPOConfig names and defaults where they exist
// (trl/trainer/grpo_config.py). validate() quotes the offending values.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "util/config_table.h"

namespace brl::grpo {

// The loss types (src/grpo/loss.h says what each computes); config files use TRL's names.
enum class LossType { grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo, vespo };
inline const EnumNames<LossType> kLossTypes{{"grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"}};
// One importance ratio per token, or one per sequence (GSPO).
enum class ImportanceSamplingLevel { token, sequence };
inline const EnumNames<ImportanceSamplingLevel> kImportanceSamplingLevels{{"token", "sequence"}};
// What a group's centred rewards are divided by: the group's std, the whole batch's, nothing.
enum class ScaleRewards { group, batch, none };
inline const EnumNames<ScaleRewards> kScaleRewards{{"group", "batch", "none"}};
// How several reward functions make one advantage: TRL's sum_then_normalize (weighted sum,
// then scale_rewards) or normalize_then_sum (GDPO: each function normalised in its group,
// then the weighted sum normalised over the batch).
enum class MultiObjectiveAggregation { sum_then_normalize, normalize_then_sum };
inline const EnumNames<MultiObjectiveAggregation> kMultiObjectiveAggregations{
    {"sum_then_normalize", "normalize_then_sum"}};
// TRL's vllm_importance_sampling_mode: how the sampler's mismatch weight exp(old - sampler log-probs)
// is bounded: clamped (truncate) or zeroed (mask) outside [clip_min, clip_max], per token or as one
// weight per sequence (the summed difference).
enum class SamplingCorrectionMode { token_truncate, token_mask, sequence_truncate, sequence_mask };
inline const EnumNames<SamplingCorrectionMode> kSamplingCorrectionModes{
    {"token_truncate", "token_mask", "sequence_truncate", "sequence_mask"}};
enum class LrSchedulerType { linear, constant, cosine };
inline const EnumNames<LrSchedulerType> kLrSchedulerTypes{{"linear", "constant", "cosine"}};
// In JSON (the resolved config, run.json) as their names.
inline void to_json(nlohmann::json& j, LossType e) { j = kLossTypes(e); }
inline void to_json(nlohmann::json& j, ImportanceSamplingLevel e) { j = kImportanceSamplingLevels(e); }
inline void to_json(nlohmann::json& j, ScaleRewards e) { j = kScaleRewards(e); }
inline void to_json(nlohmann::json& j, SamplingCorrectionMode e) { j = kSamplingCorrectionModes(e); }
inline void to_json(nlohmann::json& j, LrSchedulerType e) { j = kLrSchedulerTypes(e); }
inline void to_json(nlohmann::json& j, MultiObjectiveAggregation e) { j = kMultiObjectiveAggregations(e); }

// Normalised by the active tokens of the whole generation batch (num_items_in_batch), so the
// trainer must not average its micro-batches again: dapo, cispo and vespo.
bool normalizes_by_batch_tokens(LossType t);

struct GrpoConfig {
  // Generation
  int num_generations = 8;                  // G: completions per prompt
  std::optional<int> num_generations_eval;  // answers sampled per held-out prompt for pass@k (default: G)
  int max_prompt_length = 512;              // tokens; longer prompts are truncated from the left
  int max_completion_length = 256;          // tokens per completion
  double temperature = 1.0;
  double top_p = 1.0;
  int top_k = 0;                    // 0 = off (TRL: None)
  double min_p = 0.0;               // 0 = off (TRL: None)
  double repetition_penalty = 1.0;  // 1 = off
  // Variables for the chat template of conversational prompts (e.g. enable_thinking); an
  // example's own chat_template_kwargs override these key by key.
  nlohmann::json chat_template_kwargs = nlohmann::json::object();
  // TRL's generation_kwargs: sampling settings that take precedence over the keys above. Those with
  // a knob here (temperature, top_p, top_k, min_p, repetition_penalty, max_new_tokens, do_sample
  // = true) set it, so the log-probs use the same temperature as the sampler; other keys are
  // refused by name.
  nlohmann::json generation_kwargs = nlohmann::json::object();
  // Batch (TRL's): an optimizer step accumulates gradient_accumulation_steps micro-batches of
  // per_device_train_batch_size completions. Completions are generated generation_batch_size at
  // a time (generation_batch_size / G prompts), shuffled, and trained on as steps_per_generation
  // consecutive micro-batches, num_iterations times over, before the next generation. By default
  // one generation batch is one optimizer step's micro-batches.
  int per_device_train_batch_size = 8;  // completions per micro-batch
  int gradient_accumulation_steps = 1;
  std::optional<int> steps_per_generation;  // micro-batches per generation batch (default: gradient_accumulation_steps)
  std::optional<int> generation_batch_size;  // completions per generation batch; set this or steps_per_generation
  // Optimisation (AdamW on the adapter only)
  double learning_rate = 1e-6;
  double weight_decay = 0.0;
  double adam_beta1 = 0.9, adam_beta2 = 0.999, adam_epsilon = 1e-8;
  double max_grad_norm = 1.0;
  // transformers' gradient_checkpointing: keep each decoder layer's input, not its
  // activations, and recompute the layer in backward (model/checkpoint.h).
  bool gradient_checkpointing = false;
  // TRL's disable_dropout: no dropout while training (here the adapter's lora_dropout), so the
  // policy's log-probs are the sampler's, and the on-policy ratio is 1.
  bool disable_dropout = false;
  // TRL's cast_lm_head_to_fp32 (ScaleRL): logits and log-probs from an f32 copy of the LM head
  // over f32 hidden states (model::Model::lm_head_f32), for the sampler, the trainer and the
  // evaluator alike; a no-op over an f32 model.
  bool cast_lm_head_to_fp32 = false;
  // transformers' group_by_length: rows of similar length train in the same micro-batch, so
  // each forwards a narrower window (PolicyBatch: its rows' longest prompt and completion).
  // Rows are regrouped only among those that share an optimizer step, so the step's gradient
  // is unchanged for every loss type whose normalizer ignores how rows are split (all but bnpo;
  // and top_entropy_quantile < 1 ranks entropies per micro-batch).
  bool group_by_length = false;
  // TRL's pad_to_multiple_of: prompts and completions padded to a multiple of this many tokens,
  // in the generation batch and in each micro-batch's window, so that every training forward has
  // such a shape. Unset (TRL's "auto" off Neuron, or null): no rounding.
  std::optional<int> pad_to_multiple_of;
  // TRL's max_tool_calling_iterations: with a tool command (task.tool_command), how many rounds
  // of tool calls and continued generation a completion gets; unset: until no completion calls
  // a tool (or its max_completion_length is spent).
  std::optional<int> max_tool_calling_iterations;
  // transformers' auto_find_batch_size: when a training micro-batch runs out of memory, halve
  // it and retry; when generation does, generate the step's prompts in halves. The prompts and
  // completions per step stay. A worker on a smaller GPU then trains instead of crashing.
  bool auto_find_batch_size = true;
  LrSchedulerType lr_scheduler_type = LrSchedulerType::linear;
  double warmup_ratio = 0.0;
  int max_steps = 100;
  // Objective
  double beta = 0.0;                   // KL weight; 0 = no reference pass
  double epsilon = 0.2;                // lower clip
  std::optional<double> epsilon_high;  // upper clip; default = epsilon
  int num_iterations = 1;              // passes per generation batch (mu)
  LossType loss_type = LossType::dapo;
  ImportanceSamplingLevel importance_sampling_level = ImportanceSamplingLevel::token;
  std::optional<double> delta;  // two-sided clip: cap the unclipped ratio (INTELLECT-2; > 1 + epsilon)
  double sapo_temperature_pos = 1.0, sapo_temperature_neg = 1.05;  // sapo's gate temperatures
  // vespo's gamma weight phi(w) = e^(lambda + k log w - lambda w) of the sequence ratio w
  double vespo_k_pos = 2.0, vespo_lambda_pos = 3.0, vespo_k_neg = 3.0, vespo_lambda_neg = 2.0;
  double top_entropy_quantile = 1.0;  // < 1: policy term on the top fraction of tokens by entropy
  double entropy_coef = 0.0;          // entropy bonus: loss - entropy_coef x mean token entropy
  // TRL's adaptive entropy control (Skywork-OR1): entropy_coef is the starting coefficient,
  // moved by entropy_coef_delta each optimizer step within [entropy_coef_min, entropy_coef_max],
  // and applied only while the last step's mean entropy is at or below entropy_target (nats).
  bool use_adaptive_entropy = false;
  double entropy_coef_min = 0.0, entropy_coef_max = 1.0, entropy_coef_delta = 0.005, entropy_target = 0.2;
  std::optional<double> off_policy_mask_threshold;  // DeepSeek-V3.2's off-policy sequence mask
  bool use_bias_correction_kl = true;               // k3 KL times the importance ratio (TRL's default)
  // TRL's vllm_importance_sampling_* (our decoder in vLLM's place): the trainer's own log-probs
  // are the old policy's (a no-grad pass when the batch is trained after an update, else the
  // first pass's, detached), and each token's loss is weighted by exp(old - sampler log-probs),
  // bounded as the mode says (truncated importance sampling). Off: the sampler's log-probs are
  // the old policy's, so a mismatch between the two shows in the clipped ratio.
  bool vllm_importance_sampling_correction = false;
  SamplingCorrectionMode vllm_importance_sampling_mode = SamplingCorrectionMode::sequence_mask;
  std::optional<double> vllm_importance_sampling_clip_max = 3.0;  // unset (null) or inf: no upper bound
  std::optional<double> vllm_importance_sampling_clip_min;        // unset: no lower bound
  ScaleRewards scale_rewards = ScaleRewards::group;
  std::vector<double> reward_weights;  // one per reward function; empty = all 1
  MultiObjectiveAggregation multi_objective_aggregation = MultiObjectiveAggregation::sum_then_normalize;
  bool mask_truncated_completions = false;
  int seed = 42;

  double eps_high() const { return epsilon_high.value_or(epsilon); }
  int eval_generations() const { return num_generations_eval.value_or(num_generations); }
  // Resolved as TRL resolves them (validate() checks they are consistent).
  int micro_batches_per_generation() const {
    if (steps_per_generation) return *steps_per_generation;
    if (generation_batch_size) return *generation_batch_size / per_device_train_batch_size;
    return gradient_accumulation_steps;
  }
  int completions_per_generation() const { return per_device_train_batch_size * micro_batches_per_generation(); }
  int prompts_per_generation() const { return completions_per_generation() / num_generations; }
  // A generation batch is trained on only before the first optimizer step after it was sampled
  // (TRL's gradient_accumulation_steps % (steps_per_generation x num_iterations) == 0): the
  // trainer's first pass has the old policy's log-probs.
  bool trains_on_policy() const {
    return gradient_accumulation_steps % (micro_batches_per_generation() * num_iterations) == 0;
  }

  ConfigTable table();
  // Moves generation_kwargs onto the knobs it names (idempotent: a resolved config reads back the
  // same); throws UserError naming `source` and the key it cannot take.
  void apply_generation_kwargs(const std::string& source);
  void validate() const;  // throws UserError quoting the values
};

}  // namespace brl::grpo
