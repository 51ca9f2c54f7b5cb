// A real "disk full" for tests, which CI runs as root: a small tmpfs in this process's own
// mount namespace (the host never sees it; it goes when the process does) and a filler file
// that takes all of its space, or all but a few pages. Torch-free.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace brl::test {

// Why the tests of this header cannot run here ("" when they can).
inline std::string why_no_root() {
  return ::geteuid() == 0 ? "" : "needs root to mount a tmpfs (CI runs the tests as root)";
}

// A tmpfs of `bytes` at dir (which must exist), in a private mount namespace that this process
// enters on first use. unshare moves only the calling thread: make it before starting threads
// (children forked later inherit it). Unmounted (lazily) on destruction.
class TmpfsMount {
 public:
  TmpfsMount(const std::string& dir, size_t bytes) : dir_(dir) {
    static const std::string ns_error = [] {
      if (::unshare(CLONE_NEWNS) != 0) return std::string("unshare(CLONE_NEWNS): ") + std::strerror(errno);
      if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
        return std::string("make / private: ") + std::strerror(errno);
      return std::string();
    }();
    error_ = ns_error;
    if (error_.empty() && ::mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
                                  ("size=" + std::to_string(bytes) + ",mode=755").c_str()) != 0)
      error_ = "mount tmpfs on " + dir + ": " + std::strerror(errno);
  }
  ~TmpfsMount() {
    if (error_.empty()) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  TmpfsMount(const TmpfsMount&) = delete;
  const std::string& error() const { return error_; }  // "" when mounted

 private:
  std::string dir_, error_;
};

// Writes `path` in pages until the filesystem is full (ENOSPC); returns the bytes written.
inline size_t fill_disk(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return 0;
  std::vector<char> page(4096, 'f');
  size_t n = 0;
  for (;;) {
    ssize_t w = ::write(fd, page.data(), page.size());
    if (w <= 0) break;
    n += static_cast<size_t>(w);
  }
  ::close(fd);
  return n;
}

// Shrinks the filler that fill_disk(path) wrote (`filled` bytes) so that exactly `free_pages`
// 4 KiB pages are free again (tmpfs charges whole pages per file). False if truncate failed.
inline bool leave_free_pages(const std::string& path, size_t filled, size_t free_pages) {
  size_t pages = (filled + 4095) / 4096;
  return ::truncate(path.c_str(), static_cast<off_t>((pages > free_pages ? pages - free_pages : 0) * 4096)) == 0;
}

}  // namespace brl::test
