// Fuzzes the update object parser (protocol/update.h) and, as the proxy does, the codec
// decoder on the payload it returns. parse_update must return kCorrupt or a header whose
// payload lies inside the input; what it accepts must re-encode to an object that parses
// to the same header.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "codec/codec.h"
#include "protocol/update.h"

using namespace brl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // libFuzzer passes an exact-size heap copy: ASan sees a read one byte past the input.
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto r = protocol::parse_update(bytes, "fuzz");
  if (!r.is_ok()) {
    if (r.status().code() != StatusCode::kCorrupt) __builtin_trap();
    return 0;
  }
  const protocol::ParsedUpdate& p = r.value();
  if (p.payload.data() < bytes.data() || p.payload.data() + p.payload.size() != bytes.data() + bytes.size())
    __builtin_trap();
  (void)codec::decode(p.payload, 1 << 24);

  const std::string again = protocol::encode_update(p.header, p.payload);
  auto q = protocol::parse_update(again, "fuzz round trip");
  if (!q.is_ok() || q.value().header.to_json() != p.header.to_json() || q.value().payload != p.payload)
    __builtin_trap();
  return 0;
}
