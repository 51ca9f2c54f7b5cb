// Reward functions: exact-answer correctness, answer format, Countdown validity, and the
// external reward command.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "tasks/command.h"
#include "tasks/rewards.h"
#include "util/error.h"

namespace brl::tasks {

bool parse_leading_int(const std::string& s, int64_t* out) {
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n')) ++i;
  bool neg = false;
  if (i < s.size() && s[i] == '-') neg = true, ++i;
  if (i >= s.size() || s[i] < '0' || s[i] > '9') return false;
  int64_t v = 0;
  for (int n = 0; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i, ++n) {
    if (n > 17) return false;  // absurdly long: not an answer
    v = v * 10 + (s[i] - '0');
  }
  *out = neg ? -v : v;
  return true;
}

std::vector<double> ExactAnswerReward::score(const std::vector<const Example*>& ex,
                                             const std::vector<std::string>& comp) {
  std::vector<double> r(comp.size(), 0.0);
  for (size_t i = 0; i < comp.size(); ++i) {
    int64_t got, want;
    if (parse_leading_int(comp[i], &got) && parse_leading_int(ex[i]->answer, &want) && got == want) r[i] = 1.0;
  }
  return r;
}

std::vector<double> IntegerFormatReward::score(const std::vector<const Example*>&,
                                               const std::vector<std::string>& comp) {
  std::vector<double> r(comp.size(), 0.0);
  for (size_t i = 0; i < comp.size(); ++i) {
    const std::string& s = comp[i];
    size_t b = s.find_first_not_of(" \t\n"), e = s.find_last_not_of(" \t\n");
    if (b == std::string::npos) continue;
    std::string t = s.substr(b, e - b + 1);
    size_t k = t[0] == '-' ? 1 : 0;
    bool ok = k < t.size();
    for (; k < t.size(); ++k) ok = ok && t[k] >= '0' && t[k] <= '9';
    r[i] = ok ? 1.0 : 0.0;
  }
  return r;
}

std::vector<double> CountdownReward::score(const std::vector<const Example*>& ex,
                                           const std::vector<std::string>& comp) {
  std::vector<double> r(comp.size(), 0.0);
  for (size_t i = 0; i < comp.size(); ++i) {
    double v;
    std::vector<int64_t> used;
    std::string expr = comp[i].substr(0, comp[i].find('\n'));
    if (!eval_countdown(expr, &v, &used)) continue;
    // Each given number at most once.
    std::vector<int64_t> avail = ex[i]->extra.value("numbers", std::vector<int64_t>{});
    bool ok = true;
    for (int64_t u : used) {
      auto it = std::find(avail.begin(), avail.end(), u);
      if (it == avail.end()) {
        ok = false;
        break;
      }
      avail.erase(it);
    }
    int64_t target = ex[i]->extra.value("target", int64_t{0});
    if (ok && std::abs(v - static_cast<double>(target)) < 1e-9) r[i] = 1.0;
  }
  return r;
}

CommandReward::CommandReward(std::string command) : command_(std::move(command)) {}

// Runs `sh -c command` once per batch: JSON lines in, one number per line out.
std::vector<double> CommandReward::score(const std::vector<const Example*>& ex, const std::vector<std::string>& comp) {
  return score_turns(ex, comp, {});
}

std::vector<double> CommandReward::score_turns(const std::vector<const Example*>& ex,
                                               const std::vector<std::string>& comp,
                                               const std::vector<nlohmann::ordered_json>& turns) {
  std::ostringstream in;
  for (size_t i = 0; i < comp.size(); ++i) {
    nlohmann::json j = ex[i]->extra;
    j["prompt"] = ex[i]->prompt_json();
    if (!ex[i]->tools.is_null()) j["tools"] = nlohmann::json::parse(ex[i]->tools.dump());  // to check calls against
    j["answer"] = ex[i]->answer;
    if (i < turns.size() && !turns[i].is_null()) j["completion"] = nlohmann::json::parse(turns[i].dump());
    else if (ex[i]->messages.is_null()) j["completion"] = comp[i];
    else j["completion"] = nlohmann::json::array({{{"role", "assistant"}, {"content", comp[i]}}});
    in << j.dump() << "\n";
  }
  const std::string output =
      run_filter(command_, in.str(), "reward command '" + command_ + "'",
                 "it must read JSON lines (prompt, answer, completion, extra fields) on stdin and print one number "
                 "per line");
  std::vector<double> r;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    char* end = nullptr;
    double v = std::strtod(line.c_str(), &end);
    while (end && (*end == ' ' || *end == '\r' || *end == '\t')) ++end;
    if (!end || *end != '\0' || !std::isfinite(v))
      throw UserError("reward command '" + command_ + "' printed '" + line + "' on line " +
                          std::to_string(r.size() + 1) + ", not a finite number",
                      "print exactly one number per input line");
    r.push_back(v);
  }
  if (r.size() != comp.size())
    throw UserError("reward command '" + command_ + "' printed " + std::to_string(r.size()) + " numbers for " +
                        std::to_string(comp.size()) + " completions",
                    "print exactly one number per input line");
  return r;
}

}  // namespace brl::tasks
