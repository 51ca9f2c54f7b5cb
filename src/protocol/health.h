// Worker health from heartbeats, one rule for the proxy and for `bucketrl status`:
// stopped (said so), lost (silent longer than the timeout), straggling (throughput below
// ratio x the median of the live workers, when there are at least two), else alive.
#pragma once

#include <map>
#include <string>

#include "protocol/records.h"

namespace brl::protocol {

struct HealthRule {
  double timeout_s = 60, straggler_ratio = 0.25;
};

// Health per worker id; now_ms = the observer's clock.
std::map<std::string, std::string> classify_health(const std::map<std::string, Heartbeat>& beats, int64_t now_ms,
                                                   const HealthRule& rule);

}  // namespace brl::protocol
