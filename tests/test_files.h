// Temp folders, whole-file reads and writes, and the message of an expected UserError, for
// the tests of any area (torch-free, so the sanitizer build's tests can use them too).
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>

#include "util/error.h"

namespace brl::test {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    char tmpl[] = "/tmp/brl_test_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() {  // BRL_KEEP_TMP=1 keeps it for a look after a failure
    if (!std::getenv("BRL_KEEP_TMP")) std::filesystem::remove_all(path);
    else std::fprintf(stderr, "kept %s\n", path.c_str());
  }
  std::string str(const std::string& sub = "") const { return (path / sub).string(); }
};

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// What f throws as a UserError; "" when it throws nothing.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace brl::test
