// `bucketrl demo`: everything from nothing on one machine. Makes the demo base model (cached
// in OUT/base), then trains it with GRPO + LoRA until the held-out accuracy target or the
// time limit, and prints a summary. By default the training is the real thing: a directory
// bucket, the proxy, N worker processes and the evaluator (launch/demo.h); --workers 0 runs
// the same recipe in this one process with no bucket (grpo/train_loop.h).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "launch/demo.h"
#include "cli/command.h"
#include "grpo/demo_recipe.h"
#include "grpo/train_loop.h"
#include "obs/proxy_http.h"
#include "util/log.h"

namespace fs = std::filesystem;

namespace {

// "; pass@1 0.172 -> 0.603, pass@8 0.625 -> 0.760" when both evaluations measured pass@k.
std::string pass_change(int64_t k0, double p10, double pk0, int64_t k1, double p11, double pk1) {
  if (!k0 || !k1) return "";
  return fmt::format("; pass@1 {:.3f} -> {:.3f}, pass@{} {:.3f} -> {:.3f}", p10, p11, k1, pk0, pk1);
}

int single_process(const brl::launch::DemoOptions& o) {
  auto t0 = std::chrono::steady_clock::now();
  const brl::DemoRecipe recipe = brl::demo_recipe(o.recipe);
  brl::RunConfig cfg = recipe.run;
  cfg.train.output_dir = (fs::path(o.out) / "grpo").string();
  cfg.apply_overrides(o.overrides);
  brl::cli::init_compute(0);  // pretraining: every core
  auto base = brl::launch::ensure_demo_base(o.out, cfg, recipe.pretrain);
  brl::cli::init_compute(cfg.train.threads);
  cfg.model.path = base.dir;
  double used = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto s = brl::grpo::run_training(cfg, /*resume=*/false, std::max(30.0, o.time_limit_s - used), o.target_accuracy,
                                   recipe.target_metric);
  double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto &a = s.initial_eval, &b = s.final_eval;
  std::printf("\ndemo (one process): held-out accuracy %.3f -> %.3f%s after %lld GRPO steps; %.0f s in all\n",
              s.initial_accuracy, s.final_accuracy,
              pass_change(a.k, a.pass_at_1, a.pass_at_k, b.k, b.pass_at_1, b.pass_at_k).c_str(),
              static_cast<long long>(s.steps), total);
  std::printf("  base model: %s\n  adapter (PEFT): %s\n", base.dir.c_str(), s.adapter_dir.c_str());
  const double reached = recipe.target_metric == brl::TargetMetric::pass_at_1 ? b.pass_at_1 : s.final_accuracy;
  return reached >= o.target_accuracy ? 0 : 2;
}

brl::cli::RunFn setup_demo(CLI::App& app) {
  static brl::launch::DemoOptions o;
  static bool print_config = false;
  app.add_option("--recipe", o.recipe,
                 "fast: two-digit addition, a base with a wrong habit GRPO removes (about a minute); "
                 "skill: three-digit addition, a base stopped early, GRPO lifts sampled pass@1 (minutes)")
      ->capture_default_str();
  auto* out_opt = app.add_option("--out", o.out,
                                 "working folder (base model cached here; bucket, logs, adapter) "
                                 "[default: runs/demo, runs/demo-skill]");
  auto* limit_opt = app.add_option("--time-limit", o.time_limit_s,
                                   "seconds for the whole demo, pretraining included [default: 600, skill 900]");
  auto* target_opt = app.add_option("--target-accuracy", o.target_accuracy,
                                    "stop when the recipe's held-out figure reaches this: accuracy (fast, default 0.9) "
                                    "or sampled pass@1 (skill, default 0.62)");
  app.add_flag("--print-config", print_config, "print the recipe's run config (JSON, after --set) and exit");
  auto* workers_opt = app.add_option(
      "--workers", o.workers,
      "worker processes (0 = one process, no bucket) [default: 2; skill: 1 below 4 cores, for 2 threads each]");
  app.add_flag("--sync", o.sync, "the synchronous baseline: a barrier per round (sync.mode = sync)");
  app.add_option("--slowdown", o.slowdown, "benchmarks: per-worker slowdown factors, e.g. 1 1 1 4");
  app.add_option("--eval-interval", o.eval_interval_s,
                 "seconds between the evaluator's held-out evaluations (at least)")
      ->capture_default_str();
  app.add_option("--set", o.overrides, "override a run config key (section.key=value)");
  static std::string device;
  app.add_option("--device", device,
                 "where GRPO runs (the base is pretrained on the CPU): "
                 "cpu | cuda | cuda:N | auto (a GPU when this machine has one)"
                 " (sets model.device); on several GPUs, auto and cuda give the workers one each in turn");
  o.http = brl::obs::kDefaultProxyHttp;
  app.add_option("--http", o.http, "the proxy's live dashboard on ADDR:PORT (off: none)")->capture_default_str();
  return [=] {
    const brl::DemoRecipe recipe = brl::demo_recipe(o.recipe);
    if (!out_opt->count()) o.out = recipe.out;
    if (!limit_opt->count()) o.time_limit_s = recipe.time_limit_s;
    if (!target_opt->count()) o.target_accuracy = recipe.target;
    if (!workers_opt->count())
      o.workers = recipe.default_workers(static_cast<int>(std::thread::hardware_concurrency()));
    if (!device.empty()) o.overrides.push_back("model.device=" + device);
    if (print_config) {
      brl::RunConfig cfg = recipe.run;
      cfg.apply_overrides(o.overrides);
      std::printf("%s\n", cfg.to_json().dump(2).c_str());
      return 0;
    }
    if (o.workers == 0) return single_process(o);
    // Every core for pretraining the base; after that this process only supervises.
    brl::cli::init_compute(0);
    if (auto a = brl::obs::parse_listen_address(o.http); !a.off)
      LOG_INFO("demo: live dashboard at http://{}:{}/ once training starts", a.host, a.port);
    auto t0 = std::chrono::steady_clock::now();
    auto d = brl::launch::run_demo(o, brl::cli::stop_on_signals());
    double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto& r = d.run;
    const auto &a = r.first_eval, &b = r.last_eval;
    std::printf(
        "\ndemo: held-out accuracy %.3f -> %.3f (best %.3f)%s with %d workers over a bucket; %lld versions from "
        "%lld updates\n",
        r.initial_accuracy, r.final_accuracy, r.best_accuracy,
        pass_change(a.k, a.pass_at_1, a.pass_at_k, b.k, b.pass_at_1, b.pass_at_k).c_str(), o.workers,
        static_cast<long long>(r.versions), static_cast<long long>(r.updates));
    std::printf("  time: %.0f s in all (base model %s, training %.0f s%s)\n", total,
                d.base.cached ? "cached" : fmt::format("{:.0f} s", d.base.seconds).c_str(), r.seconds,
                r.seconds_to_target >= 0
                    ? fmt::format(", target {:.2f} reached after {:.0f} s{}", o.target_accuracy, r.seconds_to_target,
                                  recipe.target_window > 1
                                      ? fmt::format(" (mean of the last {} evaluations)", recipe.target_window)
                                      : "")
                          .c_str()
                    : "");
    std::printf("  base model: %s\n  bucket: %s\n  adapter (PEFT): %s\n  %s\n", d.base.dir.c_str(), r.bucket.c_str(),
                r.adapter_dir.c_str(), r.verify.summary().c_str());
    if (!r.verify.ok()) return 3;
    return (recipe.target_metric == brl::TargetMetric::pass_at_1 ? b.pass_at_1 : r.final_accuracy) >= o.target_accuracy
               ? 0
               : 2;
  };
}
brl::cli::Register reg("demo", "make a base model, train it with GRPO + LoRA over a bucket, report held-out accuracy",
                       setup_demo);

}  // namespace
