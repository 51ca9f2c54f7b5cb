// The demo's hyper-parameters, in one place: the run config (task, LoRA, GRPO, eval) and the
// pretraining options of its base model. `bucketrl demo` uses both; so does the bucket demo
// with workers. Measured figures and the reasons behind each choice: demo_recipe.cpp.
#pragma once

#include "config/run_config.h"
#include "grpo/pretrain.h"

namespace brl {

// Task, LoRA and GRPO settings. train.output_dir and model.path are left for the caller.
RunConfig demo_run_config();

}  // namespace brl

namespace brl::grpo {

// The base model: width, steps, stopping rule and the taught wrong habit. out_dir is left
// for the caller.
PretrainOptions demo_pretrain_options();

}  // namespace brl::grpo
