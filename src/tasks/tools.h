// Tool calling, as TRL's GRPOTrainer does it with `tools`: the model's calls parsed from its
// completion, run by an external command, and their results as the chat template's tool
// messages. No libtorch here (grpo/tool_loop.h runs the generation between the calls).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "tasks/response_template.h"
#include "tasks/task.h"

namespace brl::tasks {

// An assistant turn as TRL's parse_response (trl/chat_template_utils.py) makes it: the response
// template's parse of `prefix` + `text` (the conversation before the turn and the turn, decoded
// with their special tokens) with the tools typing the arguments; the content without a
// trailing end-of-sequence token (any of `eos_tokens`), "" when missing; each tool call a
// {"type": "function", "function": {"name": <string>, "arguments": ({} when missing)}}. A turn
// the template cannot parse, or whose calls are malformed, is plain content (`plain`: the turn
// without special tokens), as TRL falls back.
nlohmann::ordered_json parse_assistant_turn(const ResponseTemplate& t, std::string_view prefix, std::string_view text,
                                            const std::string& plain, const std::vector<std::string>& eos_tokens,
                                            const nlohmann::ordered_json& tools);

// task.response_template other than "auto": a built-in name (ResponseTemplate::builtin_names) or a
// JSON file in transformers' response_template format. UserError naming the value otherwise.
ResponseTemplate named_response_template(const std::string& value);

// Python's str() of a JSON value (str(json.loads(v)) without the round trip): strings as they
// are, containers with repr()'d items ({'a': 1, 'b': [True, None]}). What TRL writes into a
// tool message for a tool's result.
std::string python_str(const nlohmann::ordered_json& v);

// The names of the functions in a list of tool schemas ({"type": "function", "function":
// {"name": ...}} or a bare {"name": ...}).
std::vector<std::string> tool_names(const nlohmann::ordered_json& tools);

// One call to run, and its result as the tool message TRL appends: {"role": "tool", "name":
// ..., "content": ...}.
struct ToolCall {
  const Example* example = nullptr;  // whose prompt listed the tools
  nlohmann::ordered_json call;       // {"type": "function", "function": {"name", "arguments"}}
};
struct ToolResult {
  nlohmann::ordered_json message;
  bool failed = false;
};

// The tool command (task.tool_command): `sh -c command` once per batch of calls, one JSON line
// per call on stdin ({"name", "arguments"} and the example's own fields, as a reward command
// gets them), one JSON value per line on stdout: the result (a string as it is, any other value
// as Python's str() of it), or {"error": "..."} for a call that failed. Calls to a function the
// example's tools do not list, or whose arguments are not an object, fail without reaching the
// command, as TRL's do ({'error': ...}); they and the failures count in `failed`.
// Calls whose "type" is not "function" fail as TRL's do.
class ToolCommand {
 public:
  // response_template: task.response_template ("auto", a built-in name or a file; checked here).
  explicit ToolCommand(std::string command, std::string response_template = "auto");
  const std::string& command() const { return command_; }
  const std::string& response_template() const { return response_template_; }
  std::vector<ToolResult> run(const std::vector<ToolCall>& calls) const;

 private:
  std::string command_, response_template_;
};

}  // namespace brl::tasks
