// Test helper: checks Prometheus text format 0.0.4 line by line, independently of the
// writer in obs/prometheus.cpp (a regex grammar of the format's documented rules):
// every family opens with # HELP then # TYPE, samples belong to the open family (summary
// samples may add _sum/_count), counters are named *_total, label values use only the
// escapes \\ \" \n, values parse as floats (or NaN, +Inf, -Inf), the text ends in '\n',
// no family appears twice. Returns "" when the text is valid, else the first problem.
#pragma once

#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace brl::test {

inline std::string check_prometheus_text(const std::string& text) {
  if (text.empty() || text.back() != '\n') return "text must end with a line feed";
  static const std::regex help(R"(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*)$)");
  static const std::regex type(R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|summary|histogram|untyped)$)");
  static const std::regex sample(
      R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*")*\})? (NaN|[+-]Inf|[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)$)");
  std::istringstream in(text);
  std::string line, family, family_type, pending_help;
  std::set<std::string> seen;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    std::smatch m;
    std::string where = "line " + std::to_string(n) + " '" + line + "': ";
    if (std::regex_match(line, m, help)) {
      if (seen.count(m[1])) return where + "family appears twice";
      pending_help = m[1];
    } else if (std::regex_match(line, m, type)) {
      if (m[1] != pending_help) return where + "TYPE without a HELP line just before it";
      family = m[1];
      family_type = m[2];
      seen.insert(family);
      if (family_type == "counter" && family.size() < 6) return where + "counter not named *_total";
      if (family_type == "counter" && family.compare(family.size() - 6, 6, "_total") != 0)
        return where + "counter not named *_total";
    } else if (std::regex_match(line, m, sample)) {
      std::string name = m[1];
      bool ok = name == family || (family_type == "summary" && (name == family + "_sum" || name == family + "_count"));
      if (family.empty() || !ok) return where + "sample outside its family " + family;
    } else {
      return where + "not a HELP, TYPE or sample line";
    }
  }
  return "";
}

}  // namespace brl::test
