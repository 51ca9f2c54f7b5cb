// `bucketrl train`: GRPO + LoRA in one process (no bucket), with periodic held-out eval,
// PEFT adapter checkpoints and resume. `bucketrl eval`: held-out accuracy of a model
// (+ adapter). `bucketrl merge`: fold an adapter into its base and export an HF folder.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "model/model_load.h"
#include "config/run_config.h"
#include "grpo/train_loop.h"
#include "grpo/trainer.h"
#include "lora/lora.h"
#include "model/loader.h"
#include "tasks/task.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/log.h"

namespace fs = std::filesystem;
using namespace brl;

namespace {

int run_train(const std::string& config_path, const std::vector<std::string>& sets, bool resume) {
  RunConfig cfg = config_path.empty() ? RunConfig() : RunConfig::from_toml_file(config_path);
  cfg.apply_overrides(sets);
  cli::init_compute(cfg.train.threads);
  auto s = grpo::run_training(cfg, resume);
  std::printf("%lld steps in %.0f s: held-out accuracy %.3f -> %.3f; adapter written to %s\n",
              static_cast<long long>(s.steps), s.seconds, s.initial_accuracy, s.final_accuracy, s.adapter_dir.c_str());
  return 0;
}

cli::Register train_reg("train", "GRPO + LoRA training in one process (no bucket)", [](CLI::App& app) {
  static std::string config;
  static std::vector<std::string> sets;
  static bool resume = false;
  app.add_option("--config", config, "run.toml ([model] [lora] [grpo] [task] [train])");
  app.add_option("--set", sets, "override a key: section.key=value (repeatable)");
  app.add_flag("--resume", resume, "continue from the newest checkpoint in train.output_dir");
  static std::string device;
  app.add_option("--device", device, "where to generate and train: " "cpu | cuda | cuda:N | auto (a GPU when this machine has one)" " (sets model.device)");
  return [] {
    if (!device.empty()) sets.push_back("model.device=" + device);
    return run_train(config, sets, resume);
  };
});

cli::Register eval_reg("eval", "held-out accuracy and mean reward of a model (+ adapter) on a task", [](CLI::App& app) {
  static std::string model_dir, adapter, task_name = "arithmetic", dataset;
  static int max_examples = 200, max_new = 16;
  static double temperature = 0.0;
  static bool json = false;
  app.add_option("--model", model_dir, "HF model folder")->required();
  app.add_option("--adapter", adapter, "PEFT adapter folder");
  app.add_option("--task", task_name, "arithmetic | countdown | jsonl");
  app.add_option("--dataset", dataset, "jsonl: the held-out file");
  app.add_option("--max-examples", max_examples, "held-out examples");
  app.add_option("--max-new-tokens", max_new, "tokens per answer");
  app.add_option("--temperature", temperature, "0 = greedy");
  app.add_flag("--json", json, "print JSON");
  static std::string device = "auto";
  app.add_option("--device", device, "where to evaluate: " "cpu | cuda | cuda:N | auto (a GPU when this machine has one)")->capture_default_str();
  return [] {
    cli::init_compute();
    auto m = model::load_model_on(model_dir, device);
    auto tk = tok::Tokenizer::from_dir(model_dir);
    if (!adapter.empty()) lora::load_peft(m, adapter);
    tasks::TaskOptions to;
    to.name = task_name;
    to.dataset_path = dataset;
    to.eval_path = dataset;
    auto task = tasks::make_task(to);
    auto ev = grpo::evaluate(m, tk, *task, max_examples, max_new, temperature, 0);
    if (json)
      std::printf("%s\n", nlohmann::json{{"task", task_name}, {"n", ev.n}, {"accuracy", ev.accuracy}, {"reward_mean", ev.reward_mean}}.dump().c_str());
    else
      std::printf("task %s: held-out accuracy %.4f, mean reward %.4f over %lld examples\n", task_name.c_str(), ev.accuracy,
                  ev.reward_mean, static_cast<long long>(ev.n));
    return 0;
  };
});

cli::Register merge_reg("merge", "merge a PEFT adapter into its base model and write an HF folder", [](CLI::App& app) {
  static std::string model_dir, adapter, out;
  app.add_option("--model", model_dir, "base HF model folder")->required();
  app.add_option("--adapter", adapter, "PEFT adapter folder")->required();
  app.add_option("--out", out, "output HF folder")->required();
  return [] {
    cli::init_compute();
    auto m = model::load_model(model_dir);
    lora::load_peft(m, adapter);
    lora::merge(m);
    model::save_model(m, out);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
      if (fs::exists(fs::path(model_dir) / f))
        fs::copy_file(fs::path(model_dir) / f, fs::path(out) / f, fs::copy_options::overwrite_existing);
    std::printf("merged model written to %s\n", out.c_str());
    return 0;
  };
});

}  // namespace
