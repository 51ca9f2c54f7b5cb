// The directory backend (see local_store.h for the guarantees and the etag choice).
#include "store/local_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <random>
#include <vector>

namespace brl::store {

namespace {

// ---- errors -------------------------------------------------------------------------

Status errno_status(const std::string& op, const std::string& path, int err) {
  std::string msg = op + " '" + path + "': " + std::strerror(err);
  switch (err) {
    case ENOENT: return {StatusCode::kNotFound, msg};
    case EACCES:
    case EPERM:
      return {StatusCode::kAccessDenied,
              msg + " (this process runs as uid " + std::to_string(::geteuid()) +
                  ": give it access to that folder (owner, mode) or run it as the folder's owner)"};
    case EROFS:
      return {StatusCode::kAccessDenied, msg + " (read-only filesystem: remount it read-write or use another folder)"};
    case ENOSPC:
    case EDQUOT:
      return {StatusCode::kIOError,
              msg +
                  " (disk full or quota exceeded: free space on that filesystem or move the bucket "
                  "to a larger one)"};
    default: return {StatusCode::kIOError, msg};  // EIO, EFBIG, ...
  }
}

// The message for writes where a path component is a file (a store cannot hold "a" and "a/b").
Status conflict_status(const std::string& key, const std::string& path) {
  return {StatusCode::kInvalidArgument, "key '" + key + "' conflicts with an existing object or folder at '" + path +
                                            "' (a directory store cannot hold both 'x' and 'x/...')"};
}

// ---- small POSIX helpers ------------------------------------------------------------

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  int release() {
    int f = fd;
    fd = -1;
    return f;
  }
};

std::string dir_of(const std::string& path) {
  size_t s = path.rfind('/');
  if (s == std::string::npos) return ".";
  if (s == 0) return "/";
  return path.substr(0, s);
}

Status fsync_dir(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  // Gone: a concurrent remove() emptied and pruned it after our rename or unlink, so there
  // is no entry of ours left in it to make durable.
  if (fd.fd < 0 && errno == ENOENT) return Status::ok();
  if (fd.fd < 0) return errno_status("open folder", dir, errno);
  // Some filesystems refuse fsync on a directory (EINVAL); the rename is then as durable
  // as that filesystem makes it.
  if (::fsync(fd.fd) != 0 && errno != EINVAL) return errno_status("fsync folder", dir, errno);
  return Status::ok();
}

// mkdir -p of `dir`, which lies under `root` (root itself is created too). New folders are
// made durable by fsyncing their parents.
Status make_dirs(const std::string& root, const std::string& dir) {
  std::vector<std::string> todo;
  for (std::string d = dir;; d = dir_of(d)) {
    struct stat st;
    if (::stat(d.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) return {StatusCode::kInvalidArgument, "'" + d + "' is a file, not a folder"};
      break;
    }
    if (errno == ENOTDIR) return {StatusCode::kInvalidArgument, "a component of '" + d + "' is a file"};
    todo.push_back(d);
    if (d == "/" || d == "." || d.size() <= 1) break;
  }
  for (auto it = todo.rbegin(); it != todo.rend(); ++it) {
    if (::mkdir(it->c_str(), 0755) != 0) {
      if (errno == EEXIST) continue;  // a racing writer made it
      if (errno == ENOTDIR) return {StatusCode::kInvalidArgument, "a component of '" + *it + "' is a file"};
      return errno_status("create folder", *it, errno);
    }
    if (auto st = fsync_dir(dir_of(*it)); !st) return st;
  }
  (void)root;
  return Status::ok();
}

Status write_all(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno_status("write", path, errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::ok();
}

// Streams in -> out: copy_file_range (in-kernel, no user buffer) where the kernel allows it,
// otherwise a 1 MiB buffer. Never holds the object in memory.
Status copy_fd(int in, int out, const std::string& in_path, const std::string& out_path) {
  bool kernel_copy = true;
  for (;;) {
    if (kernel_copy) {
      ssize_t n = ::copy_file_range(in, nullptr, out, nullptr, 64 << 20, 0);
      if (n > 0) continue;
      if (n == 0) return Status::ok();
      if (errno == EINTR) continue;
      if (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP || errno == EBADF) {
        kernel_copy = false;  // nothing was copied by the failed call; fall back
        continue;
      }
      // Which side failed is ambiguous; name both.
      return errno_status("copy", in_path + "' -> '" + out_path, errno);
    }
    std::vector<char> buf(1 << 20);
    for (;;) {
      ssize_t r = ::read(in, buf.data(), buf.size());
      if (r < 0) {
        if (errno == EINTR) continue;
        return errno_status("read", in_path, errno);
      }
      if (r == 0) return Status::ok();
      if (auto st = write_all(out, buf.data(), static_cast<size_t>(r), out_path); !st) return st;
    }
  }
}

std::string temp_name_in(const std::string& dir) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  char buf[96];
  std::snprintf(buf, sizeof buf, "%d-%llu-%08llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(counter.fetch_add(1)),
                static_cast<unsigned long long>(salt & 0xffffffffu));
  return dir + "/" + std::string(kTempPrefix) + buf;
}

// Publishes the complete, fsynced temp file under `final`. create_only: atomic across
// processes; exactly one racing creator gets OK.
Status publish(const std::string& tmp, const std::string& final, bool create_only, const std::string& key) {
  if (!create_only) {
    if (::rename(tmp.c_str(), final.c_str()) == 0) return Status::ok();
    int err = errno;
    if (err == EISDIR || err == ENOTDIR) return conflict_status(key, final);
    return errno_status("rename into", final, err);
  }
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final.c_str(), RENAME_NOREPLACE) == 0) return Status::ok();
  int err = errno;
  if (err == EINVAL || err == ENOSYS || err == EOPNOTSUPP) {
    // No RENAME_NOREPLACE on this filesystem: link(2) also fails with EEXIST atomically.
    if (::link(tmp.c_str(), final.c_str()) == 0) {
      ::unlink(tmp.c_str());
      return Status::ok();
    }
    err = errno;
  }
  if (err == EEXIST) return {StatusCode::kPreconditionFailed, "key '" + key + "' already exists (create-only put)"};
  if (err == ENOTDIR) return conflict_status(key, final);
  return errno_status("create", final, err);
}

// The steps of atomic_write (below).
Status write_to(const std::string& final, const std::string& root, bool create_only, const std::string& key,
                const std::function<Status(int fd, const std::string& tmp)>& fill) {
  const std::string dir = dir_of(final);
  std::string tmp;
  int fd = -1;
  constexpr int kDirAttempts = 32;
  // A concurrent remove() may prune a folder between our mkdir of it and the mkdir or open
  // below it (ENOENT): make the folders again.
  for (int attempt = 0; attempt < kDirAttempts && fd < 0; ++attempt) {
    if (!root.empty())
      if (auto st = make_dirs(root, dir); !st) {
        if (st.code() == StatusCode::kInvalidArgument) return conflict_status(key, final);
        if (st.code() == StatusCode::kNotFound && attempt + 1 < kDirAttempts) continue;
        return st;
      }
    tmp = temp_name_in(dir);
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && !(errno == ENOENT && !root.empty())) {
      if (errno == ENOTDIR) return conflict_status(key, final);
      return errno_status("create temporary file", tmp, errno);
    }
  }
  if (fd < 0) return errno_status("create temporary file", tmp, ENOENT);
  Fd guard(fd);
  auto fail = [&](Status st) {
    ::close(guard.release());
    ::unlink(tmp.c_str());
    return st;
  };
  if (auto st = fill(fd, tmp); !st) return fail(st);
  // The nanosecond clock, not the kernel's coarse file time: consecutive rewrites of a key
  // get distinct mtimes and so distinct etags.
  struct timespec now[2];
  ::clock_gettime(CLOCK_REALTIME, &now[0]);
  now[1] = now[0];
  ::futimens(fd, now);
  if (::fsync(fd) != 0) return fail(errno_status("fsync", tmp, errno));
  if (::close(guard.release()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return errno_status("close", tmp, err);
  }
  if (auto st = publish(tmp, final, create_only, key); !st) {
    ::unlink(tmp.c_str());
    return st;
  }
  return fsync_dir(dir);
}

// The one write path: temp file next to `final` (folders made under `root` when given),
// filled by `fill`, mtime stamped, fsynced, published, folder fsynced. On failure the temp
// file is removed and nothing appears under `final`; an I/O failure names `final` first (the
// step that failed may name the temporary file or a folder).
Status atomic_write(const std::string& final, const std::string& root, bool create_only, const std::string& key,
                    const std::function<Status(int fd, const std::string& tmp)>& fill) {
  Status st = write_to(final, root, create_only, key, fill);
  if (st.code() == StatusCode::kIOError || st.code() == StatusCode::kAccessDenied)
    return {st.code(), "cannot write '" + final + "': " + st.message()};
  return st;
}

std::string etag_of(const struct stat& st) {
  char buf[80];
  long long ns = static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
  std::snprintf(buf, sizeof buf, "%llx-%llx-%llx", static_cast<unsigned long long>(st.st_ino),
                static_cast<unsigned long long>(st.st_size), static_cast<unsigned long long>(ns));
  return buf;
}

ObjectInfo info_of(const std::string& key, const struct stat& st) {
  ObjectInfo o;
  o.key = key;
  o.size = static_cast<uint64_t>(st.st_size);
  o.etag = etag_of(st);
  o.mtime_ms = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
  return o;
}

bool is_temp_name(const char* name) { return std::strncmp(name, kTempPrefix.data(), kTempPrefix.size()) == 0; }

// ---- listing --------------------------------------------------------------------------

// Walks folders in key order: entries sorted by name, with "/" appended to folder names, give
// exactly the lexicographic order of the keys beneath (all of "d/..." sorts where "d/" does).
// So a page stops after max_keys+1 keys and skips folders wholly at or below the lower bound.
struct Lister {
  std::string lower;  // keys must be > lower
  size_t max_keys = 0;
  std::vector<ObjectInfo> out;
  bool more = false;
  Status error;

  // Returns false to stop.
  bool walk(const std::string& dir, const std::string& key_base, const std::string& name_filter) {
    DIR* d = ::opendir(dir.c_str());
    if (!d) {
      if (errno != ENOENT && errno != ENOTDIR) error = errno_status("list folder", dir, errno);
      return error.is_ok();
    }
    std::vector<std::pair<std::string, bool>> entries;  // (sort name, is folder)
    while (struct dirent* e = ::readdir(d)) {
      const char* n = e->d_name;
      if (!std::strcmp(n, ".") || !std::strcmp(n, "..") || is_temp_name(n)) continue;
      if (std::strncmp(n, name_filter.c_str(), name_filter.size()) != 0) continue;
      unsigned char type = e->d_type;
      if (type == DT_UNKNOWN) {
        struct stat st;
        if (::fstatat(::dirfd(d), n, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_UNKNOWN;
      }
      if (type == DT_DIR) entries.emplace_back(std::string(n) + "/", true);
      else if (type == DT_REG) entries.emplace_back(n, false);  // symlinks etc. are not objects
    }
    ::closedir(d);
    std::sort(entries.begin(), entries.end());
    for (auto& [name, is_dir] : entries) {
      std::string key = key_base + name;
      if (is_dir) {
        // Every key below sorts inside ["key", "key\xff..."]; skip when all are <= lower.
        if (lower > key && lower.compare(0, key.size(), key) != 0) continue;
        if (!walk(dir + "/" + name.substr(0, name.size() - 1), key, "")) return false;
        continue;
      }
      if (key <= lower) continue;
      if (out.size() == max_keys) {
        more = true;
        return false;
      }
      struct stat st;
      std::string path = dir + "/" + name;
      if (::stat(path.c_str(), &st) != 0) {
        if (errno == ENOENT) continue;  // removed while we listed
        error = errno_status("stat", path, errno);
        return false;
      }
      out.push_back(info_of(key, st));
    }
    return true;
  }
};

}  // namespace

// ---- the store ----------------------------------------------------------------------

LocalStore::LocalStore(std::string root) : root_(std::move(root)) {}

Status LocalStore::put(const std::string& key, const std::string& data, const PutOptions& opt) {
  if (auto st = validate_key(key); !st) return st;
  return atomic_write(path_of(key), root_, opt.create_only, key,
                      [&](int fd, const std::string& tmp) { return write_all(fd, data.data(), data.size(), tmp); });
}

Status LocalStore::put_file(const std::string& key, const std::string& path, const PutOptions& opt) {
  if (auto st = validate_key(key); !st) return st;
  Fd in(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (in.fd < 0) return errno_status("open source file", path, errno);
  return atomic_write(path_of(key), root_, opt.create_only, key,
                      [&](int fd, const std::string& tmp) { return copy_fd(in.fd, fd, path, tmp); });
}

Result<std::string> LocalStore::get(const std::string& key, const GetOptions& opt) {
  if (auto st = validate_key(key); !st) return st;
  const std::string path = path_of(key);
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0) {
    if (errno == ENOTDIR) return Status(StatusCode::kNotFound, "no object '" + key + "' in " + root_);
    return errno_status("open", path, errno);
  }
  struct stat st;
  if (::fstat(fd.fd, &st) != 0) return errno_status("stat", path, errno);
  if (!S_ISREG(st.st_mode)) return Status(StatusCode::kNotFound, "no object '" + key + "' in " + root_ + " (a folder)");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  // As S3 (416 InvalidRange): a range must start inside a non-empty object.
  if (opt.offset > 0 && opt.offset >= size)
    return Status(StatusCode::kInvalidArgument, "range offset " + std::to_string(opt.offset) + " is past the end of '" +
                                                    key + "' (" + std::to_string(size) + " bytes)");
  uint64_t n = size - opt.offset;
  if (opt.length) n = std::min(n, *opt.length);
  std::string data(n, '\0');
  uint64_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd.fd, data.data() + done, n - done, static_cast<off_t>(opt.offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno_status("read", path, errno);
    }
    if (r == 0) break;  // the file cannot shrink (objects are replaced by rename), but be safe
    done += static_cast<uint64_t>(r);
  }
  data.resize(done);
  return data;
}

Status LocalStore::get_file(const std::string& key, const std::string& path) {
  if (auto st = validate_key(key); !st) return st;
  const std::string src = path_of(key);
  Fd in(::open(src.c_str(), O_RDONLY | O_CLOEXEC));
  if (in.fd < 0) {
    if (errno == ENOTDIR) return {StatusCode::kNotFound, "no object '" + key + "' in " + root_};
    return errno_status("open", src, errno);
  }
  struct stat st;
  if (::fstat(in.fd, &st) != 0) return errno_status("stat", src, errno);
  if (!S_ISREG(st.st_mode)) return {StatusCode::kNotFound, "no object '" + key + "' in " + root_ + " (a folder)"};
  return atomic_write(path, "", false, key,
                      [&](int fd, const std::string& tmp) { return copy_fd(in.fd, fd, src, tmp); });
}

Result<ObjectInfo> LocalStore::head(const std::string& key) {
  if (auto st = validate_key(key); !st) return st;
  const std::string path = path_of(key);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOTDIR || errno == ENOENT)
      return Status(StatusCode::kNotFound, "no object '" + key + "' in " + root_);
    return errno_status("stat", path, errno);
  }
  if (!S_ISREG(st.st_mode)) return Status(StatusCode::kNotFound, "no object '" + key + "' in " + root_ + " (a folder)");
  return info_of(key, st);
}

Result<ListPage> LocalStore::list(const ListOptions& opt) {
  if (auto st = validate_prefix(opt.prefix); !st) return st;
  if (opt.max_keys <= 0)
    return Status(StatusCode::kInvalidArgument, "max_keys must be positive, got " + std::to_string(opt.max_keys));
  Lister l;
  l.lower = std::max(opt.start_after, opt.continuation);
  l.max_keys = static_cast<size_t>(opt.max_keys);
  size_t slash = opt.prefix.rfind('/');
  std::string base = slash == std::string::npos ? "" : opt.prefix.substr(0, slash + 1);
  std::string filter = opt.prefix.substr(base.size());
  std::string dir = base.empty() ? root_ : root_ + "/" + base.substr(0, base.size() - 1);
  l.walk(dir, base, filter);
  if (!l.error) return l.error;
  ListPage page;
  page.objects = std::move(l.out);
  if (l.more && !page.objects.empty()) page.next = page.objects.back().key;
  return page;
}

Status LocalStore::remove(const std::string& key) {
  if (auto st = validate_key(key); !st) return st;
  const std::string path = path_of(key);
  if (::unlink(path.c_str()) != 0) {
    // Missing, or the name is a folder / passes through a file: there is no such object.
    if (errno == ENOENT || errno == ENOTDIR || errno == EISDIR) return Status::ok();
    return errno_status("remove", path, errno);
  }
  std::string dir = dir_of(path);
  if (auto st = fsync_dir(dir); !st) return st;
  // Best effort: drop folders the removal left empty (rmdir fails on non-empty ones).
  while (dir.size() > root_.size() && dir.compare(0, root_.size(), root_) == 0) {
    if (::rmdir(dir.c_str()) != 0) break;
    dir = dir_of(dir);
  }
  return Status::ok();
}

Result<int> LocalStore::cleanup_stale_temp(std::chrono::seconds max_age) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(root_, ec)) return 0;
  int removed = 0;
  const auto cutoff = fs::file_time_type::clock::now() - max_age;
  fs::recursive_directory_iterator it(root_, fs::directory_options::skip_permission_denied, ec), end;
  if (ec) return errno_status("list folder", root_, ec.value());
  for (; it != end; it.increment(ec)) {
    if (ec) return errno_status("list folder", root_, ec.value());
    if (!it->is_regular_file(ec) || !is_temp_name(it->path().filename().c_str())) continue;
    auto t = it->last_write_time(ec);
    if (ec || t > cutoff) continue;
    if (fs::remove(it->path(), ec)) ++removed;
  }
  return removed;
}

Status copy_file_atomic(const std::string& src, const std::string& dst) {
  Fd in(::open(src.c_str(), O_RDONLY | O_CLOEXEC));
  if (in.fd < 0) return errno_status("open source file", src, errno);
  return atomic_write(dst, "", false, dst,
                      [&](int fd, const std::string& tmp) { return copy_fd(in.fd, fd, src, tmp); });
}

}  // namespace brl::store
