// One worker update object (updates/<worker>/<id>.upd): a JSON header followed by the codec
// payload (the adapter delta, see codec/codec.h). The header says who made it, from which
// global version, with how much work, and how the payload is encoded; payload_sha256 binds
// the two so a bit flip anywhere is caught before the payload is decoded.
//
//   "BRLUPD1\n" | u32 little-endian header length | header JSON | payload bytes
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "util/status.h"

namespace brl::protocol {

struct UpdateHeader {
  int format = 1;
  std::string worker, id;
  int64_t base_version = 0;     // the global version the worker's state descends from
  int64_t steps = 0;            // GRPO steps in this delta
  int64_t samples = 0;          // completions scored in this delta
  double reward_mean = 0, reward_std = 0, accuracy = 0;
  std::string codec;            // fp32 | bf16 | int8 | int4
  std::string payload_sha256;
  uint64_t payload_size = 0;
  int64_t created_ms = 0;
  double seconds = 0;           // wall time the steps took

  nlohmann::json to_json() const;
};

// Builds the object; fills payload_sha256/payload_size from the payload.
std::string encode_update(UpdateHeader h, std::string_view payload);

struct ParsedUpdate {
  UpdateHeader header;
  std::string_view payload;  // points into the caller's bytes
};

// Validates magic, sizes, the header's fields and the payload hash. kCorrupt with a message
// naming `label` and what is wrong; never reads past `bytes`.
Result<ParsedUpdate> parse_update(std::string_view bytes, const std::string& label);

// Update ids sort in creation order within one worker: 13-digit ms time (kept strictly
// increasing by the caller) + '-' + 8 random hex digits.
std::string make_update_id(int64_t ms, uint64_t random);
// The time part of an id made by make_update_id; nullopt for other ids.
std::optional<int64_t> update_id_time(const std::string& id);

}  // namespace brl::protocol
