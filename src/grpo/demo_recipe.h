// The demos' hyper-parameters, in one place per recipe: the run config (task, LoRA, GRPO,
// eval) and the pretraining options of its base model. `bucketrl demo --recipe NAME` uses
// both, in one process or with workers; `bucketrl pretrain --recipe NAME` makes the base alone.
// Measured figures and the reasons behind each choice: demo_recipe.cpp.
//  * fast: two-digit addition; the base is taught a wrong habit (a sign error) that GRPO
//    removes in a few versions. Shows the plumbing in about a minute.
//  * skill: three-digit addition with carries; the base is stopped once it gets most problems
//    right in some of 8 sampled tries (validation pass@8 0.75) while ~1 in 4 sampled answers
//    is right; GRPO turns pass@8 into pass@1 and lifts greedy accuracy with it.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "grpo/pretrain.h"

namespace brl {

struct DemoRecipe {
  std::string name;
  RunConfig run;                                        // model.path and train.output_dir are left for the caller
  grpo::PretrainOptions pretrain;                       // out_dir is left for the caller
  TargetMetric target_metric = TargetMetric::accuracy;  // the held-out figure the demo stops on
  double target = 0.9;
  int target_window = 1;          // evaluations averaged for the target (launch::LocalRunOptions)
  double time_limit_s = 600;      // the demo's default, pretraining included
  std::string out = "runs/demo";  // the demo's default working folder
  int threads_per_worker = 1;     // the demo's default worker count leaves each at least this many

  // --workers by default on a machine of `cores`: 2, or fewer where each would get less than
  // threads_per_worker threads (at least 1).
  int default_workers(int cores) const { return std::clamp(cores / threads_per_worker, 1, 2); }
};

// UserError naming the known recipes when `name` is none of them.
DemoRecipe demo_recipe(const std::string& name);
std::vector<std::string> demo_recipe_names();

// The fast recipe's parts (tests and benchmarks that predate named recipes).
RunConfig demo_run_config();

}  // namespace brl

namespace brl::grpo {
PretrainOptions demo_pretrain_options();
}  // namespace brl::grpo
