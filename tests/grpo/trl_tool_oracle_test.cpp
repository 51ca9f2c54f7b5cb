// The tool-calling loop against TRL's own: GRPOTrainer._tool_call_loop and _get_tool_suffix_ids
// run live by tools/trl/tool_loop.py (.venv), and ours (grpo::run_tool_loop) on the same first
// turns, the same canned continuations and the same three tools (ours through the tool command
// protocol, served by the same Python functions); on the shared test data's Qwen3 tokenizer with
// TRL's Qwen3 templates, and on its Llama 3 tokenizer with TRL's Llama 3.1 template (each parsed
// with the response template TRL picks for it, ours told from the chat template). Equal: every
// completion's token ids, tool mask, log-probs, the parsed messages (assistant turns with their
// calls, arguments typed by the tools' schemas, tool results), the call and failure counts; with
// and without max_tool_calling_iterations, with budgets that cut continuations and roll back
// tool results, with chat_template_kwargs, and with the formats' tags spelled out by ordinary
// tokens (text, not markup). A missing oracle is a failure, not a skip.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <functional>
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

// A model family: its tokenizer and templates (tools/trl/tool_loop.py model DIR FAMILY), how its
// turns write a call and end, and the tags a row may ask to have spelled out.
struct Family {
  std::string name;
  std::function<std::string(const std::string&, const std::string&)> call;
  std::string end;
  std::vector<std::string> tags;
};

const std::vector<Family>& families() {
  static const std::vector<Family> f = {
      {"qwen3",
       [](const std::string& name, const std::string& args) {
         return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + args + "}\n</tool_call>";
       },
       "<|im_end|>",
       {"<tool_call>", "</tool_call>"}},
      // Llama 3.1's template ends a call's turn with <|eot_id|> as any turn.
      {"llama3",
       [](const std::string& name, const std::string& args) {
         return "{\"name\": \"" + name + "\", \"parameters\": " + args + "}";
       },
       "<|eot_id|>",
       {"<|eot_id|>"}},
  };
  return f;
}

// A completion's first turn and what the model says after each round of tool results.
struct Row {
  std::string first;
  std::vector<std::string> then;
};

std::vector<Row> rows(const Family& fam) {
  const auto& call = fam.call;
  const std::string& end = fam.end;
  return {
      {call("add", R"({"a": 3, "b": 4})") + end, {"It is 7." + end}},
      {"Just 5." + end, {}},
      {"<think>\nTwo tools.\n</think>\n\n" + call("add", R"({"a": 1, "b": 2})") + "\n" +
           call("echo", R"({"x": {"k": [1, true, null, "it's"], "u": "é 日"}})") + end,
       {call("fail", R"({"a": 1})") + end, "Sorry, the tool failed." + end}},
      {call("nope", "{}") + end, {"No such tool." + end}},
      {call("add", R"({"a": 3)") + end, {}},  // does not parse
      {call("add", R"({"a": 1})") + end, {[] {
         std::string s;
         for (int i = 0; i < 60; ++i) s += "word ";
         return s;
       }() + end}},
      {call("echo", R"({"x": {"s": ")" + std::string(600, 'x') + R"("}})") + end, {"Long." + end}},
      {call("add", R"({"a": 2, "b": 2})") + end, {call("add", R"({"a": 4, "b": 4})") + end, "Eight." + end}},
      {"Let me check.\n" + call("add", R"({"a": 5, "b": 5})"), {"Ten." + end}},  // no end of turn
      // Arguments as text, typed by the tools' schemas: "3" -> 3, a JSON object's text -> the object.
      {call("add", R"({"a": "3", "b": "4"})") + end, {call("echo", R"({"x": "{\"k\": 1}"})") + end, "Done." + end}},
      // The family's tags spelled out by ordinary tokens (SPELL below) are text, not markup.
      {"SPELL" + call("add", R"({"a": 1, "b": 1})") + end, {}},
  };
}

// A turn's tokens: "SPELL" at the start asks for the family's tags spelled out one character per
// token, not as the added tokens the tokenizer makes of them.
std::vector<int32_t> encode_turn(const tok::Tokenizer& tk, const Family& fam, std::string text) {
  if (text.rfind("SPELL", 0) != 0) return tk.encode(text);
  text = text.substr(5);
  std::vector<int32_t> out;
  for (size_t i = 0; i < text.size();) {
    size_t at = text.size(), len = 0;
    for (const auto& t : fam.tags)
      if (const size_t k = text.find(t, i); k < at) at = k, len = t.size();
    const auto plain = tk.encode(text.substr(i, at - i));
    out.insert(out.end(), plain.begin(), plain.end());
    if (at == text.size()) break;
    for (size_t k = at; k < at + len; ++k) {
      const auto one = tk.encode(text.substr(k, 1));
      out.insert(out.end(), one.begin(), one.end());
    }
    i = at + len;
  }
  return out;
}

bool ends_with_eos(const tok::Tokenizer& tk, const std::vector<int32_t>& t) {
  const auto eos = tk.eos_ids();
  return !t.empty() && std::find(eos.begin(), eos.end(), t.back()) != eos.end();
}

}  // namespace

void loop_as_trls(const Family& fam);

TEST(TrlToolOracle, ToolCallingLoopAsTrls) {
  ASSERT_TRUE(hf::python_installed());
  for (const Family& fam : families()) {
    SCOPED_TRACE(fam.name);
    loop_as_trls(fam);
  }
}

void loop_as_trls(const Family& fam) {
  TempDir dir;
  const std::string script = hf::source("tools/trl/tool_loop.py"), model = dir.str("model");
  ASSERT_TRUE(hf::run_command("BRL_TOKENIZERS='" BRL_TESTDATA_DIR "/tokenizers' '" BRL_PYTHON "' '" + script +
                              "' model '" + model + "' " + fam.name));
  const auto tk = tok::Tokenizer::from_dir(model);
  const tasks::ToolCommand tools("'" BRL_PYTHON "' '" + script + "' tools");
  // As transformers' get_json_schema writes the Python tools' (TRL types the calls' arguments with them).
  const ojson schemas = ojson::parse(R"([
      {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}},
      {"type": "function", "function": {"name": "fail", "parameters": {"type": "object", "properties": {
        "a": {"type": "integer"}}, "required": ["a"]}}},
      {"type": "function", "function": {"name": "echo", "parameters": {"type": "object", "properties": {
        "x": {"type": "object"}}, "required": ["x"]}}}])");
  const auto R = rows(fam);

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
      g.tokens = encode_turn(tk, fam, R[i].first);
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
    results.push_back(grpo::run_tool_loop(tk, grpo::TurnParser(tk, "auto"), tools, ex, prompts, comps, generate, o));
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
  // The typed row's text arguments came out typed, the spelled-out tags stayed text (TRL's answers).
  const json& first = trl[0]["completions"];
  EXPECT_EQ(first[9][0]["tool_calls"][0]["function"]["arguments"], json::parse(R"({"a": 3, "b": 4})"));
  EXPECT_EQ(first[9][2]["tool_calls"][0]["function"]["arguments"], json::parse(R"({"x": {"k": 1}})"));
  EXPECT_FALSE(first[10][0].contains("tool_calls"));
  EXPECT_NE(first[10][0]["content"].get<std::string>().find(fam.tags[0]), std::string::npos);
}
