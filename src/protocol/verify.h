// Checks a run's invariants from the bucket alone (tests, chaos runs, `bucketrl verify`):
// versions 0..N form one chain (no gap; a manifest whose parent is not the version before
// does not parse), every manifest parses, every payload still present matches its
// manifest (so does the proxy state object a manifest names, when still present), LATEST
// names a published version, no update (by id, or by content if its delta is nonzero) is
// folded into two versions, every rejection has a reason, and every update object still in
// updates/ is accounted for: recorded (folded or rejected) in exactly one manifest, or
// pending (after its worker's cursor in the newest manifest, i.e. not yet
// considered). One older than the cursor and recorded nowhere was skipped: lost.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "store/object_store.h"

namespace brl::protocol {

struct VerifyReport {
  int64_t newest = -1, latest = -1;
  int64_t versions = 0, payloads_verified = 0, payloads_collected = 0;
  int64_t updates_folded = 0, updates_rejected = 0;
  int64_t updates_present = 0, updates_pending = 0;  // objects in updates/; of them not yet considered
  std::set<std::string> folded;                      // "worker/id" of every folded update
  std::vector<std::string> errors;                   // empty: the run verifies
  bool ok() const { return errors.empty(); }
  std::string summary() const;
};

VerifyReport verify_run(store::ObjectStore& s, bool check_payloads = true);

}  // namespace brl::protocol
