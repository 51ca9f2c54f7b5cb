// Tool calling, as TRL's GRPOTrainer does it with `tools`: the model's calls parsed from its
// completion, run by an external command, and their results as the chat template's tool
// messages. No libtorch here (grpo/tool_loop.h runs the generation between the calls).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "tasks/task.h"

namespace brl::tasks {

// An assistant turn parsed as TRL's parse_response parses Qwen2.5 / Qwen3's (Hermes-style)
// format with transformers' qwen3 response template: {"role": "assistant", "content": ...,
// "reasoning_content": ... (a <think> block's text, when there is one), "tool_calls": [{"type":
// "function", "function": {"name": ..., "arguments": ...}}, ...] (when there are any)}. `text`
// is the completion decoded with its special tokens, the stop token removed. The content and
// the reasoning are the last such segment, stripped. A <tool_call> block that is not a JSON
// object with a string "name" (arguments default to {}), or is left open, makes the whole turn
// plain content (`plain`: the text without special tokens), as TRL falls back.
nlohmann::ordered_json parse_assistant_turn(const std::string& text, const std::string& plain);

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
class ToolCommand {
 public:
  explicit ToolCommand(std::string command) : command_(std::move(command)) {}
  const std::string& command() const { return command_; }
  std::vector<ToolResult> run(const std::vector<ToolCall>& calls) const;

 private:
  std::string command_;
};

}  // namespace brl::tasks
