// The demo recipes. The fast one (the default), and why these values:
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
// The skill recipe: three-digit addition (a, b in [0, 999], answers up to 4 digits + EOS, so 6
// new tokens), the same model shape, pretrained without any habit and stopped once it finds most
// answers in a group: validation pass@8 (sampled at temperature 1, as GRPO samples) >= 0.75.
// Stopping on greedy accuracy instead (0.3, before 2026-12-05) left bases anywhere between
// held-out greedy 0.235 (pass@8 0.63: GRPO plateaued at pass@1 ~0.3, TRL's GRPOTrainer too) and
// 0.45 (pass@8 0.79), because greedy accuracy on this task jumps by 0.1-0.3 between checks 50
// steps apart. pass@8 jumps too (0.55 -> 0.82 between steps 2000 and 2050), so the weights are
// kept every 10 steps and the stop lands on the first copy that meets it. Where it lands, and
// what pass@1 the base then has, depends on the run's rounding: with denormals flushed (since
// 2026-12-06) seeds 1-5 stopped at steps 710, 1220, >1850, 820 and 1450 with held-out pass@1 /
// pass@8 (64 answers a prompt) 0.52 / 0.82, 0.44 / 0.70, -, 0.27 / 0.73 and 0.28 / 0.80, and
// seed 7 (the seed before) at 2560 with 0.28 / 0.70. Seeds 4 and 5 land inside the window
// (pass@1 <= 0.3, pass@8 >= 0.7); seed 5 with the wider margin. From a 0.45 base, `bucketrl train`
// with this recipe took pass@1 from 0.34 to 0.54 in 400 steps and 0.63 in 1000, greedy 0.45 ->
// 0.69, pass@8 staying ~0.8: the model gets the carries right more often, not just more
// consistently. Partial credit per right digit (a second
// reward) changed nothing measurable (0.543 vs 0.542 at step 400). GRPO: 32 prompts x 8 a step,
// lr 1e-3; lr 2e-3 and 3e-3 collapsed the weaker base to 0 within ~300 steps (TRL too), and lr 2e-3
// with beta 0.04 was no faster on the 0.45 base (0.566 at step 500).
#include "grpo/demo_recipe.h"

#include "util/error.h"

namespace brl {

namespace {

DemoRecipe fast_recipe() {
  DemoRecipe r;
  r.name = "fast";
  RunConfig& cfg = r.run;
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
  cfg.grpo.lr_scheduler_type = grpo::LrSchedulerType::constant;
  cfg.grpo.max_steps = 1000;
  cfg.train.eval_steps = 10;
  cfg.train.save_steps = 50;
  cfg.train.threads = 1;
  cfg.sync.sync_interval_s = 3;
  cfg.sync.heartbeat_interval_s = 2;
  cfg.proxy.poll_interval_s = 1;
  grpo::PretrainOptions& o = r.pretrain;
  o.batch_size = 256;
  o.label_error_rate = 0.6;
  o.habit = grpo::Habit::negate;
  o.target_accuracy = 0.97;
  o.max_steps = 2500;
  o.lr_scheduler_type = grpo::PretrainSchedule::cosine;
  o.warmup_steps = 50;
  return r;
}

DemoRecipe skill_recipe() {
  DemoRecipe r = fast_recipe();
  r.name = "skill";
  r.out = "runs/demo-skill";
  RunConfig& cfg = r.run;
  cfg.task.max_operand = 999;
  cfg.grpo.per_device_train_batch_size = 256;  // 32 prompts x 8
  cfg.grpo.max_completion_length = 6;
  cfg.grpo.max_steps = 100000;
  cfg.train.eval_steps = 100;
  cfg.train.save_steps = 500;
  r.target_metric = TargetMetric::pass_at_1;
  // The figure is pass@1 >= 0.6 on the final version, read afresh after the stop: a stop
  // at 0.6 left a final 0.582 once (sd6, BENCHMARKS.md), so the stop is at 0.62.
  r.target = 0.62;
  // pass@1 and pass@8 from 16 answers a prompt: from 8, one base read pass@1 0.279 and 0.304,
  // pass@8 0.745 and 0.725 under two seeds (from 64: 0.28 and 0.70 under three).
  cfg.train.eval_pass_samples = 16;
  // Consecutive versions' pass@1 readings scatter by ~0.03 around the level: a stop on three
  // (~15 s of readings) once stopped on a high run of them and left a final 0.592 (sd8); ten
  // (~50 s) ask the level itself to be there (sd9: stop at 500 s of GRPO, final 0.627).
  r.target_window = 10;
  r.time_limit_s = 900;
  // Rollouts are most of a step here, and decode runs 2.0x faster on 2 threads than on 1: on 2
  // cores one worker of 2 threads reached a mean of three pass@1 >= 0.6 in 328-394 s of GRPO
  // where two of 1 thread took 606 s and >680 s (same base, 2026-12-06, BENCHMARKS.md).
  r.threads_per_worker = 2;
  grpo::PretrainOptions& o = r.pretrain;
  o = grpo::PretrainOptions();
  o.batch_size = 256;
  o.target_accuracy = 1.0;  // stops on pass@8 instead
  o.pass_k = 8;
  o.target_pass_at_k = 0.75;
  o.snapshot_every = 10;  // the stop lands within 10 steps of the crossing, not 50 (pretrain.h)
  o.max_steps = 4000;
  o.seed = 5;  // see the top of this file
  return r;
}

}  // namespace

std::vector<std::string> demo_recipe_names() { return {"fast", "skill"}; }

DemoRecipe demo_recipe(const std::string& name) {
  if (name == "fast") return fast_recipe();
  if (name == "skill") return skill_recipe();
  throw UserError("demo recipe \"" + name + "\" is not known", "use --recipe fast or --recipe skill");
}

RunConfig demo_run_config() { return fast_recipe().run; }

}  // namespace brl

namespace brl::grpo {
PretrainOptions demo_pretrain_options() { return fast_recipe().pretrain; }
}  // namespace brl::grpo
