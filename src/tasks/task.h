// Prompt tasks and verifiable rewards. A Task yields training examples (deterministically
// sharded across workers) and a fixed held-out set; its reward functions score completions.
// Built-in tasks need no download: integer arithmetic and Countdown. JSONL datasets and an
// external reward command cover the rest without recompiling.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace brl::tasks {

struct Example {
  std::string prompt;  // a text prompt (empty when `messages` holds a conversational one)
  std::string answer;
  nlohmann::json extra = nlohmann::json::object();  // any other fields (numbers, target, ...)
  // TRL's conversational prompt: a list of {"role", "content"} messages that the model's chat
  // template renders (null for a text prompt), per-example chat_template_kwargs, and the tools
  // (JSON schemas) the template lists for the model to call (null: none).
  nlohmann::ordered_json messages;
  nlohmann::ordered_json chat_template_kwargs;
  nlohmann::ordered_json tools;
  // The prompt as a JSON value: the text, or the list of messages.
  nlohmann::json prompt_json() const;
};

class RewardFn {
 public:
  virtual ~RewardFn() = default;
  virtual std::string name() const = 0;
  // One score per completion; completions[i] answers examples[i]. Throws UserError on a
  // failure the user must fix (e.g. a crashing reward command).
  virtual std::vector<double> score(const std::vector<const Example*>& examples,
                                    const std::vector<std::string>& completions) = 0;
  // The same, with each completion also as TRL's list of messages where tools were called (its
  // assistant turns and the tool results; null: none). The built-in rewards read the texts.
  virtual std::vector<double> score_turns(const std::vector<const Example*>& examples,
                                          const std::vector<std::string>& completions,
                                          const std::vector<nlohmann::ordered_json>& /*turns*/) {
    return score(examples, completions);
  }
};

class ToolCommand;

struct TaskOptions {
  std::string name = "arithmetic";  // arithmetic | countdown | jsonl
  std::string dataset_path;         // jsonl: training file
  std::string eval_path;            // jsonl: held-out file (default: 10% of dataset)
  int num_eval = 200;               // held-out examples (built-in tasks)
  int max_operand = 99;             // arithmetic: operands in [0, max_operand]
  std::string operations = "+-";    // arithmetic: operators drawn from this set
  bool format_reward = false;       // add the task's format reward
  double format_weight = 0.2;
  std::vector<std::string> reward_commands;  // external reward commands (sh -c)
  std::string tool_command;                  // runs the model's tool calls (sh -c); empty: no tool calling
  // How the model's turns are parsed for calls (tasks/response_template.h): "auto" (the model's
  // tokenizer_config.json response_template, else the format its chat template writes), a
  // built-in name, or a JSON file in transformers' response_template format.
  std::string response_template = "auto";
  int64_t seed = 1234;
  // jsonl: each shard's examples in a new seeded order every epoch (TRL's shuffle_dataset);
  // false: file order.
  bool shuffle_dataset = true;
};

class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;
  // The i-th training example of shard `shard` of `num_shards` (deterministic; never a
  // held-out example, nor a twin of one such as 5+3 for 3+5).
  virtual Example train_example(uint64_t i, int shard, int num_shards) const = 0;
  virtual const std::vector<Example>& eval_set() const = 0;
  // Examples to early-stop on (pretraining), never from the held-out set; built-in tasks also
  // keep them out of training.
  virtual const std::vector<Example>& validation_set() const = 0;
  // Correctness reward first (accuracy = its mean), then any others.
  std::vector<std::shared_ptr<RewardFn>> rewards;
  std::shared_ptr<const ToolCommand> tools;  // task.tool_command; null: no tool calling
};

std::unique_ptr<Task> make_task(const TaskOptions& opt);

// JSONL: one object per line with "prompt" (text, or TRL's conversational list of messages)
// and "answer" (string or number); "chat_template_kwargs" (an object) and "tools" (a list of
// JSON schemas) go with a conversational prompt; extra fields kept. Errors name the file and
// line.
std::vector<Example> load_jsonl(const std::string& path);

// The integer a completion states: the first integer in it, optionally signed. False if none.
bool parse_leading_int(const std::string& s, int64_t* out);

// Evaluates a Countdown expression (+ - * / and parentheses over integers, exact rational
// arithmetic); false if malformed or dividing by zero. `used` receives the numbers used.
bool eval_countdown(const std::string& expr, double* value, std::vector<int64_t>* used);

}  // namespace brl::tasks
