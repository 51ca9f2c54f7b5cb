// Built-in reward functions (see task.h for the interface).
#pragma once

#include "tasks/task.h"

namespace brl::tasks {

// 1 when the first integer of the completion equals the answer.
class ExactAnswerReward : public RewardFn {
 public:
  std::string name() const override { return "correct"; }
  std::vector<double> score(const std::vector<const Example*>&, const std::vector<std::string>&) override;
};

// 1 when the completion is exactly one integer (surrounding whitespace allowed).
class IntegerFormatReward : public RewardFn {
 public:
  std::string name() const override { return "format"; }
  std::vector<double> score(const std::vector<const Example*>&, const std::vector<std::string>&) override;
};

// 1 when the completion's first line is an expression over the given numbers (each at most
// once) that evaluates exactly to the target.
class CountdownReward : public RewardFn {
 public:
  std::string name() const override { return "correct"; }
  std::vector<double> score(const std::vector<const Example*>&, const std::vector<std::string>&) override;
};

// An external command: JSON lines (prompt, answer, completion, extra fields) on stdin, one
// number per line on stdout. For a conversational prompt the completion is, as TRL passes it
// to reward functions, [{"role": "assistant", "content": text}], or with tool calls its assistant
// turns and tool results ([{"role": "assistant", ..., "tool_calls": [...]}, {"role": "tool",
// ...}, ...]). Failures are UserErrors
// naming the command and what it did.
class CommandReward : public RewardFn {
 public:
  explicit CommandReward(std::string command);
  std::string name() const override { return "cmd:" + command_; }
  std::vector<double> score(const std::vector<const Example*>&, const std::vector<std::string>&) override;
  std::vector<double> score_turns(const std::vector<const Example*>&, const std::vector<std::string>&,
                                  const std::vector<nlohmann::ordered_json>& turns) override;

 private:
  std::string command_;
};

}  // namespace brl::tasks
