// `bucketrl bucket ls|cp|cat|rm`: look into a run's bucket with the same store code, URL
// parsing and credentials the workers use (store/object_store.h).
//
// How a URL splits into store + key:
//  - s3://BUCKET/KEY      the store is s3://BUCKET, the rest is the key (or a list prefix);
//  - file:///DIR/KEY      a directory store; the key is the last path component and the store
//                         root its folder. A directory store maps key "a/b" under root R to
//                         the file R/a/b, so any split of a path names the same bytes;
//  - a plain path         a local file (cp), or like file:// (ls, cat, rm).
// ls prints full URLs, ready to paste into cat/cp/rm.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "cli/command.h"
#include "store/local_store.h"
#include "store/object_store.h"
#include "util/error.h"

namespace {

using brl::Status;
using brl::UserError;
using namespace brl::store;

// A place named on the command line: an object (or prefix) in a store, or a local file.
struct Location {
  std::string url_base;                // printed before keys: "s3://b/" or "file:///dir/"
  std::unique_ptr<ObjectStore> store;  // null for a plain local file in cp
  std::string key;                     // key or prefix within the store
  std::string local_path;              // set for local files and directory stores
  bool is_local_file() const { return !store; }
};

bool is_dir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Absolute, normalized, without a trailing '/' (but "/" stays "/").
std::string abs_path(const std::string& p) {
  std::string a = std::filesystem::absolute(p).lexically_normal().string();
  while (a.size() > 1 && a.back() == '/') a.pop_back();
  return a;
}

// "file:///x" -> "/x"; a plain path -> its absolute form.
std::string path_of_url(const std::string& url) {
  if (url.rfind("file://", 0) == 0) {
    std::string p = url.substr(7);
    if (p.rfind("localhost/", 0) == 0) p = p.substr(9);
    if (p.empty() || p[0] != '/')
      throw UserError("'" + url + "' is not file:///absolute/path", "a file URL has three slashes");
    return p;
  }
  return url;
}

// as_prefix: the last component may name a folder to list (ls, rm -r).
Location resolve(const std::string& url, bool plain_is_local_file, bool as_prefix) {
  Location loc;
  if (url.rfind("s3://", 0) == 0) {
    std::string rest = url.substr(5);
    size_t slash = rest.find('/');
    std::string bucket = rest.substr(0, slash);
    if (bucket.empty()) throw UserError("'" + url + "' names no bucket", "write s3://BUCKET/KEY");
    loc.store = open_store("s3://" + bucket);
    loc.url_base = "s3://" + bucket + "/";
    loc.key = slash == std::string::npos ? "" : rest.substr(slash + 1);
    return loc;
  }
  const bool is_file_url = url.rfind("file://", 0) == 0;
  if (!is_file_url && url.find("://") != std::string::npos)
    throw UserError("'" + url + "': unsupported URL scheme", "use s3://BUCKET/KEY, file:///DIR/KEY or a path");
  std::string path = abs_path(path_of_url(url));
  const bool trailing = url.size() > 1 && url.back() == '/';
  loc.local_path = path;
  if (plain_is_local_file && !is_file_url) return loc;
  std::string root, key;
  if (as_prefix && (trailing || is_dir(path))) {
    root = path;  // list everything under the folder
  } else {
    auto p = std::filesystem::path(path);
    root = p.parent_path().string();
    key = p.filename().string();
  }
  loc.store = open_store(root);
  loc.url_base = "file://" + (root == "/" ? std::string() : root) + "/";
  loc.key = key;
  return loc;
}

std::string basename_of(const std::string& key) {
  size_t s = key.rfind('/');
  return s == std::string::npos ? key : key.substr(s + 1);
}

void check(const Status& st, const std::string& what) {
  if (!st) throw UserError(what + ": " + st.to_string());
}

// ---- ls -------------------------------------------------------------------------------

int run_ls(const std::vector<std::string>& urls, bool recursive) {
  for (const auto& url : urls) {
    Location loc = resolve(url, false, true);
    auto all = loc.store->list_all(loc.key);
    check(all.status(), "bucket ls " + url);
    std::set<std::string> shown_prefixes;
    for (const auto& o : *all) {
      if (!recursive) {
        // Group keys below the next '/' into one "PRE" line, as `aws s3 ls` does.
        size_t cut = o.key.find('/', loc.key.size());
        if (cut != std::string::npos) {
          std::string pre = o.key.substr(0, cut + 1);
          if (shown_prefixes.insert(pre).second) std::printf("%30s  %s%s\n", "PRE", loc.url_base.c_str(), pre.c_str());
          continue;
        }
      }
      std::time_t t = static_cast<std::time_t>(o.mtime_ms / 1000);
      std::tm tm{};
      ::gmtime_r(&t, &tm);
      char when[32];
      std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
      std::printf("%s %10llu  %s%s\n", when, static_cast<unsigned long long>(o.size), loc.url_base.c_str(),
                  o.key.c_str());
    }
  }
  return 0;
}

// ---- cp -------------------------------------------------------------------------------

int run_cp(const std::string& src_url, const std::string& dst_url, bool create_only) {
  Location src = resolve(src_url, true, false);
  Location dst = resolve(dst_url, true, false);
  const std::string src_name =
      src.is_local_file() ? std::filesystem::path(src.local_path).filename().string() : basename_of(src.key);
  if (src_name.empty()) throw UserError("bucket cp: source '" + src_url + "' names no object", "give the full key");
  // A destination folder or prefix (trailing '/', empty key, existing folder) gets the source's name.
  if (dst.is_local_file()) {
    if (dst_url.back() == '/' || is_dir(dst.local_path)) dst.local_path += "/" + src_name;
  } else if (dst_url.back() == '/' || dst.key.empty()) {
    if (dst.url_base.rfind("file://", 0) == 0)
      dst = resolve(dst_url + (dst_url.back() == '/' ? "" : "/") + src_name, true, false);
    else dst.key += (dst.key.empty() || dst.key.back() == '/' ? "" : "/") + src_name;
  } else if (!dst.local_path.empty() && is_dir(dst.local_path)) {
    dst = resolve(dst_url + "/" + src_name, true, false);
  }
  if (dst.is_local_file()) {  // like `aws s3 cp`: make the destination's folders
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(dst.local_path).parent_path(), ec);
  }
  PutOptions po;
  po.create_only = create_only;
  const std::string what = "bucket cp " + src_url + " " + dst_url;
  if (src.is_local_file() && dst.is_local_file()) {
    check(copy_file_atomic(src.local_path, dst.local_path), what);
  } else if (src.is_local_file()) {
    check(dst.store->put_file(dst.key, src.local_path, po), what);
  } else if (dst.is_local_file()) {
    check(src.store->get_file(src.key, dst.local_path), what);
  } else {
    // Bucket to bucket: through a local temporary file, streamed both ways.
    std::string tmp = (std::filesystem::temp_directory_path() / "bucketrl-cp-XXXXXX").string();
    int fd = ::mkstemp(tmp.data());
    if (fd < 0)
      throw UserError("bucket cp: cannot create a temporary file in " +
                      std::filesystem::temp_directory_path().string());
    ::close(fd);
    Status st = src.store->get_file(src.key, tmp);
    if (st) st = dst.store->put_file(dst.key, tmp, po);
    ::unlink(tmp.c_str());
    check(st, what);
  }
  return 0;
}

// ---- cat ------------------------------------------------------------------------------

int run_cat(const std::vector<std::string>& urls) {
  constexpr uint64_t kChunk = 8u << 20;  // bounded memory for large objects
  for (const auto& url : urls) {
    Location loc = resolve(url, false, false);
    auto info = loc.store->head(loc.key);
    check(info.status(), "bucket cat " + url);
    for (uint64_t off = 0; off < info->size; off += kChunk) {
      GetOptions g;
      g.offset = off;
      g.length = std::min(kChunk, info->size - off);
      auto part = loc.store->get(loc.key, g);
      check(part.status(), "bucket cat " + url);
      if (std::fwrite(part->data(), 1, part->size(), stdout) != part->size())
        throw UserError("bucket cat: writing to stdout failed");
    }
  }
  std::fflush(stdout);
  return 0;
}

// ---- rm -------------------------------------------------------------------------------

int run_rm(const std::vector<std::string>& urls, bool recursive) {
  int failed = 0;
  for (const auto& url : urls) {
    Location loc = resolve(url, false, recursive);
    std::vector<std::string> keys;
    if (recursive) {
      auto all = loc.store->list_all(loc.key);
      check(all.status(), "bucket rm " + url);
      for (auto& o : *all) keys.push_back(o.key);
    } else {
      keys.push_back(loc.key);
    }
    for (const auto& k : keys) {
      Status st = loc.store->remove(k);
      if (st) std::printf("removed %s%s\n", loc.url_base.c_str(), k.c_str());
      else
        std::fprintf(stderr, "error: bucket rm %s%s: %s\n", loc.url_base.c_str(), k.c_str(), st.to_string().c_str()),
            ++failed;
    }
  }
  return failed ? 1 : 0;
}

struct Args {
  std::vector<std::string> urls;
  std::string src, dst;
  bool recursive = false, create_only = false;
};

brl::cli::RunFn setup_bucket(CLI::App& app) {
  auto a = std::make_shared<Args>();
  app.require_subcommand(1);
  app.footer(
      "URLs: s3://BUCKET/KEY (S3 settings from AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, ...,\n"
      "~/.aws), file:///DIR/KEY or a path for a directory store (key \"a/b\" is the file DIR/a/b).\n"
      "Examples:\n"
      "  bucketrl bucket ls s3://runs/run1/global/        keys under that prefix, folders as PRE\n"
      "  bucketrl bucket ls -r /data/bucket/run1          every object under the folder\n"
      "  bucketrl bucket cat s3://runs/run1/global/LATEST\n"
      "  bucketrl bucket cp adapter.bin s3://runs/run1/tmp/   (a trailing / keeps the source name)\n"
      "  bucketrl bucket cp s3://runs/run1/run.json ./\n"
      "  bucketrl bucket rm -r s3://runs/old-run/\n");
  auto* ls = app.add_subcommand("ls", "list objects under URL prefixes (full URLs, size, UTC mtime)");
  ls->add_option("url", a->urls, "s3://BUCKET/PREFIX, file:///DIR/PREFIX or a folder")->required();
  ls->add_flag("-r,--recursive", a->recursive, "list every key below, instead of grouping by the next '/'");
  auto* cp = app.add_subcommand("cp", "copy one object: local file <-> bucket, or bucket -> bucket");
  cp->add_option("src", a->src, "a local file or an object URL")->required();
  cp->add_option("dst", a->dst, "a local file/folder or an object URL (trailing '/' keeps the source name)")
      ->required();
  cp->add_flag("--create-only", a->create_only, "fail if the destination object exists (atomic)");
  auto* cat = app.add_subcommand("cat", "write objects to stdout");
  cat->add_option("url", a->urls, "object URLs")->required();
  auto* rm = app.add_subcommand("rm", "delete objects (a missing one is not an error)");
  rm->add_option("url", a->urls, "object URLs (with -r: prefixes)")->required();
  rm->add_flag("-r,--recursive", a->recursive, "delete every object under the prefix");
  return [a, ls, cp, cat, rm]() -> int {
    if (ls->parsed()) return run_ls(a->urls, a->recursive);
    if (cp->parsed()) return run_cp(a->src, a->dst, a->create_only);
    if (cat->parsed()) return run_cat(a->urls);
    if (rm->parsed()) return run_rm(a->urls, a->recursive);
    return 2;
  };
}
brl::cli::Register reg("bucket", "look into a run's bucket: ls, cp, cat, rm (s3://BUCKET/KEY, file:///DIR/KEY, paths)",
                       setup_bucket);

}  // namespace
