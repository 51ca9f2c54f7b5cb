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
  RunConfig cfg = config_path.empty() ? RunConfig() : RunConfig::from_file(config_path);
  cfg.apply_overrides(sets);
  cli::init_compute(cfg.train.threads);
  auto s = grpo::run_training(cfg, resume);
  std::printf("%lld steps in %.0f s: held-out accuracy %.3f -> %.3f; adapter written to %s\n",
              static_cast<long long>(s.steps), s.seconds, s.initial_accuracy, s.final_accuracy, s.adapter_dir.c_str());
  return 0;
}

cli::RunFn setup_train(CLI::App& app) {
  static std::string config;
  static std::vector<std::string> sets;
  static bool resume = false;
  app.add_option("--config", config, "run.toml ([model] [lora] [grpo] [task] [train])");
  app.add_option("--set", sets, "override a key: section.key=value (repeatable)");
  app.add_flag("--resume", resume, "continue from the newest checkpoint in train.output_dir");
  static std::string device;
  app.add_option("--device", device,
                 "where to generate and train: "
                 "cpu | cuda | cuda:N | auto (a GPU when this machine has one)"
                 " (sets model.device)");
  return [] {
    if (!device.empty()) sets.push_back("model.device=" + device);
    return run_train(config, sets, resume);
  };
}
cli::Register train_reg("train", "GRPO + LoRA training in one process (no bucket)", setup_train);

cli::RunFn setup_eval(CLI::App& app) {
  static std::string config, model_dir, adapter, task_name, dataset, device = "auto";
  static std::vector<std::string> sets;
  static int max_examples = 200, max_new = 16, pass_k = -1, pass_samples = 0;
  static double temperature = 0.0;
  static bool json = false;
  app.add_option("--config", config, "run.toml: its [model] path, [task] and [grpo] sampling (flags below win)");
  app.add_option("--set", sets, "override a config key: section.key=value (repeatable)");
  auto* model_opt = app.add_option("--model", model_dir, "HF model folder (default: the config's model.path)");
  app.add_option("--adapter", adapter, "PEFT adapter folder");
  auto* task_opt =
      app.add_option("--task", task_name, "arithmetic | countdown | jsonl (default: the config's, else arithmetic)");
  app.add_option("--dataset", dataset, "jsonl: the held-out file");
  auto* n_opt = app.add_option("--max-examples", max_examples, "held-out examples")->capture_default_str();
  auto* new_opt = app.add_option("--max-new-tokens", max_new,
                                 "tokens per answer (default: the config's grpo.max_completion_length, else 16)");
  auto* t_opt =
      app.add_option("--temperature", temperature, "of the one answer per prompt that accuracy scores; 0 = greedy")
          ->capture_default_str();
  auto* k_opt = app.add_option("--pass-k", pass_k,
                               "answers sampled per prompt (as the rollouts: grpo.temperature, top_k, top_p, min_p, "
                               "repetition_penalty) for pass@1 and pass@k: "
                               "-1 = grpo.num_generations, 0 = off")
                    ->capture_default_str();
  auto* samples_opt = app.add_option("--pass-samples", pass_samples,
                                     "answers sampled per prompt for pass@1 and pass@k, n >= k: less noise (0 = k)")
                          ->capture_default_str();
  app.add_flag("--json", json, "print JSON");
  app.add_option("--device", device,
                 "where to evaluate: "
                 "cpu | cuda | cuda:N | auto (a GPU when this machine has one)")
      ->capture_default_str();
  return [=] {
    RunConfig cfg = config.empty() ? RunConfig() : RunConfig::from_file(config);
    cfg.apply_overrides(sets);
    if (model_opt->count()) cfg.model.path = model_dir;
    if (task_opt->count()) cfg.task.name = task_name;
    if (!dataset.empty()) cfg.task.dataset_path = cfg.task.eval_path = dataset;
    if (n_opt->count() || config.empty()) cfg.train.eval_max_examples = max_examples;
    if (new_opt->count() || config.empty()) cfg.grpo.max_completion_length = max_new;
    if (t_opt->count()) cfg.train.eval_temperature = temperature;
    if (k_opt->count() || config.empty()) cfg.train.eval_pass_k = pass_k;
    if (samples_opt->count() || config.empty()) cfg.train.eval_pass_samples = pass_samples;
    if (cfg.model.path.empty()) throw UserError("eval: no model", "pass --model DIR, or --config with [model] path");
    cfg.validate();
    cli::init_compute();
    auto m = model::load_model_on(cfg.model.path, device);
    auto tk = tok::Tokenizer::from_dir(cfg.model.path);
    if (!adapter.empty()) lora::load_peft(m, adapter);
    auto task = tasks::make_task(cfg.task);
    auto ev = grpo::evaluate_held_out(m, tk, *task, cfg);
    if (json) {
      nlohmann::json j{
          {"task", cfg.task.name}, {"n", ev.n}, {"accuracy", ev.accuracy}, {"reward_mean", ev.reward_mean}};
      if (ev.k) j["k"] = ev.k, j["pass_at_1"] = ev.pass_at_1, j["pass_at_k"] = ev.pass_at_k;
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("task %s: held-out accuracy %.4f, mean reward %.4f", cfg.task.name.c_str(), ev.accuracy,
                  ev.reward_mean);
      if (ev.k) std::printf(", pass@1 %.4f, pass@%lld %.4f", ev.pass_at_1, static_cast<long long>(ev.k), ev.pass_at_k);
      std::printf(" over %lld examples\n", static_cast<long long>(ev.n));
    }
    return 0;
  };
}
cli::Register eval_reg("eval", "held-out accuracy, mean reward and pass@k of a model (+ adapter) on a task",
                       setup_eval);

cli::RunFn setup_merge(CLI::App& app) {
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
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja"})
      if (fs::exists(fs::path(model_dir) / f))
        fs::copy_file(fs::path(model_dir) / f, fs::path(out) / f, fs::copy_options::overwrite_existing);
    std::printf("merged model written to %s\n", out.c_str());
    return 0;
  };
}
cli::Register merge_reg("merge", "merge a PEFT adapter into its base model and write an HF folder", setup_merge);

}  // namespace
