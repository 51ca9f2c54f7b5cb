// Creating a run in a bucket (`bucketrl init`): the base model upload, version 0 and
// run.json. Joining one is the worker's side (worker/join.h).
#pragma once

#include "config/run_config.h"
#include "protocol/records.h"
#include "store/object_store.h"

namespace brl::launch {

// Uploads cfg.model.path (an HF folder) to base/, publishes global version 0 (the adapter as
// PEFT initializes it, from lora.init_seed) and writes run.json last: a run whose run.json
// exists is complete. [security] allowed_keys_file is read here: run.json stores the keys.
// Throws UserError if the bucket already holds a run.
protocol::RunDescription init_run(store::ObjectStore& s, RunConfig cfg);

}  // namespace brl::launch
