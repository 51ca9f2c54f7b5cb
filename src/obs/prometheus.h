// Prometheus text exposition format 0.0.4: metric families with their # HELP and # TYPE
// lines, samples with escaped label values, values as Go's ParseFloat reads them (NaN,
// +Inf, -Inf). Counters are named *_total by the caller, as Prometheus recommends.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace brl::obs {

inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

using Labels = std::vector<std::pair<std::string, std::string>>;

// Label values: backslash, double quote and line feed escaped (\\, \", \n).
std::string escape_label_value(std::string_view v);
// HELP text: backslash and line feed escaped.
std::string escape_help(std::string_view v);
std::string format_sample_value(double v);
bool valid_metric_name(std::string_view name);
bool valid_label_name(std::string_view name);

class PromText {
 public:
  // type: counter | gauge | summary | histogram | untyped. Asserts a valid, new name.
  PromText& family(const std::string& name, const std::string& type, const std::string& help);
  // A sample of the current family; suffix for summaries ("_sum", "_count").
  PromText& sample(double value, const Labels& labels = {}, const std::string& suffix = "");
  const std::string& str() const { return out_; }

 private:
  std::string out_, family_;
  std::vector<std::string> names_;
};

}  // namespace brl::obs
