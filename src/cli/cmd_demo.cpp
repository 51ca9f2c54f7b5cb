// `bucketrl demo`: everything from nothing on one machine. Makes the demo base model
// (cached in OUT/base), then trains GRPO + LoRA on the built-in arithmetic task until the
// held-out accuracy target or the time limit, exports the PEFT adapter, prints a summary.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cli/command.h"
#include "config/run_config.h"
#include "grpo/pretrain.h"
#include "grpo/train_loop.h"
#include "util/log.h"

namespace fs = std::filesystem;

namespace {

brl::cli::Register reg("demo", "make a base model, train it with GRPO + LoRA, report held-out accuracy", [](CLI::App& app) {
  static std::string out = "runs/demo";
  static double time_limit = 600, target = 0.9;
  static std::vector<std::string> sets;
  app.add_option("--out", out, "working folder (base model cached here)")->capture_default_str();
  app.add_option("--time-limit", time_limit, "seconds for the whole demo, pretraining included")->capture_default_str();
  app.add_option("--target-accuracy", target, "stop GRPO when held-out accuracy reaches this")->capture_default_str();
  app.add_option("--set", sets, "override a run config key (section.key=value)");
  return [] {
    auto t0 = std::chrono::steady_clock::now();
    brl::cli::init_compute();
    brl::RunConfig cfg;
    cfg.task.name = "arithmetic";
    cfg.task.max_operand = 20;
    cfg.task.operations = "+";
    cfg.lora.r = 8;
    cfg.lora.lora_alpha = 16;
    cfg.lora.target_modules = {"all-linear"};
    cfg.grpo.num_generations = 8;
    cfg.grpo.per_device_train_batch_size = 64;
    cfg.grpo.max_completion_length = 4;
    cfg.grpo.learning_rate = 5e-3;
    cfg.grpo.lr_scheduler_type = "constant";
    cfg.grpo.max_steps = 1000;
    cfg.train.eval_steps = 10;
    cfg.train.save_steps = 50;
    cfg.train.output_dir = (fs::path(out) / "grpo").string();
    cfg.apply_overrides(sets);

    std::string base = (fs::path(out) / "base").string();
    brl::grpo::PretrainOptions po;
    po.out_dir = base;
    if (!fs::exists(fs::path(base) / "model.safetensors")) {
      auto task = brl::tasks::make_task(cfg.task);
      auto r = brl::grpo::pretrain(*task, po);
      LOG_INFO("base model: {} steps, held-out accuracy {:.3f}, {:.0f} s", r.steps, r.accuracy, r.seconds);
    } else {
      LOG_INFO("using the cached base model in {}", base);
    }
    cfg.model.path = base;
    double used = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto s = brl::grpo::run_training(cfg, /*resume=*/false, std::max(30.0, time_limit - used), target);
    double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("\ndemo: held-out accuracy %.3f -> %.3f after %lld GRPO steps; %.0f s in all\n", s.initial_accuracy,
                s.final_accuracy, static_cast<long long>(s.steps), total);
    std::printf("  base model: %s\n  adapter (PEFT): %s\n", base.c_str(), s.adapter_dir.c_str());
    return 0;
  };
});

}  // namespace
