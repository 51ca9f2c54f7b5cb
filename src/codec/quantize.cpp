// Blockwise absmax quantization (int8, int4) and chunked top-k runs (topk_int2, topk_int4).
#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>

#include "codec/internal.h"
#include "util/error.h"

namespace brl::codec {

namespace detail {

namespace {
// Round to nearest, ties to even, for |v| <= 2^22: adding 1.5 * 2^23 moves v to where the
// float spacing is 1. Unlike nearbyint this vectorizes without SSE4.1.
inline float round_ne(float v) {
  constexpr float kMagic = 12582912.0f;
  return (v + kMagic) - kMagic;
}
}  // namespace

// The largest scale whose products with every code stay finite (FLT_MAX / q itself may
// round up). Encoders clamp to it; decoders reject anything above it.
float max_scale(int qm) {
  float s = FLT_MAX / static_cast<float>(qm);
  while (!std::isfinite(s * static_cast<float>(qm))) s = std::nextafter(s, 0.0f);
  return s;
}

// Symmetric absmax: per block scale = absmax / qmax, code = round(x / scale) in
// [-qmax, qmax]; a zero block (or one whose scale underflows to 0) gets all-zero codes.
// Returns false (codes unusable) if x holds a non-finite value.
bool quantize(const float* x, uint64_t n, int block, int qm, int8_t* codes, float* scales) {
  const uint64_t nb = num_blocks(n, block);
  const float fq = static_cast<float>(qm), smax = max_scale(qm);
  for (uint64_t b = 0; b < nb; ++b) {
    const uint64_t lo = b * block, hi = std::min<uint64_t>(n, lo + block);
    // Absmax on the bits of |x|: non-negative floats order like their bit patterns, so an
    // integer max (which vectorizes, unlike a float max without -ffast-math) finds it, and
    // inf/nan show up as bits >= 0x7f800000.
    uint32_t mb = 0;
    for (uint64_t i = lo; i < hi; ++i) mb = std::max(mb, std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu);
    if (mb >= 0x7f800000u) return false;
    const float s = std::min(std::bit_cast<float>(mb) / fq, smax);
    scales[b] = s;
    if (s == 0) {
      std::fill(codes + lo, codes + hi, int8_t{0});
      continue;
    }
    for (uint64_t i = lo; i < hi; ++i) codes[i] = static_cast<int8_t>(std::clamp(round_ne(x[i] / s), -fq, fq));
  }
  return true;
}

void dequantize(const int8_t* codes, uint64_t n, int block, const float* scales, float* out) {
  const uint64_t nb = num_blocks(n, block);
  for (uint64_t b = 0; b < nb; ++b) {
    const uint64_t lo = b * block, hi = std::min<uint64_t>(n, lo + block);
    const float s = scales[b];
    for (uint64_t i = lo; i < hi; ++i) out[i] = static_cast<float>(codes[i]) * s;
  }
}

// ---- topk kinds ---------------------------------------------------------------------

uint64_t topk_count(uint64_t len, double density) {
  const double k = std::ceil(density * static_cast<double>(len));
  return std::clamp<uint64_t>(static_cast<uint64_t>(k), 1, len);
}

Sparse sparsify(const float* x, uint64_t n, Kind kind, int chunk, double density) {
  Sparse sp;
  sp.mask.assign(packed_bytes(n, 1), '\0');
  const int L = levels(kind);
  std::vector<uint32_t> order;
  for (uint64_t lo_i = 0; lo_i < n; lo_i += chunk) {
    const uint64_t len = std::min<uint64_t>(chunk, n - lo_i), k = topk_count(len, density);
    const float* r = x + lo_i;
    order.resize(len);
    for (uint32_t i = 0; i < len; ++i) order[i] = i;
    // A total order (magnitude down, then index up), so the choice never depends on the library.
    auto before = [r](uint32_t a, uint32_t b) {
      const float ma = std::abs(r[a]), mb = std::abs(r[b]);
      return ma > mb || (ma == mb && a < b);
    };
    if (k < len)
      std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k - 1), order.end(), before);
    order.resize(k);
    // Zeros are not sent (they decode as 0 anyway; sent, one would come back as a level's centre).
    order.erase(std::remove_if(order.begin(), order.end(), [r](uint32_t i) { return r[i] == 0; }), order.end());
    std::sort(order.begin(), order.end());
    float lo = order.empty() ? 0.0f : std::abs(r[order[0]]), hi = lo;
    for (uint32_t i : order) lo = std::min(lo, std::abs(r[i])), hi = std::max(hi, std::abs(r[i]));
    const double w = (static_cast<double>(hi) - lo) / L;
    sp.range.push_back(lo);
    sp.range.push_back(hi);
    for (uint32_t i : order) {
      const int j = w > 0 ? static_cast<int>(std::min<double>(L - 1, std::floor((std::abs(r[i]) - lo) / w))) : 0;
      sp.mask[(lo_i + i) / 8] =
          static_cast<char>(static_cast<uint8_t>(sp.mask[(lo_i + i) / 8]) | (1u << (lo_i + i) % 8));
      sp.codes.push_back(static_cast<uint8_t>((std::signbit(r[i]) ? L : 0) + j));
    }
  }
  return sp;
}

std::string pack_codes(const std::vector<uint8_t>& codes, int bits) {
  std::string out(packed_bytes(codes.size(), bits), '\0');
  for (size_t i = 0; i < codes.size(); ++i)
    out[i * bits / 8] = static_cast<char>(static_cast<uint8_t>(out[i * bits / 8]) | (codes[i] << (i * bits % 8)));
  return out;
}

}  // namespace detail

using namespace detail;

double error_bound(Kind k, double absmax) {
  switch (k) {
    case Kind::fp32: return 0;
    case Kind::bf16: return absmax * kBf16RelativeError;
    case Kind::int8:
    case Kind::int4: return absmax / qmax(k) / 2;
    case Kind::topk_int2:
    case Kind::topk_int4: return absmax / levels(k) / 2;
  }
  BRL_ASSERT(false, "bad codec kind");
}

}  // namespace brl::codec
