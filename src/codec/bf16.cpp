// bfloat16 conversions: round to nearest even, finite stays finite.
#include <bit>
#include <cstring>

#include "codec/codec.h"

namespace brl::codec {

namespace {
// Round to nearest even; a finite value that rounds past the largest bf16 is clamped to it
// (still within 2^-8 relative), so bf16 payloads never hold infinities.
uint16_t bf16_bits(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  u += 0x7fffu + ((u >> 16) & 1u);
  uint16_t h = static_cast<uint16_t>(u >> 16);
  if ((h & 0x7f80u) == 0x7f80u) h = static_cast<uint16_t>((h & 0x8000u) | 0x7f7fu);
  return h;
}
float bf16_value(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }
}  // namespace

void to_bf16(const float* x, uint64_t n, void* out) {
  auto* o = static_cast<uint8_t*>(out);
  for (uint64_t i = 0; i < n; ++i) {
    const uint16_t h = bf16_bits(x[i]);
    std::memcpy(o + 2 * i, &h, 2);
  }
}

void from_bf16(const void* in, uint64_t n, float* out) {
  const auto* p = static_cast<const uint8_t*>(in);
  for (uint64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    out[i] = bf16_value(h);
  }
}

float round_bf16(float x) { return bf16_value(bf16_bits(x)); }

}  // namespace brl::codec
