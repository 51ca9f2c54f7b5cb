#include "worker/join.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "protocol/layout.h"
#include "util/error.h"
#include "util/file.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/progress.h"

namespace brl::worker {

namespace fs = std::filesystem;

std::string cache_root_dir(std::string cache_root) {
  if (cache_root.empty()) {
    if (const char* c = std::getenv("BUCKETRL_CACHE"); c && *c) cache_root = c;
    else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) cache_root = std::string(x) + "/bucketrl";
    else if (const char* h = std::getenv("HOME"); h && *h) cache_root = std::string(h) + "/.cache/bucketrl";
    else cache_root = "/tmp/bucketrl-cache";
  }
  return cache_root;
}

namespace {

// key -> path through a temporary file, checked against sha256; kept when already there.
void fetch_verified(store::ObjectStore& s, const std::string& key, const std::string& sha, const fs::path& path) {
  if (fs::exists(path) && sha256_file_hex(path.string()) == sha) return;
  fs::create_directories(path.parent_path());
  std::string tmp = path.string() + ".tmp-" + std::to_string(getpid());
  s.get_file(key, tmp).throw_if_error();
  if (sha256_file_hex(tmp) != sha) {
    fs::remove(tmp);
    throw UserError(key + " in " + s.describe() + " does not match run.json's sha256",
                    "the object was changed after init; re-create the run");
  }
  fs::rename(tmp, path);
}
// The cache's copy of a base is whole when its marker names the base's sha256.
bool base_complete(const fs::path& dir, const std::string& sha) {
  std::ifstream f(dir / ".complete");
  std::string got;
  return f >> got && got == sha;
}
}  // namespace

RunConfig join_run(store::ObjectStore& s, const protocol::RunDescription& run, const std::string& cache_root) {
  RunConfig cfg;
  cfg.apply_json(run.config, "run.json");
  cfg.model.path = fetch_base(s, run, cache_root);
  fs::path data = fs::path(cache_root_dir(cache_root)) / "data";
  for (std::string* path : {&cfg.task.dataset_path, &cfg.task.eval_path}) {
    if (path->empty()) continue;
    auto it = std::find_if(run.data_files.begin(), run.data_files.end(),
                           [&](auto& f) { return protocol::data_key(f.name) == *path; });
    if (it == run.data_files.end())
      throw UserError("run.json: task file " + *path + " is not among the run's data files");
    fetch_verified(s, *path, it->sha256, data / it->name);
    *path = (data / it->name).string();
  }
  cfg.validate();
  return cfg;
}

std::string fetch_base(store::ObjectStore& s, const protocol::RunDescription& run, std::string cache_root) {
  cache_root = cache_root_dir(cache_root);
  const std::string id = run.base_sha256.substr(0, 16);
  const fs::path dir = fs::path(cache_root) / id;
  if (base_complete(dir, run.base_sha256)) return dir.string();
  fs::create_directories(cache_root);
  // One download per cache: workers started together wait for the first one's copy instead of
  // each fetching the base, and none can replace a copy another is already reading. The kernel
  // drops a dead process's lock, so a download killed halfway stalls no one.
  FileLock lock((fs::path(cache_root) / (".lock-" + id)).string(), [](const std::string&) {
    LOG_INFO("waiting for another process's download of the base model into the same cache");
  });
  if (base_complete(dir, run.base_sha256)) return dir.string();  // placed while we waited
  fs::path tmp = fs::path(cache_root) / (".tmp-" + id + "-" + std::to_string(getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  ProgressOptions po;
  po.label = "download base";
  po.unit = ProgressUnit::kBytes;
  for (auto& f : run.base_files) po.total += static_cast<int64_t>(f.size);
  Progress bar(po);
  for (auto& f : run.base_files) {
    bar.add(0, protocol::base_key(f.name));
    fetch_verified(s, protocol::base_key(f.name), f.sha256, tmp / f.name);
    bar.add(static_cast<int64_t>(f.size));
  }
  bar.finish(std::to_string(run.base_files.size()) + " files");
  write_file((tmp / ".complete").string(), run.base_sha256 + "\n");
  // Placed whole, by rename. A whole copy already there is another process's (only where the
  // file system has no locks): it is used as is, never replaced under a reader. A copy without
  // the marker is one a killed download of an older version left: no one reads it.
  std::error_code ec;
  if (!base_complete(dir, run.base_sha256)) {
    fs::remove_all(dir, ec);
    fs::rename(tmp, dir, ec);
  }
  fs::remove_all(tmp);  // nothing left after a rename
  if (!base_complete(dir, run.base_sha256))
    throw UserError("cannot place the base model cache in " + dir.string() + (ec ? ": " + ec.message() : ""),
                    "check the cache folder's permissions and free space (--cache-dir, $BUCKETRL_CACHE)");
  LOG_INFO("base model {} cached in {}", id, dir.string());
  return dir.string();
}

}  // namespace brl::worker
