// XML text escaping, shared by the SVG plots and the S3 fuzz target's listing writer (the
// reverse of store::s3_detail::xml_unescape for these five entities).
#pragma once

#include <string>

namespace brl {

inline std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace brl
