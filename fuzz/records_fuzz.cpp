// Fuzzes the JSON records of the bucket (protocol/records.h): run.json, manifests,
// heartbeats, evaluations. The first input byte picks the record. Parsers return a Result
// and must never throw; what they accept must survive to_json and a re-parse unchanged.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "protocol/records.h"

using namespace brl::protocol;

namespace {
template <class R>
void round_trip(std::string_view text) {
  auto r = R::parse(text, "fuzz");
  if (!r.is_ok()) {
    if (r.status().code() != brl::StatusCode::kCorrupt) __builtin_trap();
    return;
  }
  const nlohmann::json j = r.value().to_json();
  auto again = R::parse(j.dump(), "fuzz round trip");
  if (!again.is_ok() || again.value().to_json() != j) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0: round_trip<RunDescription>(text); break;
    case 1: round_trip<Manifest>(text); break;
    case 2: round_trip<Heartbeat>(text); break;
    case 3: round_trip<EvalRecord>(text); break;
  }
  return 0;
}
