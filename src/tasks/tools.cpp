#include "tasks/tools.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "tasks/command.h"
#include "util/error.h"

namespace brl::tasks {

namespace {

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

}  // namespace

nlohmann::ordered_json parse_assistant_turn(const ResponseTemplate& t, std::string_view prefix, std::string_view text,
                                            const std::string& plain, const std::vector<std::string>& eos_tokens,
                                            const nlohmann::ordered_json& tools) {
  using ojson = nlohmann::ordered_json;
  const ojson fallback = {{"role", "assistant"}, {"content", plain}};
  ojson msg;
  try {
    msg = t.parse(prefix, text, tools);
  } catch (const ResponseParseError&) {
    return fallback;
  }
  if (msg.contains("content") && msg["content"].is_string()) {
    std::string c = msg["content"].get<std::string>();
    for (const auto& eos : eos_tokens)
      if (!eos.empty() && c.size() >= eos.size() && c.compare(c.size() - eos.size(), eos.size(), eos) == 0) {
        c.resize(c.size() - eos.size());
        break;
      }
    msg["content"] = c;
  }
  // Python's `not content`: missing, None, "", 0, False, [] or {}.
  const ojson c = msg.contains("content") ? msg["content"] : ojson();
  if (c.is_null() || (c.is_string() && c.get_ref<const std::string&>().empty()) || (c.is_boolean() && !c.get<bool>()) ||
      (c.is_number() && c.get<double>() == 0) || ((c.is_array() || c.is_object()) && c.empty()))
    msg["content"] = "";
  if (msg.contains("tool_calls") && !msg["tool_calls"].is_null()) {  // TRL's _validate_tool_calls
    ojson& calls = msg["tool_calls"];
    if (!calls.is_array()) return fallback;
    for (auto& call : calls) {
      if (!call.is_object()) return fallback;
      ojson& f = call.contains("function") ? call["function"] : call;
      if (!f.is_object() || !f.contains("name") || !f["name"].is_string()) return fallback;
      if (!f.contains("arguments") || f["arguments"].is_null()) f["arguments"] = ojson::object();
    }
  }
  return msg;
}

ResponseTemplate named_response_template(const std::string& value) {
  const auto names = ResponseTemplate::builtin_names();
  if (std::find(names.begin(), names.end(), value) != names.end()) return ResponseTemplate::builtin(value);
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  const std::string fix = "\"auto\", one of " + list +
                          ", or the path of a JSON file with a response template (transformers' format: "
                          "{\"defaults\", \"start_anchor\", \"fields\"})";
  std::ifstream in(value);
  if (!in) throw UserError("task.response_template = \"" + value + "\": not a built-in name nor a readable file", fix);
  auto j = nlohmann::ordered_json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw UserError("task.response_template file " + value + ": not valid JSON", fix);
  return ResponseTemplate::from_json(j, value);
}

ToolCommand::ToolCommand(std::string command, std::string response_template)
    : command_(std::move(command)), response_template_(std::move(response_template)) {
  if (response_template_ != "auto") named_response_template(response_template_);  // refused now, not at a call
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
    const auto& call = calls[i].call;
    if (!call.contains("type") || call["type"] != "function") {  // TRL's message
      const auto type = call.contains("type") ? call["type"] : nlohmann::ordered_json();
      const auto n = call.contains("name") ? call["name"] : nlohmann::ordered_json("unknown");
      out[i].message = {{"role", "tool"},
                        {"name", n},
                        {"content", python_str({{"error", "Unsupported tool call type: " + python_str(type)}})}};
      out[i].failed = true;
      continue;
    }
    const auto& f = call["function"];
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
