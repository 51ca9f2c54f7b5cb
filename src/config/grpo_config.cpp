#include "config/grpo_config.h"

#include <cmath>
#include <sstream>

#include "util/error.h"

namespace brl::grpo {

bool normalizes_by_batch_tokens(LossType t) {
  return t == LossType::dapo || t == LossType::cispo || t == LossType::vespo;
}

ConfigTable GrpoConfig::table() {
  ConfigTable t("grpo");
  t.add("num_generations", &num_generations, "completions per prompt (G), >= 2")
      .add("num_generations_eval", &num_generations_eval,
           "the evaluator's k: answers sampled per held-out prompt for pass@1 / pass@k when train.eval_pass_k "
           "= -1 (default: num_generations)")
      .add("max_prompt_length", &max_prompt_length, "max prompt tokens (left-truncated)")
      .add("max_completion_length", &max_completion_length, "max new tokens per completion")
      .add("temperature", &temperature, "sampling temperature (> 0)")
      .add("top_p", &top_p, "nucleus sampling mass in (0, 1]")
      .add("top_k", &top_k, "top-k sampling, 0 = off")
      .add("min_p", &min_p,
           "min-p sampling: drop tokens less likely than min_p x the most likely one (after top_k and top_p), 0 = off")
      .add("repetition_penalty", &repetition_penalty,
           "divide the logits of tokens already in the prompt or completion by this (multiply where negative), "
           "1 = off")
      .add("chat_template_kwargs", &chat_template_kwargs,
           "variables for the chat template of conversational prompts, e.g. {enable_thinking = false}; an "
           "example's own override them")
      .add("generation_kwargs", &generation_kwargs,
           "TRL's generation_kwargs, over the knobs above: temperature, top_p, top_k, min_p, repetition_penalty, "
           "max_new_tokens (= max_completion_length), do_sample (true)")
      .add("per_device_train_batch_size", &per_device_train_batch_size, "completions per micro-batch")
      .add("gradient_accumulation_steps", &gradient_accumulation_steps, "micro-batches per optimizer step")
      .add("steps_per_generation", &steps_per_generation,
           "micro-batches trained per generation batch (default: gradient_accumulation_steps); more than "
           "gradient_accumulation_steps trains several optimizer steps on one generation, the later ones off-policy")
      .add("generation_batch_size", &generation_batch_size,
           "completions per generation batch (default: per_device_train_batch_size x steps_per_generation); set "
           "this or steps_per_generation")
      .add("learning_rate", &learning_rate, "AdamW learning rate")
      .add("weight_decay", &weight_decay, "AdamW weight decay")
      .add("adam_beta1", &adam_beta1, "AdamW beta1")
      .add("adam_beta2", &adam_beta2, "AdamW beta2")
      .add("adam_epsilon", &adam_epsilon, "AdamW epsilon")
      .add("max_grad_norm", &max_grad_norm, "gradient clipping norm, 0 = off")
      .add("gradient_checkpointing", &gradient_checkpointing,
           "recompute each decoder layer in backward instead of keeping its activations")
      .add("disable_dropout", &disable_dropout,
           "no dropout while training (the adapter's lora.lora_dropout): log-probs as the sampler's")
      .add("cast_lm_head_to_fp32", &cast_lm_head_to_fp32,
           "compute logits and log-probs with a float32 copy of the LM head over float32 hidden states (ScaleRL; "
           "for bf16 models: the sampler's and the trainer's log-probs agree more closely)")
      .add("group_by_length", &group_by_length,
           "sort the rows that share an optimizer step by length into its micro-batches (less padding to forward)")
      .add("pad_to_multiple_of", &pad_to_multiple_of,
           "pad prompts and completions to a multiple of this many tokens in every training forward (unset, "
           "\"auto\" or null: no rounding)")
      .add("max_tool_calling_iterations", &max_tool_calling_iterations,
           "with task.tool_command: rounds of tool calls per completion (unset, \"auto\" or null: until none "
           "calls a tool)")
      .add("auto_find_batch_size", &auto_find_batch_size,
           "on running out of memory, halve the training micro-batch, or the prompts generated at once, and retry")
      .add("lr_scheduler_type", &lr_scheduler_type, kLrSchedulerTypes, "linear | constant | cosine")
      .add("warmup_ratio", &warmup_ratio, "fraction of max_steps spent warming up")
      .add("max_steps", &max_steps, "optimizer steps")
      .add("beta", &beta, "KL coefficient (k3 estimator against the adapter-off model)")
      .add("epsilon", &epsilon, "lower clip of the importance ratio")
      .add("epsilon_high", &epsilon_high, "upper clip (default: epsilon)")
      .add("num_iterations", &num_iterations, "optimisation passes per generation batch")
      .add("loss_type", &loss_type, kLossTypes, "grpo | bnpo | dr_grpo | dapo | cispo | sapo | luspo | vespo")
      .add("importance_sampling_level", &importance_sampling_level, kImportanceSamplingLevels,
           "token | sequence (GSPO: one ratio per sequence)")
      .add("delta", &delta, "two-sided clip: cap the unclipped ratio at delta (off by default; > 1 + epsilon_high)")
      .add("sapo_temperature_pos", &sapo_temperature_pos, "sapo: gate temperature for positive advantages")
      .add("sapo_temperature_neg", &sapo_temperature_neg, "sapo: gate temperature for the others")
      .add("vespo_k_pos", &vespo_k_pos, "vespo: power k of the gamma weight for advantages >= 0")
      .add("vespo_lambda_pos", &vespo_lambda_pos, "vespo: decay lambda of the gamma weight for advantages >= 0")
      .add("vespo_k_neg", &vespo_k_neg, "vespo: power k for negative advantages")
      .add("vespo_lambda_neg", &vespo_lambda_neg, "vespo: decay lambda for negative advantages")
      .add("entropy_coef", &entropy_coef,
           "entropy bonus: subtract entropy_coef x the mean token entropy (over the tokens the policy term "
           "keeps) from the loss, to keep exploring; with use_adaptive_entropy the starting coefficient")
      .add("use_adaptive_entropy", &use_adaptive_entropy,
           "adaptive entropy control (Skywork-OR1): after each optimizer step move entropy_coef by "
           "entropy_coef_delta, up while the step's mean entropy is at or below entropy_target, else down; the "
           "bonus applies only at or below the target")
      .add("entropy_coef_min", &entropy_coef_min, "adaptive entropy control: lower bound of entropy_coef")
      .add("entropy_coef_max", &entropy_coef_max, "adaptive entropy control: upper bound of entropy_coef")
      .add("entropy_coef_delta", &entropy_coef_delta, "adaptive entropy control: step of entropy_coef")
      .add("entropy_target", &entropy_target,
           "adaptive entropy control: target mean token entropy in nats (set it near the entropy early in "
           "training)")
      .add("top_entropy_quantile", &top_entropy_quantile,
           "keep in the policy term only the top fraction of tokens by entropy (1 = all; the paper: 0.2)")
      .add("off_policy_mask_threshold", &off_policy_mask_threshold,
           "drop negative-advantage sequences whose mean log-prob drift exceeds this (off by default)")
      .add("use_bias_correction_kl", &use_bias_correction_kl, "multiply the k3 KL term by the importance ratio")
      .add("vllm_importance_sampling_correction", &vllm_importance_sampling_correction,
           "correct the sampler/trainer mismatch (TRL's name; bucketrl's decoder in vLLM's place): old log-probs "
           "from the trainer, each token's loss weighted by exp(old - sampler log-probs), bounded by the mode")
      .add("vllm_importance_sampling_mode", &vllm_importance_sampling_mode, kSamplingCorrectionModes,
           "token_truncate | token_mask | sequence_truncate | sequence_mask: clamp (truncate) or zero (mask) "
           "weights outside [clip_min, clip_max], per token or per sequence")
      .add("vllm_importance_sampling_clip_max", &vllm_importance_sampling_clip_max,
           "upper bound of the mismatch weight (null or inf: none)")
      .add("vllm_importance_sampling_clip_min", &vllm_importance_sampling_clip_min,
           "lower bound of the mismatch weight (unset: none)")
      .add("scale_rewards", &scale_rewards, kScaleRewards, "group | batch | none")
      .add("reward_weights", &reward_weights, "weight per reward function")
      .add("multi_objective_aggregation", &multi_objective_aggregation, kMultiObjectiveAggregations,
           "sum_then_normalize (weighted sum, then scale_rewards) | normalize_then_sum (GDPO: each reward "
           "normalised in its group, then the weighted sum over the batch; scale_rewards unused)")
      .add("mask_truncated_completions", &mask_truncated_completions, "drop completions that hit the length limit")
      .add("seed", &seed, "random seed");
  // TRL's GRPOConfig keys without a counterpart here, for configs carried over from TRL.
  const std::string engine =
      "bucketrl samples with its own decoder (a static KV cache and CUDA graphs on a GPU) and trains on its "
      "log-probabilities";
  t.foreign("use_vllm", engine)
      .foreign("vllm_importance_sampling_cap", "TRL renamed it vllm_importance_sampling_clip_max (1.6); use that")
      .foreign("vllm_*", engine)
      .foreign("use_transformers_continuous_batching", engine)
      .foreign("transformers_continuous_batching_config", engine)
      .foreign("use_transformers_paged", engine)
      .foreign("cache_implementation", engine)
      .foreign("sync_ref_model",
               "the reference is the base with the adapter off, as in TRL with PEFT (which refuses sync_ref_model "
               "too)")
      .foreign("ref_model_mixup_alpha", "no reference model is synced (see sync_ref_model)")
      .foreign("ref_model_sync_steps", "no reference model is synced (see sync_ref_model)")
      .foreign("model_init_kwargs", "the model is [model] path (a Hugging Face folder), its dtype [model] dtype")
      .foreign("log_completions_hub_repo", "completions go to <output_dir>/completions.jsonl and worker logs")
      .foreign("ds3_gather_for_generation", "there is no DeepSpeed: each worker holds the whole model")
      .foreign("trust_remote_code",
               "no Python modelling code runs: the architectures (llama, mistral, qwen2, qwen3) are built in")
      .foreign("router_aux_loss_coef", "the supported architectures are dense: there is no router")
      .foreign("log_unique_prompts", "completions.jsonl and the worker logs record every completion with its prompt")
      .foreign("log_multimodal", "prompts are text");
  // TrainingArguments' keys a GRPOConfig often carries, with where their job is done here.
  const std::string metrics =
      "metrics go to <output_dir>/metrics.jsonl, the worker logs and the proxy's /metrics (Prometheus)";
  t.foreign("bf16", "the weights' dtype is [model] dtype (auto: bfloat16 on a GPU, float32 on the CPU)")
      .foreign("fp16", "the weights' dtype is [model] dtype: float32 or bfloat16")
      .foreign("tf32", "the weights' dtype is [model] dtype; matrix products run in it")
      .foreign("report_to", metrics)
      .foreign("run_name", metrics)
      .foreign("logging_dir", metrics)
      .foreign("optim",
               "the optimizer is AdamW on the adapter (adam_beta1, adam_beta2, adam_epsilon, weight_decay, "
               "max_grad_norm)")
      .foreign("num_train_epochs",
               "a run is max_steps optimizer steps; the prompts cycle, each epoch in a new seeded order ([task] "
               "shuffle_dataset)")
      .foreign("warmup_steps", "set warmup_ratio (a fraction of max_steps)")
      .foreign("lr_scheduler_kwargs", "lr_scheduler_type (linear | constant | cosine) takes no options")
      .foreign("gradient_checkpointing_kwargs",
               "gradient_checkpointing = true recomputes each decoder layer in backward; it takes no options")
      .foreign("save_strategy", "checkpoints are written every [train] save_steps")
      .foreign("save_total_limit", "a run keeps every checkpoint-N; a bucket run keeps [proxy] keep_versions")
      .foreign("eval_strategy", "evaluation runs every [train] eval_steps")
      .foreign("per_device_eval_batch_size", "evaluation is sized by [train] eval_max_examples and eval_pass_k")
      .foreign("push_to_hub", "adapters are PEFT folders in output_dir (and versions in the bucket); there is no hub")
      .foreign("hub_*", "adapters are PEFT folders in output_dir (and versions in the bucket); there is no hub")
      .foreign("dataloader_*", "prompts come from [task]; there is no data loader")
      .foreign("torch_compile", "bucketrl's kernels are its own C++ and CUDA: there is nothing to compile")
      .foreign("use_liger_kernel",
               "bucketrl's kernels are its own: the LM head's log-softmax already runs in chunks without the "
               "logits of the whole batch");
  return t;
}

void GrpoConfig::apply_generation_kwargs(const std::string& source) {
  if (!generation_kwargs.is_object())
    throw UserError(source + ": grpo.generation_kwargs must be a table, e.g. {top_k = 50}");
  for (const auto& item : generation_kwargs.items()) {
    // Not a structured binding: clang 14 (the sanitizer build) cannot capture one in a lambda.
    const std::string& key = item.key();
    const nlohmann::json& v = item.value();
    const std::string what = source + ": grpo.generation_kwargs." + key + " = " + v.dump();
    auto number = [&]() {
      if (!v.is_number()) throw UserError(what + " is not a number");
      return v.get<double>();
    };
    auto whole = [&]() {
      if (!v.is_number_integer()) throw UserError(what + " is not an integer");
      return v.get<int>();
    };
    if (key == "temperature") temperature = number();
    else if (key == "top_p") top_p = number();
    else if (key == "top_k") top_k = whole();
    else if (key == "min_p") min_p = number();
    else if (key == "repetition_penalty") repetition_penalty = number();
    else if (key == "max_new_tokens") max_completion_length = whole();
    else if (key == "do_sample") {
      if (v != true)
        throw UserError(what + ": GRPO samples its completions",
                        "remove it (greedy groups would have no variance to learn from)");
    } else {
      throw UserError(what + ": not a setting bucketrl's sampler has",
                      "remove it; it takes temperature, top_p, top_k, min_p, repetition_penalty, max_new_tokens and "
                      "do_sample = true, which set the [grpo] keys of those names (max_new_tokens: "
                      "max_completion_length)");
    }
  }
}

void GrpoConfig::validate() const {
  auto fail = [](const std::string& m, const std::string& hint = "") { throw UserError("grpo config: " + m, hint); };
  auto q = [](auto v) {
    std::ostringstream s;
    s << v;
    return s.str();
  };
  if (num_generations < 2)
    fail("num_generations (" + q(num_generations) + ") must be >= 2: group-relative advantages need a group");
  if (num_generations_eval && *num_generations_eval < 1)
    fail("num_generations_eval (" + q(*num_generations_eval) + ") must be >= 1", "or leave it unset: num_generations");
  if (per_device_train_batch_size < 1)
    fail("per_device_train_batch_size (" + q(per_device_train_batch_size) + ") must be >= 1");
  if (gradient_accumulation_steps < 1)
    fail("gradient_accumulation_steps (" + q(gradient_accumulation_steps) + ") must be >= 1");
  if (steps_per_generation && generation_batch_size)
    fail("steps_per_generation (" + q(*steps_per_generation) + ") and generation_batch_size (" +
             q(*generation_batch_size) + ") are both set",
         "set one: generation_batch_size = per_device_train_batch_size x steps_per_generation");
  if (steps_per_generation && *steps_per_generation < 1)
    fail("steps_per_generation (" + q(*steps_per_generation) + ") must be >= 1");
  if (generation_batch_size && (*generation_batch_size < 1 || *generation_batch_size % per_device_train_batch_size))
    fail("generation_batch_size (" + q(*generation_batch_size) + ") must be a positive multiple of " +
         "per_device_train_batch_size (" + q(per_device_train_batch_size) + ")");
  if (completions_per_generation() % num_generations != 0)
    fail((generation_batch_size  ? "generation_batch_size ("
          : steps_per_generation ? "per_device_train_batch_size * steps_per_generation ("
                                 : "per_device_train_batch_size * gradient_accumulation_steps (") +
             q(completions_per_generation()) + ") must be divisible by num_generations (" + q(num_generations) + ")",
         "a generation batch holds whole groups of num_generations completions");
  if (max_tool_calling_iterations && *max_tool_calling_iterations < 0)
    fail("max_tool_calling_iterations (" + q(*max_tool_calling_iterations) + ") must be >= 0",
         "0 runs no tool calls; leave it unset for no limit");
  if (pad_to_multiple_of && *pad_to_multiple_of < 1)
    fail("pad_to_multiple_of (" + q(*pad_to_multiple_of) + ") must be >= 1", "or leave it unset: no rounding");
  if (max_prompt_length < 1) fail("max_prompt_length (" + q(max_prompt_length) + ") must be >= 1");
  if (max_completion_length < 1) fail("max_completion_length (" + q(max_completion_length) + ") must be >= 1");
  if (!(temperature > 0)) fail("temperature (" + q(temperature) + ") must be > 0");
  if (!(top_p > 0 && top_p <= 1)) fail("top_p (" + q(top_p) + ") must be in (0, 1]");
  if (top_k < 0) fail("top_k (" + q(top_k) + ") must be >= 0 (0 = off)");
  if (!(min_p >= 0 && min_p <= 1)) fail("min_p (" + q(min_p) + ") must be in [0, 1] (0 = off)");
  if (!(repetition_penalty > 0 && std::isfinite(repetition_penalty)))
    fail("repetition_penalty (" + q(repetition_penalty) + ") must be a number > 0 (1 = off)");
  if (!(learning_rate >= 0)) fail("learning_rate (" + q(learning_rate) + ") must be >= 0");
  if (!(max_grad_norm >= 0)) fail("max_grad_norm (" + q(max_grad_norm) + ") must be >= 0");
  if (!(beta >= 0)) fail("beta (" + q(beta) + ") must be >= 0");
  if (!(epsilon >= 0 && epsilon < 1)) fail("epsilon (" + q(epsilon) + ") must be in [0, 1)");
  if (epsilon_high && !(*epsilon_high >= 0)) fail("epsilon_high (" + q(*epsilon_high) + ") must be >= 0");
  if (num_iterations < 1) fail("num_iterations (" + q(num_iterations) + ") must be >= 1");
  if (max_steps < 0) fail("max_steps (" + q(max_steps) + ") must be >= 0");
  if (!(warmup_ratio >= 0 && warmup_ratio <= 1)) fail("warmup_ratio (" + q(warmup_ratio) + ") must be in [0, 1]");
  if (delta && !(*delta > 1 + eps_high()))
    fail("delta (" + q(*delta) + ") must be > 1 + epsilon_high (" + q(1 + eps_high()) + ")",
         "or leave it unset: one-sided clipping");
  if (!(sapo_temperature_pos > 0 && sapo_temperature_neg > 0))
    fail("sapo temperatures (" + q(sapo_temperature_pos) + ", " + q(sapo_temperature_neg) + ") must be > 0");
  for (double v : {vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg})
    if (!(v >= 0 && std::isfinite(v)))
      fail("vespo parameters (k_pos " + q(vespo_k_pos) + ", lambda_pos " + q(vespo_lambda_pos) + ", k_neg " +
           q(vespo_k_neg) + ", lambda_neg " + q(vespo_lambda_neg) + ") must be finite and >= 0");
  if (loss_type == LossType::vespo && importance_sampling_level != ImportanceSamplingLevel::token)
    fail("loss_type 'vespo' weighs whole sequences itself: importance_sampling_level must be 'token', not '" +
             kImportanceSamplingLevels(importance_sampling_level) + "'",
         "leave importance_sampling_level unset");
  if (!std::isfinite(entropy_coef)) fail("entropy_coef (" + q(entropy_coef) + ") must be a finite number");
  for (double v : {entropy_coef_min, entropy_coef_max, entropy_coef_delta, entropy_target})
    if (!std::isfinite(v))
      fail("adaptive entropy settings (entropy_coef_min " + q(entropy_coef_min) + ", entropy_coef_max " +
           q(entropy_coef_max) + ", entropy_coef_delta " + q(entropy_coef_delta) + ", entropy_target " +
           q(entropy_target) + ") must be finite numbers");
  if (!(entropy_coef_min <= entropy_coef_max))
    fail("entropy_coef_min (" + q(entropy_coef_min) + ") must be <= entropy_coef_max (" + q(entropy_coef_max) + ")");
  if (!(entropy_coef_delta >= 0)) fail("entropy_coef_delta (" + q(entropy_coef_delta) + ") must be >= 0");
  if (!(top_entropy_quantile >= 0 && top_entropy_quantile <= 1))
    fail("top_entropy_quantile (" + q(top_entropy_quantile) + ") must be in [0, 1]",
         "1 keeps every token; the paper uses 0.2");
  const double is_max = vllm_importance_sampling_clip_max.value_or(INFINITY),
               is_min = vllm_importance_sampling_clip_min.value_or(0);
  if (!(is_max > 0))
    fail("vllm_importance_sampling_clip_max (" + q(is_max) + ") must be > 0", "or null: no upper bound");
  if (!(is_min >= 0 && is_min <= is_max))
    fail("vllm_importance_sampling_clip_min (" + q(is_min) + ") must be in [0, vllm_importance_sampling_clip_max (" +
             q(is_max) + ")]",
         "or leave it unset: no lower bound");
  const bool per_sequence = vllm_importance_sampling_mode == SamplingCorrectionMode::sequence_truncate ||
                            vllm_importance_sampling_mode == SamplingCorrectionMode::sequence_mask;
  if (loss_type == LossType::vespo && vllm_importance_sampling_correction && per_sequence)
    fail(
        "loss_type 'vespo' folds the mismatch weight into its sequence weight token by token: "
        "vllm_importance_sampling_mode must be 'token_truncate' or 'token_mask', not '" +
            kSamplingCorrectionModes(vllm_importance_sampling_mode) + "'",
        "set vllm_importance_sampling_mode = \"token_truncate\"");
  if (off_policy_mask_threshold && !(*off_policy_mask_threshold > 0))
    fail("off_policy_mask_threshold (" + q(*off_policy_mask_threshold) + ") must be > 0", "or leave it unset: no mask");
}

}  // namespace brl::grpo
