// `bucketrl pretrain`: makes the demo base model from scratch (see grpo/pretrain.h).
#include <cstdio>

#include "cli/command.h"
#include "grpo/demo_recipe.h"
#include "grpo/pretrain.h"
#include "launch/demo.h"
#include "util/error.h"
#include "util/log.h"
#include "tasks/task.h"

namespace {
brl::cli::RunFn setup_pretrain(CLI::App& app) {
  static brl::grpo::PretrainOptions o;
  static brl::tasks::TaskOptions t;
  app.add_option("--out", o.out_dir, "output HF folder")->capture_default_str();
  app.add_option("--task", t.name, "arithmetic | countdown")->capture_default_str();
  app.add_option("--max-steps", o.max_steps, "step limit")->capture_default_str();
  app.add_option("--target-accuracy", o.target_accuracy, "stop when greedy skill on the validation set reaches this")
      ->capture_default_str();
  app.add_option("--pass-k", o.pass_k,
                 "also sample this many answers per validation prompt (temperature 1) at each check; 0 = off")
      ->capture_default_str();
  app.add_option("--target-pass-at-k", o.target_pass_at_k, "with --pass-k: stop when validation pass@k reaches this")
      ->capture_default_str();
  app.add_option("--target-pass-at-1", o.target_pass_at_1,
                 "with --pass-k: or stop when validation pass@1 (sampled) reaches this")
      ->capture_default_str();
  app.add_option("--snapshot-every", o.snapshot_every,
                 "keep the weights every N steps between checks; a check that meets a target stops at the first "
                 "of them that meets it too (0 = off; must divide the check interval, 50)")
      ->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "sequences per step")->capture_default_str();
  app.add_option("--learning-rate", o.learning_rate, "AdamW learning rate")->capture_default_str();
  app.add_option("--hidden-size", o.hidden_size, "model width")->capture_default_str();
  app.add_option("--layers", o.num_layers, "decoder layers")->capture_default_str();
  app.add_option("--seed", o.seed, "seed")->capture_default_str();
  app.add_option("--label-error-rate", o.label_error_rate,
                 "teach a wrong habit: this fraction of answers shown as answer + 1 (the demo uses it)")
      ->capture_default_str();
  brl::cli::add_enum_option(app, "--habit", &o.habit, brl::grpo::kHabits,
                            "the wrong habit's form: negate (-answer) | plus_one (answer + 1)");
  brl::cli::add_enum_option(app, "--lr-scheduler-type", &o.lr_scheduler_type, brl::grpo::kPretrainSchedules,
                            "constant | cosine (to min_lr_ratio at --max-steps)");
  app.add_option("--warmup-steps", o.warmup_steps, "linear warmup steps")->capture_default_str();
  static int threads = 0;
  app.add_option("--threads", threads, "compute threads (0 = all cores)")->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "AdamW weight decay")->capture_default_str();
  app.add_option("--max-operand", t.max_operand, "arithmetic: operands in [0, N]")->capture_default_str();
  app.add_option("--operations", t.operations, "arithmetic: operators drawn from this set")->capture_default_str();
  static std::string recipe;
  app.add_option("--recipe", recipe,
                 "a demo recipe's base model (fast | skill: bucketrl demo --recipe): its task and pretraining "
                 "options; only --out, --seed and --threads may be given with it. `bucketrl demo --recipe R --out "
                 "D` reuses a base made with --out D/base (and the recipe's seed)");
  return [&app] {
    brl::RunConfig run;
    if (!recipe.empty()) {
      for (const CLI::Option* opt : app.get_options())
        if (opt->count() && opt->get_name() != "--recipe" && opt->get_name() != "--out" &&
            opt->get_name() != "--seed" && opt->get_name() != "--threads")
          throw brl::UserError("pretrain: " + opt->get_name() + " cannot be combined with --recipe " + recipe,
                               "drop it (the recipe sets it), or drop --recipe and give every option yourself");
      const brl::DemoRecipe r = brl::demo_recipe(recipe);
      const std::string out = o.out_dir;
      const uint64_t seed = o.seed;
      o = r.pretrain;
      o.out_dir = out;
      if (app.get_option("--seed")->count()) o.seed = seed;
      t = r.run.task;
      run = r.run;
    }
    brl::cli::init_compute(threads);
    auto task = brl::tasks::make_task(t);
    auto r = brl::grpo::pretrain(*task, o);
    // A recipe's base, marked as `bucketrl demo` marks its own: the demo then reuses it.
    if (!recipe.empty()) brl::launch::record_demo_base(o.out_dir, run, o);
    std::string pass;
    if (o.pass_k > 0)
      pass = fmt::format(", pass@1 {:.3f}, pass@{} {:.3f} (validation {:.3f}, {:.3f})", r.pass_at_1, o.pass_k,
                         r.pass_at_k, r.val_pass_at_1, r.val_pass_at_k);
    std::printf(
        "base model written to %s: %d steps, held-out accuracy %.3f (skill %.3f; validation skill %.3f)%s, %.1f s\n",
        o.out_dir.c_str(), r.steps, r.accuracy, r.skill, r.val_skill, pass.c_str(), r.seconds);
    return 0;
  };
}
brl::cli::Register reg("pretrain", "train a small base model from scratch on a built-in task (the demo base)",
                       setup_pretrain);
}  // namespace
