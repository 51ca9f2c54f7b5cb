// Fuzzes the ~/.aws/credentials and ~/.aws/config reader (store::parse_ini): a file in the
// user's home that a shared machine or a bad sync can fill with anything. Invariants: keys
// come back lower-cased and trimmed, values trimmed, nothing holds a newline, and "[profile
// x]" headers are normalized to "profile x" (one space).
#include <cstdint>
#include <string>

#include "store/credentials.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto ini = brl::store::parse_ini(text);
  auto trimmed = [](const std::string& s) {
    return s.empty() || (!std::isspace(static_cast<unsigned char>(s.front())) &&
                         !std::isspace(static_cast<unsigned char>(s.back())));
  };
  for (auto& [section, kv] : ini) {
    if (!trimmed(section) || section.find('\n') != std::string::npos) __builtin_trap();
    if (section.rfind("profile", 0) == 0 && section.size() > 7 &&
        std::isspace(static_cast<unsigned char>(section[7])) &&
        (section[7] != ' ' || (section.size() > 8 && std::isspace(static_cast<unsigned char>(section[8])))))
      __builtin_trap();
    for (auto& [k, v] : kv) {
      if (!trimmed(k) || !trimmed(v) || k.find('=') != std::string::npos) __builtin_trap();
      for (char c : k)
        if (std::tolower(static_cast<unsigned char>(c)) != static_cast<unsigned char>(c)) __builtin_trap();
      if (k.find('\n') != std::string::npos || v.find('\n') != std::string::npos) __builtin_trap();
    }
  }
  return 0;
}
