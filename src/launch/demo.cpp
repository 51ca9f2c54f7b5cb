#include "launch/demo.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "grpo/demo_recipe.h"
#include "grpo/pretrain.h"
#include "tasks/task.h"
#include "util/error.h"
#include "util/file.h"
#include "util/log.h"

namespace brl::launch {

namespace fs = std::filesystem;

nlohmann::json demo_base_recipe(const RunConfig& cfg, const grpo::PretrainOptions& po) {
  nlohmann::json j = {{"format", 1},
                      {"model", {po.hidden_size, po.num_layers, po.num_heads, po.num_kv_heads, po.intermediate_size}},
                      {"train",
                       {po.batch_size, po.max_steps, po.learning_rate, po.weight_decay, po.lr_scheduler_type,
                        po.warmup_steps, po.min_lr_ratio, po.seed}},
                      {"stop", {po.eval_every, po.eval_examples, po.target_accuracy, po.pass_k, po.target_pass_at_k}},
                      {"habit", {po.label_error_rate, po.habit}},
                      {"task", RunConfig(cfg).to_json()["task"]}};
  // Bases made before these knobs stay cached.
  if (po.snapshot_every > 0) j["stop"].push_back(po.snapshot_every);
  if (po.target_pass_at_1 < 1) j["stop"].push_back({"pass@1", po.target_pass_at_1});
  return j;
}

namespace {
fs::path recipe_file(const std::string& base_dir) { return fs::path(base_dir) / "bucketrl_base_recipe.json"; }
}  // namespace

void record_demo_base(const std::string& base_dir, const RunConfig& cfg, const grpo::PretrainOptions& po) {
  write_file(recipe_file(base_dir).string(), demo_base_recipe(cfg, po).dump(2) + "\n");
}

bool demo_base_cached(const std::string& base_dir, const RunConfig& cfg, const grpo::PretrainOptions& po) {
  if (!fs::exists(fs::path(base_dir) / "model.safetensors")) return false;
  std::ifstream f(recipe_file(base_dir));
  if (f && nlohmann::json::parse(f, nullptr, false) == demo_base_recipe(cfg, po)) return true;
  LOG_INFO("demo: the base model in {} was made from {} recipe; pretraining again", base_dir,
           f ? "another" : "an unrecorded");
  return false;
}

DemoBase ensure_demo_base(const std::string& out, const RunConfig& cfg, const grpo::PretrainOptions& recipe) {
  DemoBase b;
  b.dir = (fs::path(out) / "base").string();
  if (demo_base_cached(b.dir, cfg, recipe)) {
    b.cached = true;
    LOG_INFO("demo: using the cached base model in {}", b.dir);
    return b;
  }
  grpo::PretrainOptions po = recipe;
  po.out_dir = b.dir;
  const fs::path rfile = recipe_file(b.dir);
  fs::remove(rfile);  // written back only once the new base is complete
  auto task = tasks::make_task(cfg.task);
  auto r = grpo::pretrain(*task, po);
  b.seconds = r.seconds;
  b.accuracy = r.accuracy;
  b.skill = r.skill;
  record_demo_base(b.dir, cfg, recipe);
  LOG_INFO("demo: base model made in {:.0f} s ({} steps): held-out accuracy {:.3f}, skill {:.3f}", r.seconds, r.steps,
           r.accuracy, r.skill);
  return b;
}

DemoSummary run_demo(const DemoOptions& opt, const std::atomic<bool>& stop) {
  auto t0 = std::chrono::steady_clock::now();
  DemoSummary sum;
  const DemoRecipe recipe = demo_recipe(opt.recipe);
  RunConfig cfg = recipe.run;
  cfg.train.output_dir = (fs::path(opt.out) / "run").string();
  if (opt.sync) cfg.sync.mode = SyncMode::sync;
  cfg.apply_overrides(opt.overrides);
  sum.base = ensure_demo_base(opt.out, cfg, recipe.pretrain);
  cfg.model.path = sum.base.dir;
  // A fresh run each time: only what the run writes is removed (output_dir may be a user's
  // folder via --set); the base model and the workers' model cache stay.
  const fs::path run_dir(cfg.train.output_dir);
  for (const char* sub : {"bucket", "logs", "adapter", "summary.json"}) fs::remove_all(run_dir / sub);
  LocalRunOptions lo;
  lo.bucket = (run_dir / "bucket").string();
  lo.workers = opt.workers;
  lo.target_accuracy = opt.target_accuracy;
  lo.target_metric = recipe.target_metric;
  lo.target_window = recipe.target_window;
  lo.eval_interval_s = opt.eval_interval_s;
  lo.slowdown = opt.slowdown;
  lo.http = opt.http;
  double used = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  lo.time_limit_s = std::max(30.0, opt.time_limit_s - used);
  sum.run = run_local(cfg, lo, stop);
  const auto& r = sum.run;
  auto pass = [](const protocol::EvalRecord& e) {
    return e.k ? nlohmann::json{{"k", e.k}, {"pass_at_1", e.pass_at_1}, {"pass_at_k", e.pass_at_k}} : nlohmann::json();
  };
  nlohmann::json j{{"recipe", recipe.name},
                   {"target_metric", recipe.target_metric},
                   {"initial_pass", pass(r.first_eval)},
                   {"final_pass", pass(r.last_eval)},
                   {"workers", opt.workers},
                   {"mode", cfg.sync.mode},
                   {"slowdown", opt.slowdown},
                   {"base_cached", sum.base.cached},
                   {"pretrain_seconds", sum.base.seconds},
                   {"initial_accuracy", r.initial_accuracy},
                   {"final_accuracy", r.final_accuracy},
                   {"best_accuracy", r.best_accuracy},
                   {"target_accuracy", opt.target_accuracy},
                   {"seconds_to_target", r.seconds_to_target},
                   {"version_seconds_to_target", r.version_seconds_to_target},
                   {"run_seconds", r.seconds},
                   {"total_seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()},
                   {"versions", r.versions},
                   {"updates", r.updates},
                   {"verify_ok", r.verify.ok()}};
  write_file((fs::path(cfg.train.output_dir) / "summary.json").string(), j.dump(2) + "\n");
  return sum;
}

}  // namespace brl::launch
