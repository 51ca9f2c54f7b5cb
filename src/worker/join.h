// Joining a run (a worker or the evaluator): the base model and task files from the bucket
// into a sha256-keyed local cache, verified file by file.
#pragma once

#include <string>

#include "config/run_config.h"
#include "protocol/records.h"
#include "store/object_store.h"

namespace brl::worker {

// The run's config with model.path and the task's data paths pointing at local, verified
// copies (downloaded once into the cache).
RunConfig join_run(store::ObjectStore& s, const protocol::RunDescription& run, const std::string& cache_root = "");

// The local cache's root: cache_root itself, or when "" $BUCKETRL_CACHE, else
// $XDG_CACHE_HOME/bucketrl, else ~/.cache/bucketrl.
std::string cache_root_dir(std::string cache_root);

// The base model of `run` in cache_root_dir(cache_root)/<sha256[:16]>/ (downloaded and
// verified file by file when absent). Concurrent callers share one download: the others wait
// on a lock file in the cache (released by the kernel if its holder dies) and use its copy.
std::string fetch_base(store::ObjectStore& s, const protocol::RunDescription& run, std::string cache_root = "");

}  // namespace brl::worker
