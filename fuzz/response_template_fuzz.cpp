// Fuzzes the response-template parser (tasks::ResponseTemplate): it reads what a model wrote,
// anything at all, every round of tool calling. Invariants: a text the template cannot parse is
// a ResponseParseError (never another exception, a crash, a hang or undefined behaviour), under
// the built-in templates and one that uses every content parser; a bad template (the input as
// JSON, when it starts with '{') is a UserError.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "tasks/response_template.h"
#include "util/error.h"

using brl::tasks::ResponseTemplate;

namespace {

const std::vector<ResponseTemplate>& templates() {
  static const std::vector<ResponseTemplate> t = [] {
    std::vector<ResponseTemplate> v;
    for (const auto& n : ResponseTemplate::builtin_names()) v.push_back(ResponseTemplate::builtin(n));
    v.push_back(ResponseTemplate::from_json(nlohmann::ordered_json::parse(R"j({
      "defaults": {"role": "assistant"},
      "start_anchor_pattern": "<a>|<b>\\n",
      "fields": {
        "thinking": {"open_pattern": "(?=[\\s\\S]*?</t>)", "close_pattern": "</t>\\s*"},
        "calls": {"open_pattern": "<c>(?P<name>\\w+)\\(", "close_pattern": "\\)</c>", "repeats": true,
                  "content": "xml-inline",
                  "content_args": {"tag_pattern": "(?P<key>\\w+)=(?P<value>'[^']*'|[^,)]*)", "merge_duplicates": true,
                                   "value_parser": {"name": "json", "args": {"string_delims": [["'", "'"]],
                                                                             "allow_non_json": true}}},
                  "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}}},
        "list": {"open": "[[", "close": "]]", "content": "python-call-list", "transform_each": true,
                 "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{arguments}"}}},
        "obj": {"open": "{{", "close": "}}", "content": "json", "content_args": {"unquoted_keys": true}},
        "kv": {"open": "<kv>", "close": "</kv>", "content": "kv-lines", "content_args": {"value_parser": {"name": "int"}}},
        "n": {"open": "<n>", "close": "</n>", "content": "float"},
        "b": {"open": "<b2>", "close": "</b2>", "content": "bool", "repeats": true, "join": "|"},
        "content": {"close_pattern": "<e>\\s*|$"}
      }})j"),
                                            "fuzz"));
    return v;
  }();
  return t;
}

const nlohmann::ordered_json& tools() {
  static const auto t = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f",
      "parameters": {"properties": {"a": {"type": "integer"}, "b": {"type": ["number", "null"]},
      "c": {"anyOf": [{"type": "boolean"}, {"type": "object"}]}, "d": {"type": "array"}}}}}])");
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (!text.empty() && text[0] == '{') {
    const auto j = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return 0;
    try {
      const auto t = ResponseTemplate::from_json(j, "fuzz.json");
      t.parse("<a>", "x</t>y<c>f(a=1)</c>", tools());
    } catch (const brl::UserError&) {
    } catch (const brl::tasks::ResponseParseError&) {
    }
    return 0;
  }
  const size_t cut = text.find('\x1f');  // the prefix, then the answer
  const std::string_view prefix = cut == std::string_view::npos ? std::string_view() : text.substr(0, cut);
  const std::string_view answer = cut == std::string_view::npos ? text : text.substr(cut + 1);
  for (const auto& t : templates()) {
    for (const auto* tl : {&tools(), static_cast<const nlohmann::ordered_json*>(nullptr)}) {
      try {
        const auto msg = t.parse(prefix, answer, tl ? *tl : nlohmann::ordered_json());
        if (!msg.is_object() || !msg.contains("role")) __builtin_trap();
        (void)msg.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
      } catch (const brl::tasks::ResponseParseError&) {
      }
    }
  }
  return 0;
}
