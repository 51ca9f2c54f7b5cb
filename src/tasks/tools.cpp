#include "tasks/tools.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "tasks/command.h"
#include "util/error.h"

namespace brl::tasks {

namespace {

constexpr std::string_view kWhitespace = " \t\n\r\f\v";

std::string strip(std::string_view s) {
  const size_t b = s.find_first_not_of(kWhitespace);
  if (b == std::string_view::npos) return {};
  return std::string(s.substr(b, s.find_last_not_of(kWhitespace) - b + 1));
}

// Python's repr() of a str: single quotes unless the text has ' and no ", escapes for the
// quote, the backslash and control characters; other characters as they are.
std::string python_repr(const std::string& s) {
  const char q = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\' || c == static_cast<unsigned char>(q)) out += '\\', out += static_cast<char>(c);
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + q;
}

std::string python_repr(const nlohmann::ordered_json& v) {
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::string: return python_repr(v.get<std::string>());
    case nlohmann::ordered_json::value_t::boolean: return v.get<bool>() ? "True" : "False";
    case nlohmann::ordered_json::value_t::null: return "None";
    case nlohmann::ordered_json::value_t::array: {
      std::string out = "[";
      for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + python_repr(v[i]);
      return out + "]";
    }
    case nlohmann::ordered_json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : v.items()) {
        out += (first ? "" : ", ") + python_repr(k) + ": " + python_repr(x);
        first = false;
      }
      return out + "}";
    }
    default: return v.dump();  // numbers: JSON's shortest round trip, as Python's repr of int and float
  }
}

// Python's name of a JSON value's type (json.loads' result), for TRL's error on arguments that
// are not a mapping.
std::string python_type(const nlohmann::ordered_json& v) {
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::array: return "list";
    case nlohmann::ordered_json::value_t::string: return "str";
    case nlohmann::ordered_json::value_t::boolean: return "bool";
    case nlohmann::ordered_json::value_t::null: return "NoneType";
    case nlohmann::ordered_json::value_t::number_float: return "float";
    default: return "int";
  }
}

// A <tool_call> block's JSON as TRL's parse_response takes it: an object with a string "name"
// (arguments missing or null: {}), under {"type": "function", "function": ...}; else null.
nlohmann::ordered_json tool_call_of(std::string_view body) {
  auto j = nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string()) return nullptr;
  if (!j.contains("arguments") || j["arguments"].is_null()) j["arguments"] = nlohmann::ordered_json::object();
  return {{"type", "function"}, {"function", std::move(j)}};
}

}  // namespace

nlohmann::ordered_json parse_assistant_turn(const std::string& text, const std::string& plain) {
  static constexpr std::string_view kThink = "<think>", kThinkEnd = "</think>", kCall = "<tool_call>",
                                    kCallEnd = "</tool_call>";
  nlohmann::ordered_json msg = {{"role", "assistant"}};
  nlohmann::ordered_json reasoning, calls = nlohmann::ordered_json::array();
  std::string content;
  const std::string_view t = text;
  size_t pos = 0;
  while (pos < t.size()) {
    if (t.substr(pos, kThink.size()) == kThink) {
      const size_t body = pos + kThink.size(), end = t.find(kThinkEnd, body);
      reasoning = strip(t.substr(body, end == std::string_view::npos ? std::string_view::npos : end - body));
      pos = end == std::string_view::npos ? t.size() : end + kThinkEnd.size();
    } else if (t.substr(pos, kCall.size()) == kCall) {
      const size_t body = pos + kCall.size(), end = t.find(kCallEnd, body);
      if (end == std::string_view::npos) return {{"role", "assistant"}, {"content", plain}};
      auto call = tool_call_of(strip(t.substr(body, end - body)));
      if (call.is_null()) return {{"role", "assistant"}, {"content", plain}};
      calls.push_back(std::move(call));
      pos = end + kCallEnd.size();
    } else {
      const size_t next = std::min(t.find(kThink, pos), t.find(kCall, pos));
      std::string seg = strip(t.substr(pos, next == std::string_view::npos ? std::string_view::npos : next - pos));
      if (!seg.empty()) content = std::move(seg);
      pos = next == std::string_view::npos ? t.size() : next;
    }
  }
  msg["content"] = content;
  if (!reasoning.is_null()) msg["reasoning_content"] = reasoning;
  if (!calls.empty()) msg["tool_calls"] = std::move(calls);
  return msg;
}

std::string python_str(const nlohmann::ordered_json& v) {
  return v.is_string() ? v.get<std::string>() : python_repr(v);
}

std::vector<std::string> tool_names(const nlohmann::ordered_json& tools) {
  std::vector<std::string> out;
  if (!tools.is_array()) return out;
  for (const auto& t : tools) {
    const auto& f = t.contains("function") ? t["function"] : t;
    if (f.is_object() && f.contains("name") && f["name"].is_string()) out.push_back(f["name"].get<std::string>());
  }
  return out;
}

std::vector<ToolResult> ToolCommand::run(const std::vector<ToolCall>& calls) const {
  std::vector<ToolResult> out(calls.size());
  std::vector<size_t> sent;  // the calls the command gets, in order
  std::ostringstream in;
  for (size_t i = 0; i < calls.size(); ++i) {
    const auto& f = calls[i].call["function"];
    const std::string name = f["name"].get<std::string>();
    out[i].message = {{"role", "tool"}, {"name", name}, {"content", ""}};
    std::string error;
    const auto names = tool_names(calls[i].example->tools);
    if (std::find(names.begin(), names.end(), name) == names.end()) error = "Tool " + name + " not found.";
    else if (!f["arguments"].is_object())
      error = name + "() argument after ** must be a mapping, not " + python_type(f["arguments"]);
    if (!error.empty()) {
      out[i].message["content"] = python_str({{"error", error}});
      out[i].failed = true;
      continue;
    }
    nlohmann::json j = calls[i].example->extra;
    j["name"] = name;
    j["arguments"] = nlohmann::json::parse(f["arguments"].dump());
    in << j.dump() << "\n";
    sent.push_back(i);
  }
  if (sent.empty()) return out;
  const std::string what = "tool command '" + command_ + "'";
  const std::string fix =
      "it must read JSON lines ({\"name\", \"arguments\"} and the example's fields) on stdin and print one JSON "
      "value per line: the result, or {\"error\": \"...\"}";
  const std::string output = run_filter(command_, in.str(), what, fix);
  std::istringstream lines(output);
  std::string line;
  size_t k = 0;
  while (std::getline(lines, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (k == sent.size())
      throw UserError(what + " printed more lines than the " + std::to_string(sent.size()) + " calls it got", fix);
    auto v = nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (v.is_discarded())
      throw UserError(what + " printed '" + line + "' for call " + std::to_string(k + 1) + ", not a JSON value",
                      "print json.dumps(result): a string result as \"...\"");
    ToolResult& r = out[sent[k++]];
    r.failed = v.is_object() && v.size() == 1 && v.contains("error");
    r.message["content"] = python_str(v);
  }
  if (k != sent.size())
    throw UserError(what + " printed " + std::to_string(k) + " results for " + std::to_string(sent.size()) + " calls",
                    fix);
  return out;
}

}  // namespace brl::tasks
