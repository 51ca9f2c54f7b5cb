// The parts of the store interface every backend shares: key rules, paging over list(),
// and open_store(), which turns a URL into a backend.
#include "store/object_store.h"

#include <sys/stat.h>

#include <filesystem>

#include "store/local_store.h"
#include "store/s3_store.h"

namespace brl::store {

namespace {

// Checks complete segments of a key or prefix; `what` is "key" or "prefix" for messages.
Status check_segments(const std::string& s, size_t end, const std::string& what) {
  size_t start = 0;
  while (start < end) {
    size_t slash = s.find('/', start);
    if (slash == std::string::npos || slash > end) slash = end;
    std::string_view seg(s.data() + start, slash - start);
    auto bad = [&](const std::string& why) {
      return Status(StatusCode::kInvalidArgument, what + " '" + s + "' " + why);
    };
    if (seg.empty())
      return bad(start == 0 ? "starts with '/' (keys are relative)" : "has an empty segment ('//' or a trailing '/')");
    if (seg == "." || seg == "..") return bad("has a '" + std::string(seg) + "' segment");
    if (seg.substr(0, kTempPrefix.size()) == kTempPrefix)
      return bad("has a segment starting with the reserved '" + std::string(kTempPrefix) + "'");
    start = slash + 1;
  }
  return Status::ok();
}

}  // namespace

Status validate_key(const std::string& key) {
  if (key.empty()) return {StatusCode::kInvalidArgument, "empty key"};
  if (key.size() > 1024)
    return {StatusCode::kInvalidArgument, "key longer than 1024 bytes: '" + key.substr(0, 64) + "...'"};
  if (key.find('\0') != std::string::npos) return {StatusCode::kInvalidArgument, "key contains a NUL byte"};
  if (key.back() == '/')
    return {StatusCode::kInvalidArgument, "key '" + key + "' ends with '/' (that names a prefix, not an object)"};
  return check_segments(key, key.size(), "key");
}

Status validate_prefix(const std::string& prefix) {
  if (prefix.find('\0') != std::string::npos) return {StatusCode::kInvalidArgument, "prefix contains a NUL byte"};
  if (prefix.size() > 1024) return {StatusCode::kInvalidArgument, "prefix longer than 1024 bytes"};
  size_t last = prefix.rfind('/');
  if (last == std::string::npos) return Status::ok();
  return check_segments(prefix, last, "prefix");
}

Result<std::vector<ObjectInfo>> ObjectStore::list_all(const std::string& prefix, const std::string& start_after) {
  std::vector<ObjectInfo> all;
  ListOptions opt;
  opt.prefix = prefix;
  opt.start_after = start_after;
  for (;;) {
    auto page = list(opt);
    if (!page) return page.status();
    for (auto& o : page->objects) all.push_back(std::move(o));
    if (page->next.empty()) break;
    opt.continuation = page->next;
  }
  return all;
}

std::unique_ptr<ObjectStore> open_store(const std::string& url) {
  const std::string hint = "use s3://bucket[/prefix], file:///absolute/dir, or a directory path";
  if (url.empty()) throw UserError("empty store URL", hint);
  if (url.rfind("s3://", 0) == 0) return open_s3_store(url);
  std::string path;
  if (url.rfind("file://", 0) == 0) {
    path = url.substr(7);
    // file://localhost/dir is the same as file:///dir (RFC 8089); other hosts are not ours.
    if (path.rfind("localhost/", 0) == 0) path = path.substr(9);
    if (path.empty() || path[0] != '/')
      throw UserError("store URL '" + url + "' is not file:///absolute/path",
                      "a file URL has three slashes: file:///data/bucket");
  } else {
    size_t scheme = url.find("://");
    if (scheme != std::string::npos)
      throw UserError("store URL '" + url + "' has an unsupported scheme '" + url.substr(0, scheme) + "'",
                      hint + " (for GCS, R2, MinIO or Ceph use s3:// with AWS_ENDPOINT_URL)");
    path = url;
  }
  if (path.find('\0') != std::string::npos) throw UserError("store path contains a NUL byte", hint);
  std::filesystem::path p = std::filesystem::absolute(path).lexically_normal();
  std::string root = p.string();
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  struct stat st;
  if (::stat(root.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
    throw UserError("store path '" + root + "' exists and is not a directory",
                    "a directory store needs a directory (it is created if missing)");
  return std::make_unique<LocalStore>(root);
}

}  // namespace brl::store
