#include "util/host.h"

#include <unistd.h>

#include <cctype>

namespace brl {

std::string hostname() {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) return "";
  return host;
}

std::string process_id(const std::string& prefix, const std::string& fallback) {
  std::string h;
  for (char c : hostname()) {
    if (h.size() >= 40) break;
    h += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '-';
  }
  return (h.empty() ? fallback : prefix + h) + "-" + std::to_string(getpid());
}

}  // namespace brl
