// The bucket: the one storage interface the worker and proxy use (DESIGN.md).
// Backends: a local directory (file:///path or a plain path) and S3 (s3://bucket/prefix).
// Keys are '/'-separated relative names ("global/v00000001/manifest.json"); a store opened
// on a URL with a prefix sees only keys under that prefix. Expected failures come back as
// Status values; nothing here throws for I/O.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace brl::store {

struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
  std::string etag;      // opaque; unquoted
  int64_t mtime_ms = 0;  // last modified, ms since epoch
};

struct PutOptions {
  bool create_only = false;  // fail with kPreconditionFailed if the key exists (atomic)
  std::string content_type = "application/octet-stream";
};

struct GetOptions {
  // Byte range [offset, offset+length); length = nullopt means to the end.
  uint64_t offset = 0;
  std::optional<uint64_t> length;
};

struct ListOptions {
  std::string prefix;        // keys starting with this
  std::string start_after;   // keys strictly greater than this (lexicographic)
  int max_keys = 1000;       // page size
  std::string continuation;  // from ListPage::next, to get the next page
};

struct ListPage {
  std::vector<ObjectInfo> objects;  // sorted by key
  std::string next;                 // empty when this was the last page
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;

  // Whole object, atomic: readers see the old object or the new one, never part of one.
  virtual Status put(const std::string& key, const std::string& data, const PutOptions& opt = {}) = 0;
  // Streams the file (large objects: multipart on S3) without holding it in memory.
  virtual Status put_file(const std::string& key, const std::string& path, const PutOptions& opt = {}) = 0;
  virtual Result<std::string> get(const std::string& key, const GetOptions& opt = {}) = 0;
  // Streams to a file (written to a temporary file, renamed into place when complete).
  virtual Status get_file(const std::string& key, const std::string& path) = 0;
  virtual Result<ObjectInfo> head(const std::string& key) = 0;
  virtual Result<ListPage> list(const ListOptions& opt) = 0;
  // Deleting a missing key is not an error (as in S3).
  virtual Status remove(const std::string& key) = 0;

  // A human-readable location for messages ("s3://b/prefix", "/path/to/dir"); no secrets.
  virtual std::string describe() const = 0;

  // All pages of a listing.
  Result<std::vector<ObjectInfo>> list_all(const std::string& prefix, const std::string& start_after = "");
};

// Names starting with this are the directory store's temporary files: never listed, never keys.
inline constexpr std::string_view kTempPrefix = ".brl-tmp-";

// Keys every backend accepts (and the same ones everywhere, so a run can move between a
// directory and S3): 1..1024 bytes, '/'-separated segments, none empty, "." or "..", no NUL,
// no leading '/', no segment starting with ".brl-tmp-" (reserved for the directory store's
// temporary files). Returns kInvalidArgument naming the key and the rule it broke.
Status validate_key(const std::string& key);
// A list prefix: "" or a key prefix whose complete segments (up to the last '/') obey the
// rules above; the last partial segment may be anything but contain NUL.
Status validate_prefix(const std::string& prefix);

// Opens "file:///abs/path", a plain path, or "s3://bucket[/prefix]" (S3 settings from the
// environment: AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, ... see s3_store.h).
// Throws UserError for a malformed URL (caller mistake); connection errors surface later.
std::unique_ptr<ObjectStore> open_store(const std::string& url);

}  // namespace brl::store
