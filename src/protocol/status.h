// The state of a run read from the bucket alone (`bucketrl status`, also for a run whose
// proxy is down): run, newest version, recent versions with their reward, held-out
// evaluations, workers with health, rejected updates.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "store/object_store.h"

namespace brl::protocol {

// recent: how many of the newest versions to describe.
nlohmann::json run_status(store::ObjectStore& s, int recent = 10);
std::string format_status(const nlohmann::json& st);

}  // namespace brl::protocol
