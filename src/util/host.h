// This machine and process, as ids and heartbeats name them.
#pragma once

#include <string>

namespace brl {

std::string hostname();  // gethostname(2); "" when it fails
// "<prefix><hostname>-<pid>" with the hostname cut to 40 characters of [A-Za-z0-9_-] (others
// become '-'), a valid worker id (protocol/layout.h); "<fallback>-<pid>" without a hostname.
std::string process_id(const std::string& prefix, const std::string& fallback);

}  // namespace brl
