#include "util/file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "util/error.h"
#include "util/log.h"

namespace brl {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UserError("cannot read '" + path + "'", "check that the file exists and is readable");
  return {std::istreambuf_iterator<char>(f), {}};
}

void write_file(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f)
    throw UserError("cannot write " + path + ": " + std::strerror(errno),
                    "check the folder exists, its permissions and free space");
  const bool wrote = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  int err = wrote ? 0 : errno;
  if (std::fclose(f) != 0 && err == 0) err = errno ? errno : EIO;
  if (!wrote && err == 0) err = EIO;
  if (err == 0 && std::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    std::remove(tmp.c_str());
    throw UserError("cannot write " + path + ": " + std::strerror(err), "check free space and permissions");
  }
}

FileLock::FileLock(const std::string& path, void (*waiting)(const std::string& path)) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw UserError("cannot open the lock file " + path + ": " + std::strerror(errno),
                    "check the folder exists and is writable");
  int rc = ::flock(fd_, LOCK_EX | LOCK_NB);
  if (rc != 0 && errno == EWOULDBLOCK) {
    if (waiting) waiting(path);
    while ((rc = ::flock(fd_, LOCK_EX)) != 0 && errno == EINTR) {
    }
  }
  if (rc != 0 && (errno == ENOLCK || errno == EOPNOTSUPP || errno == ENOSYS)) {
    // A file system without locks (some network mounts): go on unlocked, as before locks were
    // taken; concurrent users then each do the work the lock would have shared.
    LOG_WARN("{} cannot be locked ({}): going on without the lock", path, std::strerror(errno));
    return;
  }
  if (rc != 0) {
    const int err = errno;
    ::close(fd_);
    throw UserError("cannot lock " + path + ": " + std::strerror(err), "check the file system and its permissions");
  }
}

FileLock::~FileLock() { ::close(fd_); }  // closing the last descriptor releases the lock

}  // namespace brl
