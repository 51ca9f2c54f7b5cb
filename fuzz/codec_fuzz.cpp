// Fuzzes the update payload decoder (codec/codec.h). The first input byte picks the mode:
//   bit 1 clear, even: the rest is a whole payload (frame prefix, zstd, checksum, body);
//   bit 1 clear, odd:  the rest is a body, framed here with a valid checksum so the fuzzer
//         gets past it to the safetensors body, the metadata and the per-codec decoding;
//   bit 1 set: the rest is floats (non-finite ones zeroed), encoded by a topk codec with a
//         run length and density from the next bytes, and decoded: the round trip.
// decode must return kCorrupt / kInvalidArgument, or tensors that are well-formed and finite
// and that fp32 re-encodes and decodes bit for bit. The round trip must decode, send at most
// k = ceil(density * run length) elements per run, none smaller than the run's k-th largest
// magnitude nor zero, none dropped larger than it, signs kept, each within the level bound.
#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "codec/codec.h"

using namespace brl;

namespace {
constexpr uint64_t kMaxDecoded = 1 << 24;  // keeps hostile sizes cheap; the limit path is tested too

void check(const Result<std::vector<codec::Tensor>>& r) {
  if (!r.is_ok()) {
    const StatusCode c = r.status().code();
    if (c != StatusCode::kCorrupt && c != StatusCode::kInvalidArgument) __builtin_trap();
    return;
  }
}
}  // namespace

// Encodes floats with a topk codec and checks what comes back.
void topk_round_trip(const uint8_t* data, size_t size) {
  if (size < 4) return;
  const codec::Kind kind = (data[0] & 4) ? codec::Kind::topk_int4 : codec::Kind::topk_int2;
  codec::Options o{kind, 64, data[0] & 8 ? 3 : 0};
  o.topk_chunk = 16 + (data[1] | (data[2] << 8)) % 1000;
  o.topk_density = (1 + data[3]) / 256.0;
  std::vector<float> x((size - 4) / 4);
  if (!x.empty()) std::memcpy(x.data(), data + 4, 4 * x.size());
  for (float& v : x)
    if (!std::isfinite(v)) v = 0;
  const std::vector<codec::Tensor> ts{{"w", {static_cast<int64_t>(x.size())}, x}};
  auto r = codec::decode(codec::encode(ts, o));
  if (!r.is_ok() || r.value().size() != 1) __builtin_trap();
  const std::vector<float>& y = r.value()[0].data;
  if (y.size() != x.size()) __builtin_trap();
  const double L = kind == codec::Kind::topk_int4 ? 8 : 2;
  for (size_t lo = 0; lo < x.size(); lo += o.topk_chunk) {
    const size_t len = std::min<size_t>(o.topk_chunk, x.size() - lo);
    const size_t k = std::min(len, std::max<size_t>(1, static_cast<size_t>(std::ceil(o.topk_density * len))));
    // The run's k-th largest magnitude: every sent one is at least it, every dropped one at most it.
    std::vector<float> mags;
    for (size_t i = lo; i < lo + len; ++i) mags.push_back(std::fabs(x[i]));
    std::nth_element(mags.begin(), mags.begin() + static_cast<std::ptrdiff_t>(k - 1), mags.end(),
                     std::greater<float>());
    const double kth = mags[k - 1];
    double hi = 0;
    for (float m : mags) hi = std::max(hi, static_cast<double>(m));
    size_t sent = 0;
    for (size_t i = lo; i < lo + len; ++i) {
      if (y[i] == 0) {  // dropped: none larger than the k-th
        if (std::fabs(x[i]) > kth) __builtin_trap();
        continue;
      }
      ++sent;
      if (std::fabs(x[i]) < kth || x[i] == 0) __builtin_trap();  // a smaller one (or a zero) was sent
      if (std::signbit(x[i]) != std::signbit(y[i])) __builtin_trap();
      // Slack: float rounding, relative to hi, and half the subnormal spacing (2^-150) absolute.
      if (std::fabs(static_cast<double>(x[i]) - y[i]) > (hi - kth) / (2 * L) + 4 * 0x1p-24 * hi + 0x1p-149)
        __builtin_trap();
    }
    if (sent > k) __builtin_trap();
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  if (data[0] & 2) {
    topk_round_trip(data, size);
    return 0;
  }
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto r = (data[0] & 1) ? codec::decode(codec::frame(rest, 0), kMaxDecoded) : codec::decode(rest, kMaxDecoded);
  check(r);
  if (!r.is_ok()) return 0;
  const auto& ts = r.value();
  for (const auto& t : ts) {
    uint64_t n = 1;
    for (auto d : t.shape) {
      if (d < 0) __builtin_trap();
      n *= static_cast<uint64_t>(d);
    }
    if (n != t.data.size()) __builtin_trap();
    for (float v : t.data)
      if (!std::isfinite(v)) __builtin_trap();
    if (t.name.empty()) return 0;  // decodable, but not something encode accepts
  }
  const std::string again = codec::encode(ts, {codec::Kind::fp32, 64, 0});
  auto back = codec::decode(again);
  if (!back.is_ok() || back.value().size() != ts.size()) __builtin_trap();
  for (size_t i = 0; i < ts.size(); ++i) {
    const auto &a = ts[i], &b = back.value()[i];
    if (a.name != b.name || a.shape != b.shape || a.data.size() != b.data.size() ||
        (!a.data.empty() && std::memcmp(a.data.data(), b.data.data(), 4 * a.data.size()) != 0))
      __builtin_trap();
  }
  return 0;
}
