// Fuzzes the update payload decoder (codec/codec.h). The first input byte picks the mode:
//   even: the rest is a whole payload (frame prefix, zstd, checksum, body);
//   odd:  the rest is a body, framed here with a valid checksum so the fuzzer gets past it
//         to the safetensors body, the metadata and the per-codec decoding.
// decode must return kCorrupt / kInvalidArgument, or tensors that are well-formed and finite
// and that fp32 re-encodes and decodes bit for bit.
#include <cmath>
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

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
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
