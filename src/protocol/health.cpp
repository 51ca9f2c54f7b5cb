#include "protocol/health.h"

#include <algorithm>
#include <vector>

namespace brl::protocol {

std::map<std::string, std::string> classify_health(const std::map<std::string, Heartbeat>& beats, int64_t now_ms,
                                                   const HealthRule& rule) {
  auto age = [&](const Heartbeat& h) { return (now_ms - h.time_ms) / 1000.0; };
  std::vector<double> rates;
  for (auto& [w, h] : beats)
    if (h.state != "stopped" && age(h) <= rule.timeout_s && h.samples_per_s > 0) rates.push_back(h.samples_per_s);
  std::sort(rates.begin(), rates.end());
  double median = rates.empty() ? 0 : rates[rates.size() / 2];
  std::map<std::string, std::string> out;
  for (auto& [w, h] : beats)
    out[w] = h.state == "stopped"          ? "stopped"
             : age(h) > rule.timeout_s     ? "lost"
             : (rates.size() >= 2 && h.samples_per_s < rule.straggler_ratio * median) ? "straggling"
                                           : "alive";
  return out;
}

}  // namespace brl::protocol
