// Fuzzes the safetensors reader (util/safetensors.h) on arbitrary bytes: it must either
// throw UserError or return views that lie inside the buffer (every byte is read, so ASan
// catches a view past the end). What it accepts must survive a write and re-read unchanged.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "util/error.h"
#include "util/safetensors.h"

using namespace brl;

namespace {
// Reads every byte of every view (the compiler may not drop the loop: the sum is checked).
uint64_t touch(const st::SafetensorsFile& f) {
  uint64_t sum = 0;
  for (auto& n : f.names()) {
    const st::TensorView& v = f.get(n);
    for (size_t i = 0; i < v.nbytes; ++i) sum += v.data[i];
    if (static_cast<uint64_t>(v.numel()) * st::dtype_size(v.dtype) != v.nbytes) __builtin_trap();
  }
  return sum;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // libFuzzer passes an exact-size heap copy: ASan sees a read one byte past the input.
  st::SafetensorsFile f;
  try {
    f = st::SafetensorsFile::from_buffer(data, size, "fuzz");
  } catch (const UserError&) {
    return 0;
  }
  const uint64_t sum = touch(f);

  // Round trip through the writer (which refuses the empty name the JSON header allows).
  std::vector<st::TensorData> tensors;
  for (auto& n : f.names()) {
    if (n.empty()) return 0;
    const st::TensorView& v = f.get(n);
    tensors.push_back({v.name, v.dtype, v.shape, v.data, v.nbytes});
  }
  const std::string again = st::serialize_safetensors(tensors, f.metadata());
  const auto g = st::SafetensorsFile::from_buffer(again.data(), again.size(), "fuzz round trip");
  if (g.names() != f.names() || g.metadata() != f.metadata() || touch(g) != sum) __builtin_trap();
  for (auto& n : f.names()) {
    const st::TensorView &a = f.get(n), &b = g.get(n);
    if (a.dtype != b.dtype || a.shape != b.shape || a.nbytes != b.nbytes ||
        (a.nbytes && std::memcmp(a.data, b.data, a.nbytes) != 0))
      __builtin_trap();
  }
  return 0;
}
