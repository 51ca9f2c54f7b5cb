// One worker update object (updates/<worker>/<id>.upd): a JSON header followed by the codec
// payload (the adapter delta, see codec/codec.h). The header says who made it, from which
// global version, with how much work, and how the payload is encoded; payload_sha256 binds
// the two so a bit flip anywhere is caught before the payload is decoded.
//
// Signed updates: `signer` names the worker's Ed25519 public key and `signature` signs
// update_signing_bytes(header), i.e. every header field but the signature itself, and with
// payload_sha256 and payload_size the payload. Changing any of them, or the payload, after
// signing breaks the signature. Whether a run requires signatures, and from which keys, is
// its [security] allowed_keys (check_update_signature below).
//
//   "BRLUPD1\n" | u32 little-endian header length | header JSON | payload bytes
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "util/config_table.h"
#include "util/status.h"

namespace brl::ed25519 {
class SigningKey;
}

namespace brl::protocol {

struct UpdateHeader {
  int format = 1;
  std::string worker, id;
  int64_t base_version = 0;  // the global version the worker's state descends from
  int64_t steps = 0;         // GRPO steps in this delta
  int64_t samples = 0;       // completions scored in this delta
  double reward_mean = 0, reward_std = 0, accuracy = 0;
  // Fraction of the delta's prompt groups whose G rewards were all equal (no GRPO signal; TRL's
  // frac_reward_zero_std); -1: not reported (older workers).
  double frac_reward_zero_std = -1;
  std::string codec;  // fp32 | bf16 | int8 | int4
  std::string payload_sha256;
  uint64_t payload_size = 0;
  int64_t created_ms = 0;
  double seconds = 0;     // wall time the steps took
  std::string signer;     // "ed25519:<base64 public key>"; "" = unsigned
  std::string signature;  // base64 Ed25519 signature of update_signing_bytes()
  // Header fields this build does not know (from a newer worker), kept so that re-encoding
  // and signature checks see the header as it was written.
  nlohmann::json extra = nlohmann::json::object();

  nlohmann::json to_json() const;  // signer/signature only when set
};

// What a worker reports about the steps in one update.
struct UpdateStats {
  int64_t steps = 0, samples = 0;
  double reward_mean = 0, reward_std = 0, accuracy = 0;
  double frac_reward_zero_std = -1;  // -1: not reported
  double seconds = 0;                // wall time the steps took
};
// The header of `worker`'s update `id` (make_update_id) whose delta is against version
// base_version; payload hash, size and signature are filled by encode_update.
UpdateHeader make_update_header(const std::string& worker, const std::string& id, int64_t base_version,
                                const UpdateStats& stats, const std::string& codec, int64_t created_ms);

// Builds the object; fills payload_sha256/payload_size from the payload. With a key it signs
// the header (setting signer and signature); without one it writes signer and signature as
// they are in h (empty: an unsigned update).
std::string encode_update(UpdateHeader h, std::string_view payload, const ed25519::SigningKey* key = nullptr);

// What a signature covers: a domain tag, then the header's JSON without "signature" (keys
// sorted, so both sides produce the same bytes from the same fields).
std::string update_signing_bytes(const UpdateHeader& h);

// Why the proxy rejected an update (proxy/proxy.h lists when each applies): the kind, counted
// in /metrics, and a sentence. A manifest's rejected list stores reason() = "<kind>: <detail>".
enum class RejectionKind {
  malformed,
  missing,
  corrupt,
  unsigned_update,
  unknown_key,
  forged,
  replay,
  mismatch,
  future,
  stale,
  shape,
  nonfinite,
  norm
};
inline const EnumNames<RejectionKind> kRejectionKinds{{"malformed", "missing", "corrupt", "unsigned", "unknown_key",
                                                       "forged", "replay", "mismatch", "future", "stale", "shape",
                                                       "nonfinite", "norm"}};
struct Rejection {
  RejectionKind kind;
  std::string detail;
  std::string reason() const { return kRejectionKinds(kind) + ": " + detail; }
};

// The run's signature rule for one parsed update (parse_update has already checked the
// payload against payload_sha256). `allowed`: the raw public keys of [security] allowed_keys.
// Returns nothing when the update may be folded, else the rejection:
//   unsigned     the run has an allow-list and the update carries no signature;
//   unknown_key  signed by a key that is not on the allow-list;
//   forged       the signature does not verify: a header field or the payload was changed
//                after signing, the signature was made by another key, or the signer or
//                signature field is malformed.
// Without an allow-list unsigned updates pass, and signed ones are still verified against
// their own signer (catching changes after signing, not proving who signed).
std::optional<Rejection> check_update_signature(const UpdateHeader& h, const std::set<std::string>& allowed);

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
