// Files: a whole file written so that a failure is seen, and an exclusive lock between processes.
//
// write_file: a whole file written so that a failure is seen: the data goes to PATH.tmp, which is closed
// (where a full disk or a quota usually shows: the last buffered bytes are written then) and
// checked before it is renamed over PATH. Readers see the old file or the new one, never a
// torn one. Throws UserError naming the path and the system's reason.
#pragma once

#include <string>
#include <string_view>

namespace brl {

void write_file(const std::string& path, std::string_view bytes);
// A whole file's bytes; UserError naming the path if it cannot be read.
std::string read_file(const std::string& path);

// An exclusive advisory lock (flock) on PATH, created if absent, held until destruction. The
// kernel drops it when its process dies, so a killed holder blocks no one. Blocks while another
// holds it; `waiting` (when set) is called once first in that case, e.g. to say so in the log.
// Each FileLock opens PATH anew, so two in one process exclude each other as well. On a file
// system without locks it warns and holds none.
class FileLock {
 public:
  explicit FileLock(const std::string& path, void (*waiting)(const std::string& path) = nullptr);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace brl
