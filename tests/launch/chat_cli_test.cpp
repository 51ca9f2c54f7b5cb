// The commands that show what a model is given for a conversational prompt.
// `bucketrl generate --chat`: the prompt goes to the model as a user message (after --system's)
// through the folder's chat template with the generation prompt and --chat-template-kwargs,
// encoded without special tokens, as TRL renders a conversational prompt. `bucketrl dataset
// --render`: each example's rendered text and ids, with grpo.chat_template_kwargs under the
// example's own. The expected text: Qwen3's published turn format (<|im_start|>role\ncontent
// <|im_end|>\n, then the assistant's header; with enable_thinking false an empty think block),
// its ids from the tokenizer. A folder without a template, and chat options without --chat,
// stop the command naming the fix.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <sstream>

#include "async_util.h"
#include "../grpo/tool_model.h"
#include "../model/test_util.h"
#include "model/loader.h"
#include "tokenizer/tokenizer.h"

using namespace brl;
using nlohmann::json;

namespace {

// A random 1-layer Qwen3-shaped model over the real Qwen3 tokenizer (its vocabulary, its
// template in tokenizer_config.json); with_template false drops the template.
std::string qwen3_folder(test::TempDir& tmp, bool with_template) {
  const std::string src = std::string(BRL_TESTDATA_DIR) + "/tokenizers/qwen3/", dir = tmp.str("qwen3");
  auto c = test::tiny_config("qwen3");
  c.vocab_size = 151936;
  c.hidden_size = 16;
  c.head_dim = 8;
  c.num_hidden_layers = 1;
  c.intermediate_size = 16;
  c.eos_token_ids = {151645};
  model::write_random_checkpoint(c, 3, dir);
  test::write_file(dir + "/tokenizer.json", test::read_file(src + "tokenizer.json"));
  json tc = json::parse(test::read_file(src + "tokenizer_config.json"));
  if (!with_template) tc.erase("chat_template");
  test::write_file(dir + "/tokenizer_config.json", tc.dump());
  return dir;
}

struct CmdOutput {
  int status;
  std::string out;
};
CmdOutput bucketrl(test::TempDir& tmp, std::vector<std::string> args) {
  static int runs = 0;  // a log per run: run_to_end appends
  const std::string log = tmp.str(args[0] + std::to_string(runs++) + ".log");
  int st = test::run_to_end(args, log);
  return {st, test::read_text(log)};
}
CmdOutput generate(test::TempDir& tmp, std::vector<std::string> args) {
  args.insert(args.begin(), "generate");
  return bucketrl(tmp, args);
}
bool ok(const CmdOutput& r) { return WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0; }
// The output's JSON lines (the log's lines are not JSON).
std::vector<json> json_lines(const std::string& out) {
  std::vector<json> v;
  std::istringstream in(out);
  for (std::string l; std::getline(in, l);)
    if (!l.empty() && l[0] == '{') v.push_back(json::parse(l));
  return v;
}
const std::string kQwen3User = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n";
const std::string kNoThinking = "<think>\n\n</think>\n\n";

}  // namespace

TEST(GenerateCli, ChatRendersTheUserMessageWithTheModelsTemplate) {
  test::TempDir tmp;
  const std::string dir = qwen3_folder(tmp, true);
  const auto tk = tok::Tokenizer::from_dir(dir);
  const std::string turns = "<|im_start|>system\nBe brief.<|im_end|>\n" + kQwen3User;
  struct Case {
    std::vector<std::string> extra;
    std::string text;
  };
  for (const Case& c : std::vector<Case>{
           {{}, turns},
           {{"--chat-template-kwargs", R"({"enable_thinking": false})"}, turns + kNoThinking},
       }) {
    std::vector<std::string> args = {
        "--model",       dir, "--chat",           "--system", "Be brief.", "--prompt", "What is 2+2?",
        "--temperature", "0", "--max-new-tokens", "2",        "--json"};
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    const CmdOutput r = generate(tmp, args);
    ASSERT_TRUE(ok(r)) << r.out;
    const auto lines = json_lines(r.out);
    ASSERT_EQ(lines.size(), 1u) << r.out;
    const json& j = lines[0];
    EXPECT_EQ(j.at("prompt_token_ids").get<std::vector<int32_t>>(), tk.encode(c.text, /*add_special_tokens=*/false))
        << c.text;
    EXPECT_EQ(j.at("token_ids").size(), 2u);
  }
  // Without --json the reply alone is printed (the prompt is not echoed as for a text prompt).
  const CmdOutput plain = generate(
      tmp, {"--model", dir, "--chat", "--prompt", "What is 2+2?", "--temperature", "0", "--max-new-tokens", "2"});
  ASSERT_TRUE(ok(plain)) << plain.out;
  EXPECT_EQ(plain.out.find("What is 2+2?"), std::string::npos) << plain.out;
}

TEST(GenerateCli, ChatOptionsNeedATemplateAndChat) {
  test::TempDir tmp;
  const std::string dir = qwen3_folder(tmp, false);
  struct Case {
    std::vector<std::string> args;
    std::string want;
  };
  for (const Case& c : std::vector<Case>{
           {{"--chat"}, "has no chat template"},
           {{"--chat", "--chat-template-kwargs", "[1]"}, "--chat-template-kwargs '[1]' is not a JSON object"},
           {{"--system", "x"}, "--system requires --chat"},
           {{"--chat-template-kwargs", "{}"}, "--chat-template-kwargs requires --chat"},
           {{"--chat", "--add-special-tokens"}, "--chat excludes --add-special-tokens"},
       }) {
    std::vector<std::string> args = {"--model", dir, "--prompt", "hi", "--max-new-tokens", "1"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const CmdOutput r = generate(tmp, args);
    EXPECT_FALSE(ok(r)) << r.out;
    EXPECT_NE(r.out.find(c.want), std::string::npos) << r.out;
  }
  // Text prompts still work on a folder without a template.
  EXPECT_TRUE(ok(generate(tmp, {"--model", dir, "--prompt", "hi", "--max-new-tokens", "1"})));
}

// --tools shows the tools to the model and prints its reply as parsed messages; --tool-command
// runs its calls and lets it generate on, as a worker's tool loop does (tests/grpo/tool_model.h's
// model calls `add` after every generation prompt): two rounds with
// --max-tool-calling-iterations 2, the command's results in the conversation, their tokens
// out of the mask. The options need --chat / --tools; bad tools files name the fix.
TEST(GenerateCli, ToolsAndToolCommandRunTheCalls) {
  test::TempDir tmp;
  const std::string dir = tmp.str("caller");
  test::write_tool_tokenizer(dir);
  auto cfg = test::tiny_config("llama");
  cfg.vocab_size = 258;
  cfg.eos_token_ids = {256};
  auto m = model::random_model(cfg, 5, 0.2);
  test::make_tool_caller(m);
  model::save_model(m, dir);
  test::write_file(tmp.str("tools.json"), R"([{"type": "function", "function": {"name": "add", "parameters":
      {"type": "object", "properties": {"a": {"type": "integer"}}}}}])");
  const std::vector<std::string> base = {
      "--model",       dir, "--chat",           "--prompt", "1+1", "--tools", tmp.str("tools.json"),
      "--temperature", "0", "--max-new-tokens", "32"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return generate(tmp, args);
  };
  const json call = json::parse(R"({"role": "assistant", "content": "", "tool_calls": [{"type": "function",
      "function": {"name": "add", "arguments": {"a": 1}}}]})");
  // Parsed, not run.
  const CmdOutput parsed = with({"--json"});
  ASSERT_TRUE(ok(parsed)) << parsed.out;
  auto lines = json_lines(parsed.out);
  ASSERT_EQ(lines.size(), 1u) << parsed.out;
  EXPECT_EQ(lines[0]["messages"], json::array({call})) << parsed.out;
  // Run, two rounds.
  const CmdOutput ran =
      with({"--json", "--tool-command", "cat > '" + tmp.str("calls.jsonl") + "'; echo 2; echo '\"ok\"' >/dev/null",
            "--max-tool-calling-iterations", "1"});
  ASSERT_TRUE(ok(ran)) << ran.out;
  lines = json_lines(ran.out);
  ASSERT_EQ(lines.size(), 1u) << ran.out;
  const json result = json::parse(R"({"role": "tool", "name": "add", "content": "2"})");
  EXPECT_EQ(lines[0]["messages"], json::array({call, result, call})) << ran.out;
  EXPECT_EQ(test::read_file(tmp.str("calls.jsonl")), "{\"arguments\":{\"a\":1},\"name\":\"add\"}\n");
  const auto mask = lines[0]["tool_mask"].get<std::vector<int>>();
  EXPECT_EQ(std::count(mask.begin(), mask.end(), 0), 6) << lines[0].dump();  // "T:2<eos>A:" between the turns
  // Plain output: the conversation for reading.
  const CmdOutput plain =
      with({"--tool-command", "while read l; do echo 2; done", "--max-tool-calling-iterations", "2"});
  ASSERT_TRUE(ok(plain)) << plain.out;
  EXPECT_NE(plain.out.find("  -> add({\"a\":1})\ntool add: 2\nassistant: \n  -> add({\"a\":1})\ntool add: 2"),
            std::string::npos)
      << plain.out;
  // Option errors.
  test::write_file(tmp.str("bad.json"), "{}");
  struct Case {
    std::vector<std::string> args;
    std::string want;
  };
  for (const Case& c : std::vector<Case>{
           {{"--tools", tmp.str("tools.json")}, "--tools requires --chat"},
           {{"--chat", "--tool-command", "cat"}, "--tool-command requires --tools"},
           {{"--chat", "--tools", tmp.str("bad.json")}, "not a JSON list of tool schemas"},
           {{"--chat", "--tools", tmp.str("tools.json"), "--response-template", "nope"}, "not a built-in name"},
       }) {
    std::vector<std::string> args = {"--model", dir, "--prompt", "hi", "--max-new-tokens", "1"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const CmdOutput r = generate(tmp, args);
    EXPECT_FALSE(ok(r)) << r.out;
    EXPECT_NE(r.out.find(c.want), std::string::npos) << r.out;
  }
}

TEST(DatasetCli, RenderShowsThePromptsAsWorkersEncodeThem) {
  test::TempDir tmp;
  const std::string dir = qwen3_folder(tmp, true);
  const auto tk = tok::Tokenizer::from_dir(dir);
  // The run's kwargs leave thinking off; the second example turns it back on for itself.
  const json msgs = json::parse(R"([{"role": "user", "content": "What is 2+2?"}])");
  test::write_file(
      tmp.str("eval.jsonl"),
      json{{"prompt", msgs}, {"answer", "4"}}.dump() + "\n" +
          json{{"prompt", msgs}, {"answer", "4"}, {"chat_template_kwargs", {{"enable_thinking", true}}}}.dump() + "\n" +
          json{{"prompt", "2+2="}, {"answer", "4"}}.dump() + "\n");
  const std::vector<std::string> task = {"--set",   "task.name=jsonl",
                                         "--set",   "task.dataset_path=" + tmp.str("eval.jsonl"),
                                         "--set",   "task.eval_path=" + tmp.str("eval.jsonl"),
                                         "--split", "eval"};
  std::vector<std::string> args = {"dataset", "--render",
                                   "--set",   "model.path=" + dir,
                                   "--set",   R"(chat_template_kwargs={"enable_thinking": false})"};
  args.insert(args.end(), task.begin(), task.end());
  const CmdOutput r = bucketrl(tmp, args);
  ASSERT_TRUE(ok(r)) << r.out;
  const auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  const std::vector<std::string> text = {kQwen3User + kNoThinking, kQwen3User, "2+2="};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(lines[i].at("prompt_text"), text[i]) << i;
    // Text prompts keep the tokenizer's special tokens; rendered ones get them from the template.
    EXPECT_EQ(lines[i].at("prompt_ids").get<std::vector<int32_t>>(), tk.encode(text[i], /*add_special_tokens=*/i == 2))
        << i;
  }
  // Without a model there is nothing to render with.
  args = {"dataset", "--render"};
  args.insert(args.end(), task.begin(), task.end());
  const CmdOutput none = bucketrl(tmp, args);
  EXPECT_FALSE(ok(none));
  EXPECT_NE(none.out.find("no model to render the prompts for"), std::string::npos) << none.out;
}
