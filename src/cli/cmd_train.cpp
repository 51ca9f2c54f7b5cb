// `bucketrl train`: GRPO + LoRA in one process (no bucket), with periodic held-out eval,
// PEFT adapter checkpoints and resume. `bucketrl eval`: held-out accuracy of a model
// (+ adapter). `bucketrl merge`: fold an adapter into its base and export an HF folder.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "config/run_config.h"
#include "grpo/trainer.h"
#include "lora/lora.h"
#include "model/loader.h"
#include "model/tensor_io.h"
#include "tasks/task.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/log.h"

namespace fs = std::filesystem;
using namespace brl;

namespace {

// The newest checkpoint-<N> folder holding an adapter and trainer state, or "".
std::string latest_checkpoint(const std::string& out) {
  std::string best;
  long best_n = -1;
  if (!fs::exists(out)) return "";
  for (auto& e : fs::directory_iterator(out)) {
    std::string n = e.path().filename().string();
    if (n.rfind("checkpoint-", 0) != 0 || !fs::exists(e.path() / "trainer_state.pt")) continue;
    long k = std::strtol(n.c_str() + 11, nullptr, 10);
    if (k > best_n) best_n = k, best = e.path().string();
  }
  return best;
}

int run_train(const std::string& config_path, const std::vector<std::string>& sets, bool resume) {
  RunConfig cfg = config_path.empty() ? RunConfig() : RunConfig::from_toml_file(config_path);
  cfg.apply_overrides(sets);
  cfg.validate();
  if (cfg.model.path.empty()) throw UserError("no base model: set [model] path or --set model.path=DIR");
  cli::init_compute(cfg.train.threads);
  LOG_INFO("resolved config: {}", cfg.to_json().dump());
  auto m = model::load_model(cfg.model.path);
  auto tk = tok::Tokenizer::from_dir(cfg.model.path);
  auto task = tasks::make_task(cfg.task);
  lora::attach(m, cfg.lora);
  std::vector<double> weights;
  for (auto& r : task->rewards) weights.push_back(r->name() == "format" ? cfg.task.format_weight : 1.0);
  grpo::GrpoTrainer trainer(m, tk, *task, cfg.grpo, 0, 1, weights);
  const std::string out = cfg.train.output_dir;
  fs::create_directories(out);
  if (resume) {
    std::string ck = latest_checkpoint(out);
    if (ck.empty()) {
      LOG_INFO("no checkpoint in {}: starting fresh", out);
    } else {
      // Copy into the live slots: the optimizer already tracks those tensors.
      std::string st = (fs::path(ck) / "adapter_model.safetensors").string();
      lora::set_adapter_tensors(m, model::load_tensors(st, m.dtype()), st);
      trainer.load_state((fs::path(ck) / "trainer_state.pt").string());
      LOG_INFO("resumed from {} at step {}", ck, trainer.global_step());
    }
  }
  std::ofstream metrics(fs::path(out) / "metrics.jsonl", std::ios::app);
  auto eval_now = [&](int64_t step) {
    auto ev = grpo::evaluate(m, tk, *task, cfg.train.eval_max_examples, cfg.grpo.max_completion_length,
                             cfg.train.eval_temperature, 0);
    LOG_INFO("eval step {}: held-out accuracy {:.3f}, mean reward {:.3f} (n={})", step, ev.accuracy, ev.reward_mean, ev.n);
    metrics << nlohmann::json{{"step", step}, {"eval_accuracy", ev.accuracy}, {"eval_reward", ev.reward_mean}}.dump() << "\n";
    metrics.flush();
    return ev;
  };
  if (trainer.global_step() == 0) eval_now(0);
  while (trainer.global_step() < cfg.grpo.max_steps) {
    auto s = trainer.step();
    if (cfg.train.logging_steps > 0 && s.step % cfg.train.logging_steps == 0)
      LOG_INFO("step {}/{}: reward {:.3f}±{:.3f} acc {:.3f} loss {:.4f} kl {:.4f} clip {:.3f} |g| {:.3f} lr {:.2e} "
               "len {:.1f} gen {:.1f}s train {:.1f}s",
               s.step, cfg.grpo.max_steps, s.reward_mean, s.reward_std, s.accuracy, s.loss, s.kl, s.clip_ratio,
               s.grad_norm, s.lr, s.completion_length, s.gen_seconds, s.train_seconds);
    metrics << nlohmann::json{{"step", s.step},       {"reward", s.reward_mean}, {"reward_std", s.reward_std},
                              {"accuracy", s.accuracy}, {"loss", s.loss},        {"kl", s.kl},
                              {"clip_ratio", s.clip_ratio}, {"grad_norm", s.grad_norm}, {"lr", s.lr},
                              {"completion_length", s.completion_length}}
                   .dump()
            << "\n";
    bool last = s.step == cfg.grpo.max_steps;
    if ((cfg.train.save_steps > 0 && s.step % cfg.train.save_steps == 0) || last) {
      std::string ck = (fs::path(out) / ("checkpoint-" + std::to_string(s.step))).string();
      lora::save_peft(m, cfg.lora, ck, cfg.model.path);
      trainer.save_state((fs::path(ck) / "trainer_state.pt").string());
    }
    if ((cfg.train.eval_steps > 0 && s.step % cfg.train.eval_steps == 0) || last) eval_now(s.step);
  }
  lora::save_peft(m, cfg.lora, (fs::path(out) / "adapter").string(), cfg.model.path);
  std::printf("adapter written to %s\n", (fs::path(out) / "adapter").c_str());
  return 0;
}

cli::Register train_reg("train", "GRPO + LoRA training in one process (no bucket)", [](CLI::App& app) {
  static std::string config;
  static std::vector<std::string> sets;
  static bool resume = false;
  app.add_option("--config", config, "run.toml ([model] [lora] [grpo] [task] [train])");
  app.add_option("--set", sets, "override a key: section.key=value (repeatable)");
  app.add_flag("--resume", resume, "continue from the newest checkpoint in train.output_dir");
  return [] { return run_train(config, sets, resume); };
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
  return [] {
    cli::init_compute();
    auto m = model::load_model(model_dir);
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
