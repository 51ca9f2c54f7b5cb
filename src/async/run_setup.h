// Creating a run in a bucket (`bucketrl init`) and joining one: the base model upload and
// the sha256-keyed local cache every worker downloads it into.
#pragma once

#include <string>

#include "config/run_config.h"
#include "protocol/records.h"
#include "store/object_store.h"

namespace brl::async {

// Uploads cfg.model.path (an HF folder) to base/, publishes global version 0 (the adapter as
// PEFT initializes it, from lora.init_seed) and writes run.json last: a run whose run.json
// exists is complete. [security] allowed_keys_file is read here: run.json stores the keys.
// Throws UserError if the bucket already holds a run.
protocol::RunDescription init_run(store::ObjectStore& s, RunConfig cfg);

// What a worker or evaluator needs to join a run: the run's config with model.path and the
// task's data paths pointing at local, verified copies (downloaded once into the cache).
RunConfig join_run(store::ObjectStore& s, const protocol::RunDescription& run, const std::string& cache_root = "");

// The base model of `run` in cache_root/<sha256[:16]>/ (downloaded and verified file by file
// when absent; concurrent callers are safe). cache_root "" = $BUCKETRL_CACHE, else
// $XDG_CACHE_HOME/bucketrl, else ~/.cache/bucketrl.
std::string fetch_base(store::ObjectStore& s, const protocol::RunDescription& run, std::string cache_root = "");

}  // namespace brl::async
