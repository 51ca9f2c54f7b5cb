#include "util/file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "util/error.h"

namespace brl {

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

}  // namespace brl
