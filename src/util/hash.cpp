#include "util/hash.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

#include "util/error.h"

namespace brl {

std::string to_hex(const unsigned char* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = d[p[i] >> 4];
    s[2 * i + 1] = d[p[i] & 15];
  }
  return s;
}

namespace {
struct MdCtx {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  MdCtx() { EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr); }
  ~MdCtx() { EVP_MD_CTX_free(ctx); }
  void update(const void* p, size_t n) { EVP_DigestUpdate(ctx, p, n); }
  std::string hex() {
    unsigned char out[32];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx, out, &len);
    return to_hex(out, len);
  }
};
}  // namespace

std::string sha256_hex(const void* data, size_t n) {
  MdCtx m;
  m.update(data, n);
  return m.hex();
}

std::string sha256_hex(std::string_view data) { return sha256_hex(data.data(), data.size()); }

std::string sha256_file_hex(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UserError("cannot read '" + path + "': " + std::strerror(errno));
  MdCtx m;
  std::vector<char> buf(1 << 20);
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (f.gcount() > 0) m.update(buf.data(), static_cast<size_t>(f.gcount()));
  }
  if (f.bad()) throw UserError("error reading '" + path + "'");
  return m.hex();
}

}  // namespace brl
