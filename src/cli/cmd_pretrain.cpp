// `bucketrl pretrain`: makes the demo base model from scratch (see grpo/pretrain.h).
#include <cstdio>

#include "cli/command.h"
#include "grpo/pretrain.h"
#include "tasks/task.h"

namespace {
brl::cli::Register reg("pretrain", "train a small base model from scratch on a built-in task (the demo base)", [](CLI::App& app) {
  static brl::grpo::PretrainOptions o;
  static brl::tasks::TaskOptions t;
  app.add_option("--out", o.out_dir, "output HF folder")->capture_default_str();
  app.add_option("--task", t.name, "arithmetic | countdown")->capture_default_str();
  app.add_option("--max-steps", o.max_steps, "step limit")->capture_default_str();
  app.add_option("--target-accuracy", o.target_accuracy, "stop when held-out greedy accuracy reaches this")->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "sequences per step")->capture_default_str();
  app.add_option("--learning-rate", o.learning_rate, "AdamW learning rate")->capture_default_str();
  app.add_option("--hidden-size", o.hidden_size, "model width")->capture_default_str();
  app.add_option("--layers", o.num_layers, "decoder layers")->capture_default_str();
  app.add_option("--seed", o.seed, "seed")->capture_default_str();
  return [] {
    brl::cli::init_compute();
    auto task = brl::tasks::make_task(t);
    auto r = brl::grpo::pretrain(*task, o);
    std::printf("base model written to %s: %d steps, held-out accuracy %.3f, %.1f s\n", o.out_dir.c_str(), r.steps,
                r.accuracy, r.seconds);
    return 0;
  };
});
}  // namespace
