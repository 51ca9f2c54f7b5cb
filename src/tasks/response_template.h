// A model's assistant turn parsed into a message ({"role", "content", "reasoning_content",
// "tool_calls", ...}) with a response template: transformers' format (>= 5.13,
// tokenizer.response_template; utils/chat_parsing), the one TRL sets for the chat templates it
// knows and models ship in tokenizer_config.json. Regions (fields) open and close on literal or
// regular-expression anchors; each region's text goes through a content parser (text, int,
// float, bool, json, xml-inline, kv-lines, python-call-list) and an optional transform, and
// tool-call arguments are typed with the tools' JSON schemas. Parsed as transformers'
// ResponseParser parses a whole text; the patterns are PCRE2 (Python's `regex` module there).
// No libtorch here.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace brl::tasks {

// A text the template cannot parse (transformers' ValueError): the caller falls back to the
// plain text, as TRL does.
struct ResponseParseError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class ResponseTemplate {
 public:
  // Checked as transformers' load_response_template checks it; a bad template is a UserError
  // naming `source` and the field.
  static ResponseTemplate from_json(const nlohmann::ordered_json& spec, const std::string& source);
  // Formats bucketrl knows by name (task.response_template): "qwen3" (Hermes-style
  // <tool_call>{json}</tool_call>: Qwen2.5, Qwen3, QwQ), "llama3" (Llama 3.1 / 3.2's
  // {"name": ..., "parameters": ...}). Behave as TRL's qwen3_template and llama3_template.
  static ResponseTemplate builtin(const std::string& name);
  static std::vector<std::string> builtin_names();

  // The message in `prefix` + `text`: `prefix` (the conversation before the generation, as
  // text) is cut after the template's last start anchor, so that what the template wrote of the
  // turn (an opening <think>, say) is parsed with it. `tools`: the tool schemas the prompt was
  // rendered with (null: none), to type the calls' arguments. Throws ResponseParseError.
  nlohmann::ordered_json parse(std::string_view prefix, std::string_view text,
                               const nlohmann::ordered_json& tools = nullptr) const;

  // Whether `prefix` holds the start anchor (else parse() reads all of it, as transformers).
  bool anchored(std::string_view prefix) const;
  const std::string& source() const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace brl::tasks
