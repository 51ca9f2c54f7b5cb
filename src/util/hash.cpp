#include "util/hash.h"

#include <openssl/evp.h>

#include <cctype>
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

std::optional<std::string> from_hex(std::string_view hex) {
  auto digit = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
  };
  if (hex.size() % 2) return std::nullopt;
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<char>(hi * 16 + lo);
  }
  return out;
}

std::string base64_encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  int k = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(k));
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4) return std::nullopt;
  size_t pad = 0;
  while (pad < 2 && pad < text.size() && text[text.size() - 1 - pad] == '=') ++pad;
  // EVP_DecodeBlock skips surrounding whitespace and accepts '=' inside; be strict instead.
  for (size_t i = 0; i + pad < text.size(); ++i) {
    char c = text[i];
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '/') return std::nullopt;
  }
  std::string out(3 * text.size() / 4, '\0');
  int k = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
  if (k < 0) return std::nullopt;
  out.resize(static_cast<size_t>(k) - pad);  // EVP_DecodeBlock counts the padding as zero bytes
  // Canonical only (RFC 4648 3.5): the last character's unused bits must be zero, or one
  // signature or key would have several spellings ("QQ==" and "QR==" both decode to "A").
  if (base64_encode(out) != text) return std::nullopt;
  return out;
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
