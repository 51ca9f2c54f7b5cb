// The demo base model, made here (nothing can be downloaded): a small Llama-family model
// with a byte-level tokenizer, trained from scratch with supervised next-token loss on a
// built-in task's answers. It is made imperfect on purpose so that GRPO has something to
// teach, in one of two ways:
//  * stopped early (label_error_rate = 0): it lacks part of the skill;
//  * a taught wrong habit (label_error_rate > 0): each time a training answer is shown it is,
//    with that probability, replaced by a wrong form of it (`habit`). The model learns the
//    skill and the habit, so its greedy answer is often the wrong one while the right one
//    keeps a high probability. GRPO then only has to learn a preference, which is what RL
//    fine-tuning of a pretrained model mostly does. The demo uses the "negate" habit (a sign
//    error: "-46" for 46): it sits on the first answer token only, so the digits are always
//    taught right and pretraining is as fast as without errors (see grpo/demo_recipe.h).
//    Held-out problems are never trained on in either phase.
#pragma once

#include <string>

#include "model/config.h"
#include "tasks/task.h"
#include "util/config_table.h"

namespace brl::grpo {

// The taught wrong answer's form: -answer, or answer + 1.
enum class Habit { negate, plus_one };
inline const EnumNames<Habit> kHabits{{"negate", "plus_one"}};
// Pretraining's learning-rate schedule after the warmup (see PretrainOptions).
enum class PretrainSchedule { constant, cosine };
inline const EnumNames<PretrainSchedule> kPretrainSchedules{{"constant", "cosine"}};
inline void to_json(nlohmann::json& j, Habit e) { j = kHabits(e); }
inline void to_json(nlohmann::json& j, PretrainSchedule e) { j = kPretrainSchedules(e); }

struct PretrainOptions {
  std::string out_dir = "runs/base";
  int hidden_size = 128, num_layers = 4, num_heads = 4, num_kv_heads = 2, intermediate_size = 352;
  int batch_size = 64;
  int max_steps = 3000;
  double learning_rate = 3e-3;
  double weight_decay = 0.01;  // AdamW
  // constant | cosine (warmup, then cosine decay to min_lr_ratio x learning_rate at max_steps).
  // With label errors the loss never reaches zero and a constant rate keeps shaking the
  // model between the right answer and the habit; the decay lets it settle.
  PretrainSchedule lr_scheduler_type = PretrainSchedule::constant;
  int warmup_steps = 0;
  double min_lr_ratio = 0.1;
  int eval_every = 50;
  int eval_examples = 200;
  // Stop once greedy "skill" on the task's validation set (never the held-out set) reaches
  // this: the answer is right, or (with label errors on) exactly the taught wrong answer.
  // Without label errors, skill = accuracy. eval_examples of the set are scored.
  double target_accuracy = 0.35;
  // Or stop once sampled pass@k on the validation set reaches target_pass_at_k (pass_k = k
  // answers per prompt at temperature 1, as GRPO samples; 0 = off): the base then finds most
  // answers within a group of k tries, the one thing GRPO needs of it, while its greedy
  // accuracy is still low. Greedy accuracy is a poor stopping signal for that: on three-digit
  // addition it jumps by 0.1-0.3 between two checks 50 steps apart.
  int pass_k = 0;
  double target_pass_at_k = 1.0;
  // Or (pass_k > 0) once validation pass@1 reaches this: the fraction of sampled answers that
  // are right, the figure GRPO starts from. The time GRPO needs to lift pass@1 is steep in it
  // (three-digit addition: from 0.25 to 0.6 in 480 s over the bucket, from 0.34 in 323 s), while
  // pass@k can sit still for 20 steps while pass@1 moves by 0.06.
  double target_pass_at_1 = 1.0;
  // Finer stops without more checks (0 = off): a copy of the weights is kept every this many
  // steps between two checks, and when a check first meets a target the copies since the check
  // before are scored, oldest first, and the first that meets it is the written model. A
  // three-digit base jumps from validation pass@8 0.55 to 0.82 within 50 steps (and pass@1 from
  // 0.15 to 0.33), so checking every 50 steps overshoots a pass@8 target by far; checking every
  // 10 would cost a check per 10 steps instead of a few at the end.
  int snapshot_every = 0;
  double label_error_rate = 0.0;  // see the header comment; integer answers only
  Habit habit = Habit::negate;
  uint64_t seed = 7;
};

struct PretrainResult {
  int steps = 0;
  double accuracy = 0;                          // held-out greedy accuracy (exact answers), of the final weights
  double skill = 0;                             // held-out greedy answers that are right or the taught wrong one
  double val_accuracy = 0, val_skill = 0;       // the same on the validation set, at the last check
  double val_pass_at_1 = 0, val_pass_at_k = 0;  // sampled, at the last check (pass_k > 0 only)
  double pass_at_1 = 0, pass_at_k = 0;          // held-out, sampled, of the final weights (pass_k > 0 only)
  double seconds = 0;
};

// The i-th pretraining example: task.train_example(i) with, with probability
// o.label_error_rate (a draw fixed by (o.seed, i)), its answer replaced by the habit's form.
// UserError naming the example when that is asked of a non-integer answer.
tasks::Example pretrain_example(const tasks::Task& task, uint64_t i, const PretrainOptions& o);

// The learning rate at step (1-based) under o's schedule.
double pretrain_lr(const PretrainOptions& o, int step);

// Writes a byte-level BPE tokenizer.json (the 256 GPT-2 byte symbols, no merges, and
// <|endoftext|> = 256) plus tokenizer_config.json / generation_config.json into dir.
void write_byte_tokenizer(const std::string& dir);
model::ModelConfig demo_model_config(const PretrainOptions& o);
// Trains and writes an HF folder (config.json, model.safetensors, tokenizer files).
PretrainResult pretrain(tasks::Task& task, const PretrainOptions& o, bool progress = true);

}  // namespace brl::grpo
