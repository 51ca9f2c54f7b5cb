#include "async/demo.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "grpo/demo_recipe.h"
#include "grpo/pretrain.h"
#include "tasks/task.h"
#include "util/log.h"

namespace brl::async {

namespace fs = std::filesystem;

DemoBase ensure_demo_base(const std::string& out, const RunConfig& cfg) {
  DemoBase b;
  b.dir = (fs::path(out) / "base").string();
  if (fs::exists(fs::path(b.dir) / "model.safetensors")) {
    b.cached = true;
    LOG_INFO("demo: using the cached base model in {}", b.dir);
    return b;
  }
  grpo::PretrainOptions po = grpo::demo_pretrain_options();
  po.out_dir = b.dir;
  auto task = tasks::make_task(cfg.task);
  auto r = grpo::pretrain(*task, po);
  b.seconds = r.seconds;
  b.accuracy = r.accuracy;
  b.skill = r.skill;
  LOG_INFO("demo: base model made in {:.0f} s ({} steps): held-out accuracy {:.3f}, skill {:.3f}", r.seconds, r.steps,
           r.accuracy, r.skill);
  return b;
}

DemoSummary run_demo(const DemoOptions& opt, const std::atomic<bool>& stop) {
  auto t0 = std::chrono::steady_clock::now();
  DemoSummary sum;
  RunConfig cfg = demo_run_config();
  cfg.train.output_dir = (fs::path(opt.out) / "run").string();
  if (opt.sync) cfg.sync.mode = "sync";
  cfg.apply_overrides(opt.overrides);
  sum.base = ensure_demo_base(opt.out, cfg);
  cfg.model.path = sum.base.dir;
  // A fresh run each time: only what the run writes is removed (output_dir may be a user's
  // folder via --set); the base model and the workers' model cache stay.
  const fs::path run_dir(cfg.train.output_dir);
  for (const char* sub : {"bucket", "logs", "adapter", "summary.json"}) fs::remove_all(run_dir / sub);
  LocalRunOptions lo;
  lo.bucket = (run_dir / "bucket").string();
  lo.workers = opt.workers;
  lo.target_accuracy = opt.target_accuracy;
  lo.eval_interval_s = opt.eval_interval_s;
  lo.slowdown = opt.slowdown;
  lo.http = opt.http;
  double used = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  lo.time_limit_s = std::max(30.0, opt.time_limit_s - used);
  sum.run = run_local(cfg, lo, stop);
  const auto& r = sum.run;
  nlohmann::json j{{"workers", opt.workers}, {"mode", cfg.sync.mode}, {"slowdown", opt.slowdown},
                   {"base_cached", sum.base.cached}, {"pretrain_seconds", sum.base.seconds},
                   {"initial_accuracy", r.initial_accuracy}, {"final_accuracy", r.final_accuracy},
                   {"best_accuracy", r.best_accuracy}, {"target_accuracy", opt.target_accuracy},
                   {"seconds_to_target", r.seconds_to_target}, {"run_seconds", r.seconds},
                   {"total_seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()},
                   {"versions", r.versions}, {"updates", r.updates}, {"verify_ok", r.verify.ok()}};
  std::ofstream(fs::path(cfg.train.output_dir) / "summary.json") << j.dump(2) << "\n";
  return sum;
}

}  // namespace brl::async
