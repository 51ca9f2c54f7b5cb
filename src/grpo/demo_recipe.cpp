// The demo recipe. Why these values:
//  * Task: two-digit addition (a+b=, a, b in [0, 99]); 200 held-out problems never trained on.
//  * Base model: 128 wide, 4 layers (the PretrainOptions defaults), 256 sequences a step
//    (measured: skill 0.975 after 1100 steps; at 64 a step it was 0.84 after 2350), taught the skill and a
//    wrong habit: 60 % of the answers it is shown carry a sign error ("-46" for 46). The sign
//    is the first answer token only, so the digits are always taught right (pretraining costs
//    what clean pretraining costs); the greedy answer starts with "-" (held-out accuracy near
//    0) while the right one keeps ~40 % probability. Pretraining stops once the held-out
//    "skill" (right, or right but for the sign) reaches 0.97; cosine decay lets it settle.
//  * GRPO: G = 8, 64 completions (8 prompts) per step, LoRA r 8 on every linear module,
//    learning rate 1e-3 constant. 5e-3 destroyed the arithmetic of a base like this within
//    ~40 steps (reward 0.3 -> 0): Adam moves every adapter weight ~lr per step whatever the
//    gradient's signal-to-noise, and a small model's skill does not survive that walk.
//  * Over a bucket: a delta every 3 s and a proxy poll every second, so two workers on two
//    cores see each other's progress within a few steps.
#include "grpo/demo_recipe.h"

namespace brl {

RunConfig demo_run_config() {
  RunConfig cfg;
  cfg.task.name = "arithmetic";
  cfg.task.max_operand = 99;
  cfg.task.operations = "+";
  cfg.lora.r = 8;
  cfg.lora.lora_alpha = 16;
  cfg.lora.target_modules = {"all-linear"};
  cfg.grpo.num_generations = 8;
  cfg.grpo.per_device_train_batch_size = 64;
  cfg.grpo.max_completion_length = 4;
  cfg.grpo.learning_rate = 1e-3;
  cfg.grpo.lr_scheduler_type = "constant";
  cfg.grpo.max_steps = 1000;
  cfg.train.eval_steps = 10;
  cfg.train.save_steps = 50;
  cfg.train.threads = 1;
  cfg.sync.sync_interval_s = 3;
  cfg.sync.heartbeat_interval_s = 2;
  cfg.proxy.poll_interval_s = 1;
  return cfg;
}

}  // namespace brl

namespace brl::grpo {

PretrainOptions demo_pretrain_options() {
  PretrainOptions o;
  o.batch_size = 256;
  o.label_error_rate = 0.6;
  o.habit = "negate";
  o.target_accuracy = 0.97;
  o.max_steps = 2500;
  o.lr_scheduler_type = "cosine";
  o.warmup_steps = 50;
  return o;
}

}  // namespace brl::grpo
