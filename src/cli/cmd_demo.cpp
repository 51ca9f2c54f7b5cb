// `bucketrl demo`: everything from nothing on one machine. Makes the demo base model (cached
// in OUT/base), then trains it with GRPO + LoRA until the held-out accuracy target or the
// time limit, and prints a summary. By default the training is the real thing: a directory
// bucket, the proxy, N worker processes and the evaluator (async/demo.h); --workers 0 runs
// the same recipe in this one process with no bucket (grpo/train_loop.h).
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "async/demo.h"
#include "cli/command.h"
#include "grpo/demo_recipe.h"
#include "grpo/train_loop.h"
#include "obs/proxy_http.h"
#include "util/log.h"

namespace fs = std::filesystem;

namespace {

int single_process(const brl::async::DemoOptions& o) {
  auto t0 = std::chrono::steady_clock::now();
  brl::RunConfig cfg = brl::demo_run_config();
  cfg.train.output_dir = (fs::path(o.out) / "grpo").string();
  cfg.apply_overrides(o.overrides);
  brl::cli::init_compute(0);  // pretraining: every core
  auto base = brl::async::ensure_demo_base(o.out, cfg);
  brl::cli::init_compute(cfg.train.threads);
  cfg.model.path = base.dir;
  double used = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto s = brl::grpo::run_training(cfg, /*resume=*/false, std::max(30.0, o.time_limit_s - used), o.target_accuracy);
  double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\ndemo (one process): held-out accuracy %.3f -> %.3f after %lld GRPO steps; %.0f s in all\n",
              s.initial_accuracy, s.final_accuracy, static_cast<long long>(s.steps), total);
  std::printf("  base model: %s\n  adapter (PEFT): %s\n", base.dir.c_str(), s.adapter_dir.c_str());
  return s.final_accuracy >= o.target_accuracy ? 0 : 2;
}

brl::cli::Register reg("demo", "make a base model, train it with GRPO + LoRA over a bucket, report held-out accuracy", [](CLI::App& app) {
  static brl::async::DemoOptions o;
  app.add_option("--out", o.out, "working folder (base model cached here; bucket, logs, adapter)")->capture_default_str();
  app.add_option("--time-limit", o.time_limit_s, "seconds for the whole demo, pretraining included")->capture_default_str();
  app.add_option("--target-accuracy", o.target_accuracy, "stop when held-out accuracy reaches this")->capture_default_str();
  app.add_option("--workers", o.workers, "worker processes (0 = one process, no bucket)")->capture_default_str();
  app.add_flag("--sync", o.sync, "the synchronous baseline: a barrier per round (sync.mode = sync)");
  app.add_option("--slowdown", o.slowdown, "benchmarks: per-worker slowdown factors, e.g. 1 1 1 4");
  app.add_option("--eval-interval", o.eval_interval_s, "seconds between the evaluator's held-out evaluations (at least)")
      ->capture_default_str();
  app.add_option("--set", o.overrides, "override a run config key (section.key=value)");
  static std::string device;
  app.add_option("--device", device, "where GRPO runs (the base is pretrained on the CPU): " "cpu | cuda | cuda:N | auto (a GPU when this machine has one)" " (sets model.device)");
  o.http = brl::obs::kDefaultProxyHttp;
  app.add_option("--http", o.http, "the proxy's live dashboard on ADDR:PORT (off: none)")->capture_default_str();
  return [] {
    if (!device.empty()) o.overrides.push_back("model.device=" + device);
    if (o.workers == 0) return single_process(o);
    // Every core for pretraining the base; after that this process only supervises.
    brl::cli::init_compute(0);
    if (auto a = brl::obs::parse_listen_address(o.http); !a.off)
      LOG_INFO("demo: live dashboard at http://{}:{}/ once training starts", a.host, a.port);
    auto t0 = std::chrono::steady_clock::now();
    auto d = brl::async::run_demo(o, brl::cli::stop_on_signals());
    double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto& r = d.run;
    std::printf("\ndemo: held-out accuracy %.3f -> %.3f (best %.3f) with %d workers over a bucket; %lld versions from "
                "%lld updates\n",
                r.initial_accuracy, r.final_accuracy, r.best_accuracy, o.workers, static_cast<long long>(r.versions),
                static_cast<long long>(r.updates));
    std::printf("  time: %.0f s in all (base model %s, training %.0f s%s)\n", total,
                d.base.cached ? "cached" : fmt::format("{:.0f} s", d.base.seconds).c_str(), r.seconds,
                r.seconds_to_target >= 0 ? fmt::format(", target {:.2f} reached after {:.0f} s", o.target_accuracy,
                                                       r.seconds_to_target).c_str()
                                         : "");
    std::printf("  base model: %s\n  bucket: %s\n  adapter (PEFT): %s\n  %s\n", d.base.dir.c_str(), r.bucket.c_str(),
                r.adapter_dir.c_str(), r.verify.summary().c_str());
    if (!r.verify.ok()) return 3;
    return r.final_accuracy >= o.target_accuracy ? 0 : 2;
  };
});

}  // namespace
