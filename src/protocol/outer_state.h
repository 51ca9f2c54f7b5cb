// The proxy's outer optimizer state, global/v<N>/outer-<sha16>.safetensors (layout.h), named
// by version N's manifest (stats.outer_state): what a restarted proxy needs, beyond the
// version's payload, to continue exactly.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "codec/codec.h"
#include "util/status.h"

namespace brl::protocol {

struct OuterState {
  std::vector<codec::Tensor> momentum;  // same names/shapes as the adapter; empty = zeros
  int64_t steps = 0;                    // outer steps taken with momentum
  // The full-precision global adapter when versions are published in bf16 (empty when they
  // are F32): workers train from the rounded payload, the proxy keeps adding deltas to this
  // copy so rounding never accumulates, and a restarted proxy continues from it exactly.
  std::vector<codec::Tensor> master;
};

// Safetensors bytes (F32 tensors: momentum under the adapter's names, master under
// "master/" + name; metadata format/steps).
std::string encode_outer_state(const OuterState& s);
// kCorrupt naming `label` for anything that is not a state written by encode_outer_state.
Result<OuterState> decode_outer_state(std::string_view bytes, const std::string& label);

}  // namespace brl::protocol
