// The directory backend: key "a/b/c" is the file <root>/a/b/c. The embedded default for one
// machine (several processes may share the directory).
//
// Atomicity: every write goes to a temporary file ".brl-tmp-*" in the destination folder,
// is fsynced, then renamed into place, and the folder is fsynced. A reader sees the old or
// the new object; a crash leaves at most a stale temporary file, never a partial object
// under a real key (list() never shows temporaries; cleanup_stale_temp() removes them).
// Create-only puts use renameat2(RENAME_NOREPLACE), or link(2) where the filesystem lacks
// it: the kernel lets exactly one of any number of racing processes create the name.
//
// ETag: "<inode>-<size>-<mtime ns>" in hex, from stat(2). Not a content hash, so head() and
// list() never read object bodies (64 MiB adapters); every put makes a new inode and stamps
// the mtime with the nanosecond clock, so a rewrite changes the etag. Opaque, as on S3,
// where it is usually an MD5 and differs for multipart objects.
//
// A directory store cannot hold both "a" and "a/b" (a file and a folder of one name); such a
// put fails with kInvalidArgument. Only regular files are objects: list() skips symlinks and
// anything else it finds (get() of a symlink placed by hand follows it, as open(2) does).
#pragma once

#include <chrono>
#include <string>

#include "store/object_store.h"

namespace brl::store {

class LocalStore : public ObjectStore {
 public:
  explicit LocalStore(std::string root);  // absolute, normalized; created on first put

  Status put(const std::string& key, const std::string& data, const PutOptions& opt = {}) override;
  Status put_file(const std::string& key, const std::string& path, const PutOptions& opt = {}) override;
  Result<std::string> get(const std::string& key, const GetOptions& opt = {}) override;
  Status get_file(const std::string& key, const std::string& path) override;
  Result<ObjectInfo> head(const std::string& key) override;
  Result<ListPage> list(const ListOptions& opt) override;
  Status remove(const std::string& key) override;
  std::string describe() const override { return root_; }

  // Removes temporary files older than max_age (left by crashed writers); returns how many.
  Result<int> cleanup_stale_temp(std::chrono::seconds max_age = std::chrono::hours(1));

  const std::string& root() const { return root_; }

 private:
  std::string path_of(const std::string& key) const { return root_ + "/" + key; }

  std::string root_;
};

// Copies a file atomically (temp file in dst's folder + fsync + rename + folder fsync):
// the same code path as get_file/put_file, for callers that copy local files.
Status copy_file_atomic(const std::string& src, const std::string& dst);

}  // namespace brl::store
