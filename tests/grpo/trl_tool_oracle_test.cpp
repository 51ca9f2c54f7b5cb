// The tool-calling loop against TRL's own: GRPOTrainer._tool_call_loop and _get_tool_suffix_ids
// run live by tools/trl/tool_loop.py (.venv) on the shared test data's Qwen3 tokenizer with TRL's
// Qwen3 templates, and ours (grpo::run_tool_loop) on the same first turns, the same canned
// continuations and the same three tools (ours through the tool command protocol, served by the
// same Python functions). Equal: every completion's token ids, tool mask, log-probs, the parsed
// messages (assistant turns with their calls, tool results), the call and failure counts; with
// and without max_tool_calling_iterations, with budgets that cut continuations and roll back
// tool results, and with chat_template_kwargs. A missing oracle is a failure, not a skip.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <map>
#include <string>
#include <vector>

#include "../model/test_util.h"
#include "grpo/prompts.h"
#include "grpo/tool_loop.h"
#include "tokenizer/tokenizer.h"

using namespace brl;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using test::TempDir;
namespace hf = test::hf;

namespace {

std::string call(const std::string& name, const std::string& args) {
  return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + args + "}\n</tool_call>";
}

// A completion's first turn and what the model says after each round of tool results.
struct Row {
  std::string first;
  std::vector<std::string> then;
};

std::vector<Row> rows() {
  const std::string end = "<|im_end|>";
  return {
      {call("add", R"({"a": 3, "b": 4})") + end, {"It is 7." + end}},
      {"Just 5." + end, {}},
      {"<think>\nTwo tools.\n</think>\n\n" + call("add", R"({"a": 1, "b": 2})") + "\n" +
           call("echo", R"({"x": {"k": [1, true, null, "it's"], "u": "é 日"}})") + end,
       {call("fail", R"({"a": 1})") + end, "Sorry, the tool failed." + end}},
      {call("nope", "{}") + end, {"No such tool." + end}},
      {"<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 3</tool_call>" + end, {}},
      {call("add", R"({"a": 1})") + end, {[] {
         std::string s;
         for (int i = 0; i < 60; ++i) s += "word ";
         return s;
       }() + end}},
      {call("echo", R"({"x": {"s": ")" + std::string(600, 'x') + R"("}})") + end, {"Long." + end}},
      {call("add", R"({"a": 2, "b": 2})") + end, {call("add", R"({"a": 4, "b": 4})") + end, "Eight." + end}},
      {"Let me check.\n" + call("add", R"({"a": 5, "b": 5})"), {"Ten." + end}},  // no end of turn
  };
}

bool ends_with_eos(const tok::Tokenizer& tk, const std::vector<int32_t>& t) {
  const auto eos = tk.eos_ids();
  return !t.empty() && std::find(eos.begin(), eos.end(), t.back()) != eos.end();
}

}  // namespace

TEST(TrlToolOracle, ToolCallingLoopAsTrls) {
  ASSERT_TRUE(hf::python_installed());
  TempDir dir;
  const std::string script = hf::source("tools/trl/tool_loop.py"), model = dir.str("model");
  ASSERT_TRUE(hf::run_command("BRL_QWEN3_TOKENIZER='" BRL_TESTDATA_DIR "/tokenizers/qwen3' '" BRL_PYTHON "' '" +
                              script + "' model '" + model + "'"));
  const auto tk = tok::Tokenizer::from_dir(model);
  const tasks::ToolCommand tools("'" BRL_PYTHON "' '" + script + "' tools");
  const ojson schemas = ojson::parse(R"([{"type": "function", "function": {"name": "add"}},
      {"type": "function", "function": {"name": "fail"}}, {"type": "function", "function": {"name": "echo"}}])");
  const auto R = rows();

  struct Config {
    int64_t max_completion_length;
    std::optional<int64_t> max_iterations;
    ojson kwargs;
  };
  const std::vector<Config> configs = {{200, std::nullopt, ojson::object()},
                                       {200, 1, ojson::object()},
                                       {60, std::nullopt, {{"enable_thinking", false}}}};
  json cases = json::array();
  std::vector<std::vector<gen::Completion>> ours;
  std::vector<grpo::ToolLoopResult> results;
  for (const auto& c : configs) {
    std::vector<tasks::Example> examples(R.size());
    std::vector<std::vector<int32_t>> prompts;
    std::vector<gen::Completion> comps;
    json prompts_j = json::array(), firsts = json::array(), logps = json::array(), conts = json::object();
    std::vector<std::vector<int32_t>> heads;  // prompt + first turn: how a prefix names its row
    std::vector<std::vector<std::vector<int32_t>>> then(R.size());
    for (size_t i = 0; i < R.size(); ++i) {
      auto& e = examples[i];
      e.messages = ojson::array({{{"role", "user"}, {"content", "Row " + std::to_string(i) + ": compute."}}});
      e.tools = schemas;
      prompts.push_back(grpo::prompt_ids(tk, e, 100000, c.kwargs));
      gen::Completion g;
      g.prompt_index = static_cast<int64_t>(i);
      g.tokens = tk.encode(R[i].first);
      for (size_t k = 0; k < g.tokens.size(); ++k) g.logprobs.push_back(-0.25f - 0.125f * static_cast<float>(k % 4));
      g.finish = ends_with_eos(tk, g.tokens) ? gen::FinishReason::kStop : gen::FinishReason::kLength;
      auto head = prompts.back();
      head.insert(head.end(), g.tokens.begin(), g.tokens.end());
      heads.push_back(head);
      prompts_j.push_back(json::parse(e.messages.dump()));
      firsts.push_back(g.tokens);
      logps.push_back(std::vector<double>(g.logprobs.begin(), g.logprobs.end()));
      json cj = json::array();
      for (const auto& t : R[i].then) then[i].push_back(tk.encode(t)), cj.push_back(then[i].back());
      conts[std::to_string(i)] = cj;
      comps.push_back(std::move(g));
    }
    std::vector<const tasks::Example*> ex;
    for (auto& e : examples) ex.push_back(&e);
    std::map<size_t, size_t> round_of;  // per row: continuations used
    auto generate = [&](const std::vector<std::vector<int32_t>>& prefixes, int64_t max_new, int64_t) {
      std::vector<gen::Completion> out;
      for (const auto& p : prefixes) {
        size_t row = 0;
        while (row < heads.size() && !std::equal(heads[row].begin(), heads[row].end(), p.begin())) ++row;
        EXPECT_LT(row, heads.size());
        gen::Completion g;
        g.tokens = then[row].at(round_of[row]++);
        if (static_cast<int64_t>(g.tokens.size()) > max_new) g.tokens.resize(static_cast<size_t>(max_new));
        for (size_t k = 0; k < g.tokens.size(); ++k) g.logprobs.push_back(-0.01f * static_cast<float>(k + 1));
        out.push_back(std::move(g));
      }
      return out;
    };
    grpo::ToolLoopOptions o;
    o.max_completion_length = c.max_completion_length;
    if (c.max_iterations) o.max_iterations = *c.max_iterations;
    o.max_model_len = 32768;
    o.chat_template_kwargs = c.kwargs;
    results.push_back(grpo::run_tool_loop(tk, tools, ex, prompts, comps, generate, o));
    ours.push_back(comps);
    cases.push_back({{"model_dir", model},
                     {"chat_template_kwargs", json::parse(c.kwargs.dump())},
                     {"max_completion_length", c.max_completion_length},
                     {"max_tool_calling_iterations", c.max_iterations ? json(*c.max_iterations) : json(nullptr)},
                     {"max_position_embeddings", 32768},
                     {"prompts", prompts_j},
                     {"prompt_ids", prompts},
                     {"completion_ids", firsts},
                     {"logprobs", logps},
                     {"continuations", conts}});
  }
  test::write_file(dir.str("cases.json"), cases.dump());
  ASSERT_TRUE(hf::run_command("'" BRL_PYTHON "' '" + script + "' < '" + dir.str("cases.json") + "' > '" +
                              dir.str("trl.json") + "'"));
  const json trl = json::parse(test::read_file(dir.str("trl.json")));
  ASSERT_EQ(trl.size(), configs.size());
  int64_t rolled_back = 0, cut = 0, capped = 0;
  for (size_t c = 0; c < configs.size(); ++c) {
    const json& t = trl[c];
    EXPECT_EQ(results[c].calls, t["tool_call_count"].get<int64_t>()) << "config " << c;
    EXPECT_EQ(results[c].failures, t["tool_failure_count"].get<int64_t>()) << "config " << c;
    for (size_t i = 0; i < R.size(); ++i) {
      const auto& g = ours[c][i];
      const std::string at = "config " + std::to_string(c) + " row " + std::to_string(i);
      EXPECT_EQ(g.tokens, t["completion_ids"][i].get<std::vector<int32_t>>()) << at;
      std::vector<int> mask(g.tokens.size(), 1);
      if (!g.tool_mask.empty()) mask.assign(g.tool_mask.begin(), g.tool_mask.end());
      EXPECT_EQ(mask, t["tool_mask"][i].get<std::vector<int>>()) << at;
      const auto lp = t["logprobs"][i].get<std::vector<double>>();
      ASSERT_EQ(g.logprobs.size(), lp.size()) << at;
      for (size_t k = 0; k < lp.size(); ++k) EXPECT_NEAR(g.logprobs[k], lp[k], 1e-7) << at << " token " << k;
      EXPECT_EQ(json::parse(results[c].messages[i].dump()), t["completions"][i]) << at;
      EXPECT_EQ(g.finish == gen::FinishReason::kStop, ends_with_eos(tk, g.tokens)) << at;
      // What the cases are for: results rolled back (called, no tool message kept), cut
      // continuations, a call left for want of rounds.
      const auto& m = t["completions"][i];
      rolled_back += m.size() == 1 && m[0].contains("tool_calls") && g.tool_mask.empty();
      cut += g.finish == gen::FinishReason::kLength && !g.tool_mask.empty();
      capped += m.size() > 1 && m.back().contains("tool_calls");
    }
  }
  EXPECT_GT(rolled_back, 0);
  EXPECT_GT(cut, 0);
  EXPECT_GT(capped, 0);
}
