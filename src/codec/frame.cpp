// The frame around a payload body: prefix (magic, version, compression, length, checksum),
// then the body stored or zstd-compressed.
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "codec/internal.h"
#include "util/error.h"
#include "util/hash.h"

namespace brl::codec {

namespace detail {

namespace {

std::string checksum_hex(std::string_view body) { return sha256_hex(body).substr(0, 2 * kChecksumSize); }

uint64_t read_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

std::string zstd_decompress(std::string_view src, uint64_t expect) {
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> d(ZSTD_createDCtx(), ZSTD_freeDCtx);
  if (!d) throw std::bad_alloc();
  // Grow the output with what actually decompresses (a forged length on a few bytes of
  // input must not allocate gigabytes); one spare byte detects output beyond `expect`.
  const uint64_t limit = expect + 1;
  std::string out(std::min<uint64_t>(limit, std::max<uint64_t>(1 << 16, 4 * src.size())), '\0');
  ZSTD_inBuffer in{src.data(), src.size(), 0};
  ZSTD_outBuffer o{out.data(), out.size(), 0};
  for (;;) {
    const size_t r = ZSTD_decompressStream(d.get(), &o, &in);
    if (ZSTD_isError(r)) corrupt(std::string("zstd: ") + ZSTD_getErrorName(r));
    if (r == 0 && in.pos == in.size) break;  // last frame complete, input consumed
    if (o.pos == o.size) {
      if (out.size() >= limit)
        corrupt("body decompresses to more than the " + std::to_string(expect) + " bytes the prefix declares");
      out.resize(std::min<uint64_t>(limit, 2 * out.size()));
      o.dst = out.data();
      o.size = out.size();
    } else if (in.pos == in.size) {
      corrupt("zstd stream is truncated");
    }
  }
  if (o.pos != expect)
    corrupt("body decompresses to " + std::to_string(o.pos) + " bytes, the prefix declares " + std::to_string(expect));
  out.resize(o.pos);
  return out;
}

}  // namespace

std::string_view unframe_view(std::string_view bytes, uint64_t max_body, std::string& storage) {
  if (bytes.size() < kPrefixSize)
    corrupt(std::to_string(bytes.size()) + " bytes, shorter than the " + std::to_string(kPrefixSize) +
            "-byte prefix (truncated?)");
  const char* p = bytes.data();
  if (std::memcmp(p, kMagic, 4) != 0) corrupt("does not start with the magic \"BRLC\"");
  if (static_cast<uint8_t>(p[4]) != kFrameVersion)
    corrupt("frame version " + std::to_string(static_cast<uint8_t>(p[4])) + " is not supported (this build reads " +
            std::to_string(kFrameVersion) + ")");
  const uint8_t comp = static_cast<uint8_t>(p[5]);
  if (comp > 1) corrupt("compression flag " + std::to_string(comp) + " is neither 0 (stored) nor 1 (zstd)");
  if (p[6] != 0 || p[7] != 0) corrupt("reserved prefix bytes are not zero");
  const uint64_t len = read_u64(p + 8);
  if (len > max_body) too_big("the body", len, max_body);
  const std::string_view rest = bytes.substr(kPrefixSize);
  std::string_view body;
  if (comp == 0) {
    if (rest.size() != len)
      corrupt("stored body is " + std::to_string(rest.size()) + " bytes, the prefix declares " + std::to_string(len));
    body = rest;
  } else {
    storage = zstd_decompress(rest, len);
    body = storage;
  }
  if (checksum_hex(body) != to_hex(reinterpret_cast<const unsigned char*>(p + 16), kChecksumSize))
    corrupt("body checksum mismatch (corrupted in transit or storage)");
  return body;
}

}  // namespace detail

using namespace detail;

std::string frame(std::string_view body, int zstd_level) {
  if (zstd_level < 0 || zstd_level > kMaxLevel)
    throw UserError("codec zstd_level " + std::to_string(zstd_level) + " is outside [0, " + std::to_string(kMaxLevel) +
                    "]");
  std::string out(kPrefixSize, '\0');
  std::memcpy(out.data(), kMagic, 4);
  out[4] = static_cast<char>(kFrameVersion);
  const uint64_t n = body.size();
  for (int i = 0; i < 8; ++i) out[8 + i] = static_cast<char>((n >> (8 * i)) & 0xff);
  const std::string sum = sha256_hex(body);
  for (size_t i = 0; i < kChecksumSize; ++i)
    out[16 + i] = static_cast<char>(std::stoi(sum.substr(2 * i, 2), nullptr, 16));
  if (zstd_level > 0) {
    std::string z(ZSTD_compressBound(body.size()), '\0');
    const size_t r = ZSTD_compress(z.data(), z.size(), body.data(), body.size(), zstd_level);
    BRL_ASSERT(!ZSTD_isError(r), std::string("zstd: ") + ZSTD_getErrorName(r));
    if (r < body.size()) {  // incompressible bodies (e.g. random fp32) go out stored
      out[5] = 1;
      out.append(z.data(), r);
      return out;
    }
  }
  out.append(body);
  return out;
}

Result<std::string> unframe(std::string_view bytes, uint64_t max_body_bytes) {
  try {
    std::string storage;
    std::string_view body = unframe_view(bytes, max_body_bytes, storage);
    if (storage.empty()) return std::string(body);
    return storage;
  } catch (const DecodeError& e) {
    return Status(e.code, e.what());
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kInternal, "update payload: out of memory unframing the body");
  }
}

}  // namespace brl::codec
