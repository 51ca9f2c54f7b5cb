// Tasks and rewards: hand-checked scores, deterministic disjoint sharding, JSONL errors, and
// the external reward command (including crashing and malformed ones).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <set>
#include <tuple>

#include "tasks/rewards.h"
#include "tasks/task.h"
#include "util/error.h"

using namespace brl::tasks;
namespace fs = std::filesystem;

namespace {
std::vector<double> score(RewardFn& f, const std::vector<Example>& ex, const std::vector<std::string>& c) {
  std::vector<const Example*> p;
  for (auto& e : ex) p.push_back(&e);
  return f.score(p, c);
}
std::string tmpfile(const std::string& name, const std::string& content) {
  fs::path p = fs::temp_directory_path() / ("brl_tasks_" + std::to_string(getpid()) + "_" + name);
  std::ofstream(p) << content;
  return p.string();
}
}  // namespace

TEST(Rewards, ExactAnswerAndFormat) {
  Example e{"12+30=", "42", {}};
  std::vector<Example> ex(5, e);
  std::vector<std::string> c = {"42", " 42 ", "42abc", "41", "x42"};
  ExactAnswerReward r;
  EXPECT_EQ(score(r, ex, c), (std::vector<double>{1, 1, 1, 0, 0}));
  IntegerFormatReward f;
  EXPECT_EQ(score(f, ex, c), (std::vector<double>{1, 1, 0, 1, 0}));
  Example neg{"3-5=", "-2", {}};
  EXPECT_EQ(score(r, {neg, neg}, {"-2", "2"}), (std::vector<double>{1, 0}));
}

TEST(Rewards, CountdownExpression) {
  double v;
  std::vector<int64_t> used;
  ASSERT_TRUE(eval_countdown("(3+5)*7", &v, &used));
  EXPECT_EQ(v, 56);
  EXPECT_EQ(used, (std::vector<int64_t>{3, 5, 7}));
  ASSERT_TRUE(eval_countdown("7/2*2", &v, &used));  // exact rationals
  EXPECT_EQ(v, 7);
  EXPECT_FALSE(eval_countdown("3/0", &v, &used));
  EXPECT_FALSE(eval_countdown("(3+5", &v, &used));
  EXPECT_FALSE(eval_countdown("3+", &v, &used));
  Example e{"use 3 5 7 to make 56:", "(3+5)*7", {{"numbers", {3, 5, 7}}, {"target", 56}}};
  CountdownReward r;
  EXPECT_EQ(score(r, {e, e, e, e}, {"(3+5)*7", "7*(5+3)", "(3+3+2)*7", "3*5*7"}), (std::vector<double>{1, 1, 0, 0}));
}

TEST(Tasks, CountdownTargetsAreSolvable) {
  TaskOptions o;
  o.name = "countdown";
  auto t = make_task(o);
  for (uint64_t i = 0; i < 50; ++i) {
    Example e = t->train_example(i, 0, 1);
    EXPECT_EQ(score(*t->rewards[0], {e}, {e.answer})[0], 1.0) << e.prompt << " " << e.answer;
  }
}

TEST(Tasks, ArithmeticShardsAreDeterministicAndDisjointFromEval) {
  TaskOptions o;
  auto a = make_task(o), b = make_task(o);
  std::set<std::string> eval;
  for (auto& e : a->eval_set()) eval.insert(e.prompt);
  EXPECT_EQ(eval.size(), 200u);
  for (uint64_t i = 0; i < 300; ++i) {
    for (int s = 0; s < 3; ++s) {
      Example x = a->train_example(i, s, 3), y = b->train_example(i, s, 3);
      EXPECT_EQ(x.prompt, y.prompt);  // same on every worker and every run
      EXPECT_FALSE(eval.count(x.prompt)) << x.prompt;
      int64_t av = x.extra["a"], bv = x.extra["b"];
      std::string op = x.extra["op"];
      EXPECT_EQ(x.answer, std::to_string(op == "+" ? av + bv : av - bv));
    }
  }
  // Shards draw different problems: the three shards' first 100 mostly differ.
  std::set<std::string> seen;
  for (uint64_t i = 0; i < 100; ++i)
    for (int s = 0; s < 3; ++s) seen.insert(a->train_example(i, s, 3).prompt);
  EXPECT_GT(seen.size(), 280u);
}

// The held-out set, the validation set (early stopping) and training share no problem, twins
// included: 3+5 and 5+3 (a*b, b*a) are one problem, and so are Countdown's numbers in another
// order with the same target. The keys here are computed independently of the task's code.
TEST(Tasks, HeldOutValidationAndTrainingShareNoProblemNorTwin) {
  auto arith_key = [](const Example& e) {
    int64_t a = e.extra["a"], b = e.extra["b"];
    std::string op = e.extra["op"];
    if (op != "-") std::tie(a, b) = std::pair{std::min(a, b), std::max(a, b)};
    return std::to_string(a) + op + std::to_string(b);
  };
  auto countdown_key = [](const Example& e) {
    std::vector<int64_t> n = e.extra["numbers"];
    std::sort(n.begin(), n.end());
    return e.extra["target"].dump() + ":" + nlohmann::json(n).dump();
  };
  for (std::string name : {"arithmetic", "countdown"}) {
    SCOPED_TRACE(name);
    TaskOptions o;
    o.name = name;
    o.operations = "+*";  // commutative: twins abound with operands in [0, 19]
    o.max_operand = 19;
    o.num_eval = 60;
    auto t = make_task(o);
    auto key = [&](const Example& e) { return name == "arithmetic" ? arith_key(e) : countdown_key(e); };
    std::set<std::string> eval, val;
    for (auto& e : t->eval_set()) eval.insert(key(e));
    for (auto& e : t->validation_set()) val.insert(key(e));
    EXPECT_EQ(t->validation_set().size(), 60u);
    EXPECT_EQ(val.size(), 60u);  // no twins within it either
    for (auto& k : val) EXPECT_FALSE(eval.count(k)) << k;
    int twins_of_held_out = 0;  // draws the old rule (same prompt only) would have let through
    std::set<std::string> eval_prompts;
    for (auto& e : t->eval_set()) eval_prompts.insert(e.prompt);
    for (uint64_t i = 0; i < 2000; ++i) {
      Example e = t->train_example(i, static_cast<int>(i % 3), 3);
      EXPECT_FALSE(eval.count(key(e))) << e.prompt;
      EXPECT_FALSE(val.count(key(e))) << e.prompt;
      if (name == "arithmetic") {
        Example twin = e;
        int64_t a = e.extra["a"], b = e.extra["b"];
        twin.prompt = std::to_string(b) + e.extra["op"].get<std::string>() + std::to_string(a) + "=";
        twins_of_held_out += eval_prompts.count(twin.prompt) > 0;
      }
    }
    EXPECT_EQ(twins_of_held_out, 0);
  }
}

TEST(Tasks, JsonlLoadShardAndErrors) {
  std::string good =
      tmpfile("good.jsonl", "{\"prompt\":\"a\",\"answer\":1,\"level\":3}\n\n{\"prompt\":\"b\",\"answer\":\"2\"}\n");
  auto ex = load_jsonl(good);
  ASSERT_EQ(ex.size(), 2u);
  EXPECT_EQ(ex[0].answer, "1");
  EXPECT_EQ(ex[0].extra["level"], 3);
  // load_jsonl's error for `path`, or "" where it loaded.
  auto error_of = [](const std::string& path) -> std::string {
    try {
      load_jsonl(path);
    } catch (const brl::UserError& e) {
      return e.what();
    }
    return "";
  };
  std::string bad = tmpfile("bad.jsonl", "{\"prompt\":\"a\"}\n{\"answer\":1}\n");
  EXPECT_NE(error_of(bad).find(bad + ":2: missing field \"prompt\""), std::string::npos) << error_of(bad);
  // TRL's conversational form: the messages kept in their key order, with chat_template_kwargs
  // and tools; the prompt goes to reward commands and `bucketrl dataset` as the list it was.
  std::string chat = tmpfile("chat.jsonl",
                             "{\"prompt\":[{\"role\":\"user\",\"content\":\"2+2?\",\"b\":1,\"a\":2}],\"answer\":4,"
                             "\"chat_template_kwargs\":{\"enable_thinking\":false},\"level\":1,"
                             "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"add\",\"parameters\":{}}}]}\n"
                             "{\"prompt\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":null}\n");
  auto c = load_jsonl(chat);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_TRUE(c[0].prompt.empty());
  EXPECT_EQ(c[0].messages.dump(), R"([{"role":"user","content":"2+2?","b":1,"a":2}])");
  EXPECT_EQ(c[0].chat_template_kwargs.dump(), R"({"enable_thinking":false})");
  EXPECT_EQ(c[0].tools.dump(), R"([{"type":"function","function":{"name":"add","parameters":{}}}])");
  EXPECT_EQ(c[0].extra.dump(), R"({"level":1})");
  EXPECT_TRUE(c[1].tools.is_null());  // null: no tools, as a dataset exported with a tools column writes it
  EXPECT_EQ(c[1].extra.dump(), "{}");
  EXPECT_EQ(c[0].prompt_json().dump(), R"([{"a":2,"b":1,"content":"2+2?","role":"user"}])");
  for (auto [text, msg] :
       {std::pair{"{\"prompt\":[]}", "\"prompt\" is an empty list of messages"},
        std::pair{"{\"prompt\":[{\"content\":\"x\"}]}", "message 0 of \"prompt\" is not a"},
        std::pair{"{\"prompt\":[\"x\"]}", "message 0 of \"prompt\" is not a"},
        std::pair{"{\"prompt\":[{\"role\":\"user\"}],\"chat_template_kwargs\":[1]}",
                  "\"chat_template_kwargs\" must be an object"},
        std::pair{"{\"prompt\":[{\"role\":\"user\"}],\"tools\":{\"a\":1}}", "\"tools\" must be a list of JSON schemas"},
        std::pair{"{\"prompt\":[{\"role\":\"user\"}],\"tools\":[1]}", "\"tools\" must be a list of JSON schemas"},
        std::pair{"{\"prompt\":\"2+2=\",\"tools\":[]}", "\"tools\" needs a conversational prompt"},
        std::pair{"{\"prompt\":7}", "missing field \"prompt\""}}) {
    std::string f = tmpfile("badchat.jsonl", std::string(text) + "\n");
    EXPECT_NE(error_of(f).find(f + ":1: " + msg), std::string::npos) << text << " -> " << error_of(f);
  }
  std::string lines;
  for (int i = 0; i < 40; ++i)
    lines += "{\"prompt\":\"p" + std::to_string(i) + "\",\"answer\":" + std::to_string(i) + "}\n";
  TaskOptions o;
  o.name = "jsonl";
  o.dataset_path = tmpfile("ds.jsonl", lines);
  auto t = make_task(o);
  EXPECT_EQ(t->eval_set().size(), 4u);        // every 10th held out
  ASSERT_EQ(t->validation_set().size(), 3u);  // a tenth of the 36 training examples, never held-out ones
  for (auto& v : t->validation_set())
    for (auto& e : t->eval_set()) EXPECT_NE(v.prompt, e.prompt);
  std::set<std::string> s0, s1;
  for (uint64_t i = 0; i < 18; ++i)
    s0.insert(t->train_example(i, 0, 2).prompt), s1.insert(t->train_example(i, 1, 2).prompt);
  EXPECT_EQ(s0.size(), 18u);
  EXPECT_EQ(s1.size(), 18u);
  for (auto& p : s0) EXPECT_FALSE(s1.count(p));
  EXPECT_THROW(load_jsonl("/nonexistent/x.jsonl"), brl::UserError);
}

// shuffle_dataset (TRL's default): every epoch visits each of a shard's examples exactly once,
// in an order of its own that two instances (two machines, a restart) agree on; off, file order.
TEST(Tasks, JsonlShufflesEachShardPerEpoch) {
  std::string lines;
  for (int i = 0; i < 70; ++i)
    lines += "{\"prompt\":\"p" + std::to_string(i) + "\",\"answer\":" + std::to_string(i) + "}\n";
  TaskOptions o;
  o.name = "jsonl";
  o.dataset_path = tmpfile("shuffle.jsonl", lines);
  o.eval_path = tmpfile("shuffle_eval.jsonl", "{\"prompt\":\"q\",\"answer\":1}\n");
  auto a = make_task(o), b = make_task(o);
  o.shuffle_dataset = false;
  auto plain = make_task(o);
  for (int shard = 0; shard < 3; ++shard) {
    SCOPED_TRACE("shard " + std::to_string(shard));
    const uint64_t n = (70 + 2 - shard) / 3;  // 24, 23, 23 examples
    std::vector<std::vector<std::string>> epochs(3);
    for (uint64_t i = 0; i < 3 * n; ++i) {
      const std::string p = a->train_example(i, shard, 3).prompt;
      EXPECT_EQ(p, b->train_example(i, shard, 3).prompt) << "two instances disagree at " << i;
      epochs[i / n].push_back(p);
      // Off: example k of the file belongs to shard k % 3, visited in file order.
      EXPECT_EQ(plain->train_example(i, shard, 3).prompt, "p" + std::to_string((i % n) * 3 + shard));
    }
    std::vector<std::string> file_order;
    for (uint64_t k = 0; k < n; ++k) file_order.push_back("p" + std::to_string(k * 3 + shard));
    for (auto& e : epochs) {
      EXPECT_NE(e, file_order);
      auto sorted = e, want = file_order;
      std::sort(sorted.begin(), sorted.end());
      std::sort(want.begin(), want.end());
      EXPECT_EQ(sorted, want) << "an epoch visits each of the shard's examples once";
    }
    EXPECT_NE(epochs[0], epochs[1]);
    EXPECT_NE(epochs[1], epochs[2]);
  }
}

TEST(Rewards, ExternalCommand) {
  Example e{"p", "7", {{"k", 1}}};
  // Reward = length of the completion, computed by a shell pipeline reading the JSON lines.
  std::string script = tmpfile(
      "rew.sh",
      "while IFS= read -r l; do case \"$l\" in *'\"completion\":\"abc\"'*) echo 3;; *) echo 0.5;; esac; done\n");
  CommandReward r("sh " + script);
  EXPECT_EQ(score(r, {e, e}, {"abc", "zz"}), (std::vector<double>{3, 0.5}));
  CommandReward crash("exit 3");
  try {
    score(crash, {e}, {"x"});
    FAIL();
  } catch (const brl::UserError& err) {
    EXPECT_NE(std::string(err.what()).find("exited with status 3"), std::string::npos) << err.what();
  }
  CommandReward garbage("cat >/dev/null; echo nan");
  EXPECT_THROW(score(garbage, {e}, {"x"}), brl::UserError);
  CommandReward too_few("cat >/dev/null; echo 1");
  EXPECT_THROW(score(too_few, {e, e}, {"x", "y"}), brl::UserError);
}

// A conversational example's line carries the prompt as its messages, its tools (to check a
// call against), and the completion as TRL hands it to reward functions: a list holding one
// assistant message.
TEST(Rewards, ExternalCommandSeesConversationsAsTrlDoes) {
  Example chat{"", "4"};
  chat.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "2+2?"}])");
  chat.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "add"}}])");
  Example text{"2+2=", "4"};
  const std::string seen = tmpfile("seen.jsonl", "");
  CommandReward r("cat > '" + seen + "'; echo 1; echo 0");
  EXPECT_EQ(score(r, {chat, text}, {"4 é", "5"}), (std::vector<double>{1, 0}));
  std::ifstream in(seen);
  std::string l0, l1;
  std::getline(in, l0), std::getline(in, l1);
  const auto a = nlohmann::json::parse(l0), b = nlohmann::json::parse(l1);
  EXPECT_EQ(a.at("prompt"), nlohmann::json::parse(R"([{"role": "user", "content": "2+2?"}])"));
  EXPECT_EQ(a.at("completion"), nlohmann::json::parse(R"([{"role": "assistant", "content": "4 é"}])"));
  EXPECT_EQ(a.at("tools"), nlohmann::json::parse(R"([{"type": "function", "function": {"name": "add"}}])"));
  EXPECT_FALSE(b.contains("tools"));
  EXPECT_EQ(b.at("prompt"), "2+2=");
  EXPECT_EQ(b.at("completion"), "5");
}
