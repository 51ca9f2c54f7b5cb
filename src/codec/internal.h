// What the codec's files share (codec.cpp: kinds and the body; frame.cpp: the framing;
// quantize.cpp: absmax blocks and top-k runs; bf16.cpp; error_feedback.cpp). Not an API.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "codec/codec.h"
#include "util/status.h"

namespace brl::codec::detail {

inline constexpr char kMagic[4] = {'B', 'R', 'L', 'C'};
inline constexpr uint8_t kFrameVersion = 1;
inline constexpr size_t kPrefixSize = 24;  // magic, version, compression, 2 reserved, u64 length, 8 checksum
inline constexpr size_t kChecksumSize = 8;
inline constexpr const char* kFormat = "1";  // body layout version, in __metadata__["format"]
// topk kinds: a bitmask of the sent elements (format 1 held I16 indices per run, 16 bits a sent
// element where the mask costs ~3-7 after zstd at densities 1/4-1/16, measured 2026-12-05), in
// three arrays shared by all tensors (format 2 had three per tensor, and their safetensors
// header entries were most of a small adapter's payload).
inline constexpr const char* kSparseFormat = "3";
inline constexpr const char *kSparseCodes = "codes", *kSparseMask = "mask", *kSparseRange = "range";
inline constexpr int kMinBlock = 8, kMaxBlock = 4096, kMaxLevel = 19;
inline constexpr int kMinChunk = 16, kMaxChunk = 32768;
inline constexpr const char* kValidKinds = "fp32, bf16, int8, int4, topk_int2, topk_int4";

inline bool quantized(Kind k) { return k == Kind::int8 || k == Kind::int4; }
inline int qmax(Kind k) { return k == Kind::int8 ? 127 : 7; }
inline int code_bits(Kind k) { return k == Kind::topk_int2 ? 2 : 4; }
inline int levels(Kind k) { return 1 << (code_bits(k) - 1); }  // magnitude levels; the top code bit is the sign
// The extra body tensors of each tensor, per kind (their names must not collide).
std::vector<std::string> suffixes(Kind k);

// Decode failures: a status code and a message, turned into a Status at the API boundary.
struct DecodeError : std::runtime_error {
  StatusCode code;
  DecodeError(StatusCode c, const std::string& m) : std::runtime_error(m), code(c) {}
};
[[noreturn]] void corrupt(const std::string& what);
[[noreturn]] void too_big(const std::string& what, uint64_t n, uint64_t limit);

// a * b, or false on overflow.
inline bool mul_ok(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > UINT64_MAX / a) return false;
  *out = a * b;
  return true;
}
inline uint64_t num_blocks(uint64_t n, int block) { return n / block + (n % block != 0); }

// ---- quantize.cpp ----
// The largest scale whose products with every code stay finite.
float max_scale(int qm);
// Symmetric absmax blocks; false (codes unusable) if x holds a non-finite value.
bool quantize(const float* x, uint64_t n, int block, int qm, int8_t* codes, float* scales);
void dequantize(const int8_t* codes, uint64_t n, int block, const float* scales, float* out);
// Elements a run of len sends: ceil(density * len), at least 1, at most len.
uint64_t topk_count(uint64_t len, double density);
struct Sparse {
  std::string mask;            // bit i % 8 of byte i / 8 (from the low bit): element i is sent
  std::vector<float> range;    // per run: lo, hi
  std::vector<uint8_t> codes;  // per sent element, in element order, unpacked
};
// Chunked top-k of x (finite) with the codes of the sent elements.
Sparse sparsify(const float* x, uint64_t n, Kind kind, int chunk, double density);
inline uint64_t packed_bytes(uint64_t codes, int bits) { return (codes * bits + 7) / 8; }
std::string pack_codes(const std::vector<uint8_t>& codes, int bits);

// ---- frame.cpp ----
// Checks the prefix and returns the body: a view into `bytes` when stored, else into `storage`.
std::string_view unframe_view(std::string_view bytes, uint64_t max_body, std::string& storage);

// Index of the first element for which bad() holds, or n. The all-good case, the common
// one, runs as a branch-free reduction the compiler vectorizes; the scan for the index only
// runs on failure.
template <class T, class Bad>
uint64_t first_bad(const T* p, uint64_t n, Bad bad) {
  unsigned any = 0;
  for (uint64_t i = 0; i < n; ++i) any |= bad(p[i]);
  if (!any) return n;
  for (uint64_t i = 0; i < n; ++i)
    if (bad(p[i])) return i;
  return n;
}
inline unsigned non_finite(float x) { return (std::bit_cast<uint32_t>(x) & 0x7f800000u) == 0x7f800000u; }

// memcpy that accepts the null data() of empty vectors (memcpy itself may not).
inline void copy_bytes(void* dst, const void* src, size_t n) {
  if (n) std::memcpy(dst, src, n);
}

inline std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ',';
    r += std::to_string(s[i]);
  }
  return r + "]";
}

}  // namespace brl::codec::detail
