#include "obs/prometheus.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "util/error.h"

namespace brl::obs {

namespace {
std::string escape(std::string_view v, bool quotes) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '"' && quotes) out += "\\\"";
    else out += c;
  }
  return out;
}
bool name_chars(std::string_view n, bool colon) {
  auto ok = [&](char c, bool first) {
    return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || (colon && c == ':') ||
           (!first && std::isdigit(static_cast<unsigned char>(c)));
  };
  if (n.empty() || !ok(n[0], true)) return false;
  return std::all_of(n.begin() + 1, n.end(), [&](char c) { return ok(c, false); });
}
}  // namespace

std::string escape_label_value(std::string_view v) { return escape(v, true); }
std::string escape_help(std::string_view v) { return escape(v, false); }

std::string format_sample_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<long long>(v));
  return fmt::format("{}", v);  // shortest representation that reads back exactly
}

bool valid_metric_name(std::string_view name) { return name_chars(name, true); }
bool valid_label_name(std::string_view name) { return name_chars(name, false) && name.substr(0, 2) != "__"; }

PromText& PromText::family(const std::string& name, const std::string& type, const std::string& help) {
  BRL_ASSERT(valid_metric_name(name), "metric name " + name);
  BRL_ASSERT(std::find(names_.begin(), names_.end(), name) == names_.end(), "metric family " + name + " twice");
  BRL_ASSERT(type == "counter" || type == "gauge" || type == "summary" || type == "histogram" || type == "untyped",
             type);
  names_.push_back(name);
  family_ = name;
  out_ += "# HELP " + name + " " + escape_help(help) + "\n";
  out_ += "# TYPE " + name + " " + type + "\n";
  return *this;
}

PromText& PromText::sample(double value, const Labels& labels, const std::string& suffix) {
  BRL_ASSERT(!family_.empty(), "sample before family");
  out_ += family_ + suffix;
  if (!labels.empty()) {
    out_ += "{";
    for (size_t i = 0; i < labels.size(); ++i) {
      BRL_ASSERT(valid_label_name(labels[i].first), "label name " + labels[i].first);
      if (i) out_ += ',';
      out_ += labels[i].first;
      out_ += "=\"";
      out_ += escape_label_value(labels[i].second);
      out_ += '"';
    }
    out_ += "}";
  }
  out_ += ' ';
  out_ += format_sample_value(value);
  out_ += '\n';
  return *this;
}

}  // namespace brl::obs
