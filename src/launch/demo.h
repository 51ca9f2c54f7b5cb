// `bucketrl demo`: everything from nothing on one machine. Makes the demo base model (cached
// in OUT/base), creates a run in a directory bucket (OUT/bucket, fresh each time), trains it
// with the proxy, N workers and the evaluator as separate processes until the held-out
// accuracy target or the time limit, exports the final adapter (PEFT) and prints a summary.
// The recipe (task, model, GRPO settings) is grpo/demo_recipe.h.
#pragma once

#include <atomic>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "launch/local_run.h"
#include "config/run_config.h"
#include "grpo/pretrain.h"

namespace brl::launch {

struct DemoOptions {
  std::string recipe = "fast";  // grpo/demo_recipe.h; the three below default to the recipe's
  std::string out = "runs/demo";
  double time_limit_s = 600;     // the whole demo, pretraining included
  double target_accuracy = 0.9;  // of the recipe's target metric (held-out accuracy or pass@1)
  int workers = 2;
  double eval_interval_s = 5;
  bool sync = false;                   // the synchronous baseline (sync.mode = sync)
  std::vector<double> slowdown;        // per worker, for benchmarks
  std::string http;                    // the proxy's dashboard ADDR:PORT | off ("" = its default)
  std::vector<std::string> overrides;  // --set section.key=value
};

struct DemoBase {
  std::string dir;
  bool cached = false;
  double seconds = 0, accuracy = -1, skill = -1;  // of the pretraining, when it ran
};

// OUT/base: made by grpo::pretrain with the recipe's options `po`, unless a base made from the
// same options and task is there (OUT/base/bucketrl_base_recipe.json = demo_base_recipe(cfg, po)).
DemoBase ensure_demo_base(const std::string& out, const RunConfig& cfg, const grpo::PretrainOptions& po);
nlohmann::json demo_base_recipe(const RunConfig& cfg, const grpo::PretrainOptions& po);
bool demo_base_cached(const std::string& base_dir, const RunConfig& cfg, const grpo::PretrainOptions& po);
// Marks base_dir, a finished base, as made from (cfg's task, po): `bucketrl pretrain --recipe R
// --out OUT/base` then gives `bucketrl demo --recipe R --out OUT` its base (on another machine too).
void record_demo_base(const std::string& base_dir, const RunConfig& cfg, const grpo::PretrainOptions& po);

struct DemoSummary {
  LocalRunSummary run;
  DemoBase base;
};

// Also writes OUT/run/summary.json (accuracies, times, versions) for scripts.
DemoSummary run_demo(const DemoOptions& opt, const std::atomic<bool>& stop);

}  // namespace brl::launch
