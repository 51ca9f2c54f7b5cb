// Built-in tasks (arithmetic, Countdown), JSONL datasets, and make_task().
#include <algorithm>
#include <cmath>
#include <fstream>
#include <mutex>
#include <set>
#include <tuple>

#include "tasks/rewards.h"
#include "tasks/tools.h"
#include "tasks/task.h"
#include "util/error.h"
#include "util/rng.h"

namespace brl::tasks {

namespace {

// A tiny deterministic stream: same (seed, index) -> same numbers on every platform.
struct Stream {
  uint64_t s;
  Stream(uint64_t seed, uint64_t index) : s(splitmix64(seed ^ splitmix64(index))) {}
  uint64_t next() { return s = splitmix64(s); }
  int64_t uniform(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
};

// Procedural tasks draw problem number g from a stream. The held-out set and the validation set
// (for early stopping, e.g. pretraining) come from two other streams; training skips every
// problem of either, and validation skips the held-out ones, by problem_key: twins such as
// 3+5 and 5+3 are one problem.
class ProceduralTask : public Task {
 public:
  Example train_example(uint64_t i, int shard, int num_shards) const override {
    uint64_t g = i * static_cast<uint64_t>(num_shards) + static_cast<uint64_t>(shard);
    for (uint64_t attempt = 0; attempt < 100000; ++attempt) {
      Example e = make(Stream(seed_, g * 1000003ULL + attempt));
      const std::string k = problem_key(e);
      if (!eval_keys_.count(k) && !val_keys_.count(k)) return e;
    }
    throw UserError("task " + name() +
                        " has (almost) no problems left for training: the held-out and validation sets (" +
                        std::to_string(eval_.size()) + " each) hold nearly all of them",
                    "lower task.num_eval or draw from more problems (e.g. a larger task.max_operand)");
  }
  const std::vector<Example>& eval_set() const override { return eval_; }
  const std::vector<Example>& validation_set() const override { return val_; }

 protected:
  // Call from the derived constructor (make and problem_key are virtual).
  void build_sets(int n) {
    std::set<std::string> prompts;
    for (uint64_t k = 0; static_cast<int>(eval_.size()) < n && k < static_cast<uint64_t>(n) * 50; ++k) {
      Example e = make(Stream(~seed_, k));
      if (prompts.insert(e.prompt).second) eval_keys_.insert(problem_key(e)), eval_.push_back(e);
    }
    for (uint64_t k = 0; static_cast<int>(val_.size()) < n && k < static_cast<uint64_t>(n) * 50; ++k) {
      Example e = make(Stream(seed_ ^ 0x76616c6964617465ULL, k));
      const std::string key = problem_key(e);
      if (!eval_keys_.count(key) && val_keys_.insert(key).second) val_.push_back(e);
    }
  }
  virtual Example make(Stream s) const = 0;
  // Examples with the same key are the same problem (default: the same prompt).
  virtual std::string problem_key(const Example& e) const { return e.prompt; }
  uint64_t seed_ = 0;
  std::vector<Example> eval_, val_;
  std::set<std::string> eval_keys_, val_keys_;
};

class ArithmeticTask : public ProceduralTask {
 public:
  explicit ArithmeticTask(const TaskOptions& o) : max_(o.max_operand), ops_(o.operations) {
    if (max_ < 1) throw UserError("task.max_operand (" + std::to_string(max_) + ") must be >= 1");
    if (ops_.empty() || ops_.find_first_not_of("+-*") != std::string::npos)
      throw UserError("task.operations '" + ops_ + "' must be a non-empty subset of \"+-*\"");
    seed_ = static_cast<uint64_t>(o.seed);
    build_sets(o.num_eval);
  }
  std::string name() const override { return "arithmetic"; }

 private:
  // a+b and b+a (and a*b, b*a) are one problem.
  std::string problem_key(const Example& e) const override {
    int64_t a = e.extra["a"], b = e.extra["b"];
    const std::string op = e.extra["op"];
    if (op != "-" && b < a) std::swap(a, b);
    return std::to_string(a) + op + std::to_string(b);
  }
  Example make(Stream s) const override {
    int64_t a = s.uniform(0, max_), b = s.uniform(0, max_);
    char op = ops_[s.next() % ops_.size()];
    int64_t r = op == '+' ? a + b : op == '-' ? a - b : a * b;
    Example e;
    e.prompt = std::to_string(a) + op + std::to_string(b) + "=";
    e.answer = std::to_string(r);
    e.extra = {{"a", a}, {"b", b}, {"op", std::string(1, op)}};
    return e;
  }
  int max_;
  std::string ops_;
};

// Countdown: reach the target from the given numbers with + - * / (each number at most once).
// Targets come from a random expression over the numbers, so every problem is solvable.
class CountdownTask : public ProceduralTask {
 public:
  explicit CountdownTask(const TaskOptions& o) {
    seed_ = static_cast<uint64_t>(o.seed);
    build_sets(o.num_eval);
  }
  std::string name() const override { return "countdown"; }

 private:
  // The same numbers in another order with the same target are one problem.
  std::string problem_key(const Example& e) const override {
    std::vector<int64_t> n = e.extra["numbers"];
    std::sort(n.begin(), n.end());
    std::string k = std::to_string(static_cast<int64_t>(e.extra["target"])) + ":";
    for (auto x : n) k += std::to_string(x) + ",";
    return k;
  }
  Example make(Stream s) const override {
    std::vector<int64_t> nums;
    for (int k = 0; k < 3; ++k) nums.push_back(s.uniform(1, 12));
    // target = (n0 op n1) op n2 with ops from + - *, kept positive.
    const char ops[] = {'+', '-', '*'};
    int64_t t = 0;
    std::string expr;
    do {
      char o1 = ops[s.next() % 3], o2 = ops[s.next() % 3];
      auto ap = [](int64_t x, char o, int64_t y) { return o == '+' ? x + y : o == '-' ? x - y : x * y; };
      t = ap(ap(nums[0], o1, nums[1]), o2, nums[2]);
      expr = "(" + std::to_string(nums[0]) + o1 + std::to_string(nums[1]) + ")" + o2 + std::to_string(nums[2]);
    } while (t <= 0);
    Example e;
    e.prompt = "use " + std::to_string(nums[0]) + " " + std::to_string(nums[1]) + " " + std::to_string(nums[2]) +
               " to make " + std::to_string(t) + ":";
    e.answer = expr;
    e.extra = {{"numbers", nums}, {"target", t}};
    return e;
  }
};

class JsonlTask : public Task {
 public:
  explicit JsonlTask(const TaskOptions& o) {
    if (o.dataset_path.empty())
      throw UserError("task 'jsonl' needs task.dataset_path", "set dataset_path = \"train.jsonl\"");
    std::vector<Example> all = load_jsonl(o.dataset_path);
    shuffle_ = o.shuffle_dataset;
    seed_ = static_cast<uint64_t>(o.seed);
    if (!o.eval_path.empty()) {
      train_ = std::move(all);
      eval_ = load_jsonl(o.eval_path);
    } else {  // every 10th example is held out
      for (size_t i = 0; i < all.size(); ++i) (i % 10 == 9 ? eval_ : train_).push_back(all[i]);
    }
    if (train_.empty()) throw UserError(o.dataset_path + ": no training examples");
    // A file has no spare problems: validation is the first training examples (at most
    // num_eval, a tenth of them); stopping on it measures fit, never the held-out set.
    const size_t nv = std::min(static_cast<size_t>(std::max(0, o.num_eval)), std::max<size_t>(1, train_.size() / 10));
    val_.assign(train_.begin(), train_.begin() + static_cast<std::ptrdiff_t>(nv));
  }
  std::string name() const override { return "jsonl"; }
  // Round-robin over the shard's examples: example k belongs to shard k % num_shards; epoch
  // i / per_shard visits them in its own order (shuffle_dataset), else in file order.
  Example train_example(uint64_t i, int shard, int num_shards) const override {
    uint64_t per_shard = (train_.size() + num_shards - 1 - shard) / num_shards;
    if (per_shard == 0) return train_[static_cast<size_t>(i % train_.size())];
    uint64_t pos = i % per_shard;
    if (shuffle_) pos = shuffled(i / per_shard, shard, per_shard, pos);
    uint64_t k = pos * num_shards + shard;
    return train_[static_cast<size_t>(k)];
  }
  const std::vector<Example>& eval_set() const override { return eval_; }
  const std::vector<Example>& validation_set() const override { return val_; }

 private:
  std::vector<Example> train_, eval_, val_;
  bool shuffle_ = true;
  uint64_t seed_ = 0;
  // The shard position visited `pos`-th in epoch `epoch`: a Fisher-Yates shuffle of the n
  // positions from the epoch's own stream (the same on every machine and after a restart), kept
  // for the epoch being trained.
  mutable std::mutex mu_;
  mutable std::tuple<uint64_t, int, uint64_t> order_key_{~0ULL, -1, 0};
  mutable std::vector<uint64_t> order_;
  uint64_t shuffled(uint64_t epoch, int shard, uint64_t n, uint64_t pos) const {
    std::lock_guard lock(mu_);
    if (order_key_ != std::tuple{epoch, shard, n}) {
      order_ = permutation(n, Stream(seed_ ^ 0x73687566666c65ULL, epoch * 1000003ULL + static_cast<uint64_t>(shard)).s);
      order_key_ = {epoch, shard, n};
    }
    return order_[pos];
  }
};

}  // namespace

nlohmann::json Example::prompt_json() const {
  if (messages.is_null()) return prompt;
  return nlohmann::json::parse(messages.dump());
}

namespace {
// Shape only: the template decides what a message may hold.
void check_messages(const nlohmann::ordered_json& m, const std::string& where) {
  if (m.empty()) throw UserError(where + ": \"prompt\" is an empty list of messages");
  for (size_t i = 0; i < m.size(); ++i)
    if (!m[i].is_object() || !m[i].contains("role") || !m[i]["role"].is_string())
      throw UserError(
          where + ": message " + std::to_string(i) + " of \"prompt\" is not a {\"role\": ..., \"content\": ...} object",
          "TRL's conversational prompts are lists like [{\"role\": \"user\", \"content\": \"2+2?\"}]");
}
}  // namespace

std::vector<Example> load_jsonl(const std::string& path) {
  std::ifstream f(path);
  if (!f)
    throw UserError("cannot open dataset '" + path + "'",
                    "give a JSONL file with one {\"prompt\": ..., \"answer\": ...} per line");
  std::vector<Example> out;
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    std::string where = path + ":" + std::to_string(n);
    if (j.is_discarded() || !j.is_object()) throw UserError(where + ": not a JSON object");
    Example e;
    if (j.contains("prompt") && j["prompt"].is_array()) {  // TRL's conversational form, key order kept
      auto oj = nlohmann::ordered_json::parse(line);
      e.messages = oj["prompt"];
      check_messages(e.messages, where);
      if (oj.contains("chat_template_kwargs")) {
        e.chat_template_kwargs = oj["chat_template_kwargs"];
        if (!e.chat_template_kwargs.is_object())
          throw UserError(where + ": \"chat_template_kwargs\" must be an object, e.g. {\"enable_thinking\": false}");
        j.erase("chat_template_kwargs");
      }
      if (oj.contains("tools") && !oj["tools"].is_null()) {
        e.tools = oj["tools"];
        if (!e.tools.is_array() || !std::all_of(e.tools.begin(), e.tools.end(), [](auto& t) { return t.is_object(); }))
          throw UserError(where + ": \"tools\" must be a list of JSON schemas",
                          "e.g. [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
                          "\"parameters\": {...}}}]");
      }
      j.erase("tools");
    } else if (j.contains("tools") &&
               !j["tools"].is_null()) {  // a text prompt has no template to list them: they would be lost
      throw UserError(where +
                          ": \"tools\" needs a conversational prompt (a list of messages) for the chat "
                          "template to list them in",
                      "write \"prompt\" as [{\"role\": \"user\", \"content\": ...}]");
    } else if (!j.contains("prompt") || !j["prompt"].is_string()) {
      throw UserError(where + ": missing field \"prompt\" (a string, or a list of {\"role\", \"content\"} messages)");
    } else {
      e.prompt = j["prompt"].get<std::string>();
    }
    if (j.contains("answer")) {
      if (j["answer"].is_string()) e.answer = j["answer"].get<std::string>();
      else if (j["answer"].is_number()) e.answer = j["answer"].dump();
      else throw UserError(where + ": \"answer\" must be a string or a number");
    }
    j.erase("prompt");
    j.erase("answer");
    e.extra = j;
    out.push_back(std::move(e));
  }
  return out;
}

std::unique_ptr<Task> make_task(const TaskOptions& o) {
  std::unique_ptr<Task> t;
  if (o.name == "arithmetic") t = std::make_unique<ArithmeticTask>(o);
  else if (o.name == "countdown") t = std::make_unique<CountdownTask>(o);
  else if (o.name == "jsonl") t = std::make_unique<JsonlTask>(o);
  else throw UserError("unknown task '" + o.name + "'", "use one of arithmetic, countdown, jsonl");
  if (o.name == "countdown") t->rewards.push_back(std::make_shared<CountdownReward>());
  else t->rewards.push_back(std::make_shared<ExactAnswerReward>());
  if (o.format_reward) t->rewards.push_back(std::make_shared<IntegerFormatReward>());
  for (auto& c : o.reward_commands) t->rewards.push_back(std::make_shared<CommandReward>(c));
  if (!o.tool_command.empty()) t->tools = std::make_shared<ToolCommand>(o.tool_command, o.response_template);
  else if (o.response_template != "auto")
    throw UserError("task.response_template = \"" + o.response_template + "\" without task.tool_command",
                    "it says how tool calls are parsed: set tool_command too, or leave response_template out");
  return t;
}

}  // namespace brl::tasks
