// tool_loop_bench: the host work of one round of tool calling (grpo::run_tool_loop with the
// generation stubbed out): parsing every completion's turn after its prompt, running the calls
// (the tool command, one process), rendering the tool results' tokens, parsing the next turns.
// Reports medians, with each part timed alone; bench/tool_loop_compare.sh puts TRL's
// _tool_call_loop on the same cases beside it (--cases writes them in tools/trl/tool_loop.py's
// format).
//   tool_loop_bench --model DIR [--completions 64] [--repeats 7] [--cases FILE]
// DIR: a model folder with a tokenizer and a chat template that writes tool calls (tool_loop.py
// model DIR qwen3|llama3 makes one from the shared test data).
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "grpo/prompts.h"
#include "grpo/tool_loop.h"
#include "tasks/tools.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

using namespace brl;
using ojson = nlohmann::ordered_json;

int main(int argc, char** argv) {
  std::string model, cases_out;
  int n = 64, repeats = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--model")) model = argv[i + 1];
    else if (!std::strcmp(argv[i], "--completions")) n = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--repeats")) repeats = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--cases")) cases_out = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (model.empty()) {
    std::fprintf(stderr, "usage: tool_loop_bench --model DIR [--completions 64] [--repeats 7] [--cases FILE]\n");
    return 2;
  }
  const auto tk = tok::Tokenizer::from_dir(model);
  const bool llama = tk.chat_template()->source().find("<|eot_id|>") != std::string::npos;
  const std::string end = llama ? "<|eot_id|>" : "<|im_end|>";
  auto call = [&](int a, int b) {
    const std::string args = "{\"a\": " + std::to_string(a) + ", \"b\": " + std::to_string(b) + "}";
    return llama ? "{\"name\": \"add\", \"parameters\": " + args + "}"
                 : "<tool_call>\n{\"name\": \"add\", \"arguments\": " + args + "}\n</tool_call>";
  };
  // The tools tools/trl/tool_loop.py serves, as transformers' get_json_schema writes them.
  const ojson schemas = ojson::parse(R"([
      {"type": "function", "function": {"name": "add", "description": "Adds two integers.", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer", "description": "the first"},
        "b": {"type": "integer", "description": "the second"}}, "required": ["a", "b"]}}}])");
  std::vector<tasks::Example> examples(static_cast<size_t>(n));
  std::vector<std::vector<int32_t>> prompts, firsts, heads, thens;
  for (int i = 0; i < n; ++i) {
    auto& e = examples[static_cast<size_t>(i)];
    e.messages =
        ojson::array({{{"role", "user"}, {"content", "What is " + std::to_string(i) + " + 7? Use the tool."}}});
    e.tools = schemas;
    prompts.push_back(grpo::prompt_ids(tk, e, 1 << 20, ojson::object()));
    firsts.push_back(tk.encode("Let me add.\n" + call(i, 7) + end));
    thens.push_back(tk.encode("It is " + std::to_string(i + 7) + "." + end));
    heads.push_back(prompts.back());
    heads.back().insert(heads.back().end(), firsts.back().begin(), firsts.back().end());
  }
  std::vector<const tasks::Example*> ex;
  for (auto& e : examples) ex.push_back(&e);
  const tasks::ToolCommand tools("while read l; do echo 7; done");
  const grpo::TurnParser parser(tk, "auto");
  grpo::ToolLoopOptions o;
  o.max_completion_length = 256;
  o.max_model_len = 32768;
  auto fresh = [&] {
    std::vector<gen::Completion> comps(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      comps[static_cast<size_t>(i)].prompt_index = i;
      comps[static_cast<size_t>(i)].tokens = firsts[static_cast<size_t>(i)];
      comps[static_cast<size_t>(i)].logprobs.assign(firsts[static_cast<size_t>(i)].size(), -0.5f);
    }
    return comps;
  };
  auto generate = [&](const std::vector<std::vector<int32_t>>& prefixes, int64_t, int64_t) {
    std::vector<gen::Completion> out;
    for (const auto& p : prefixes) {
      size_t row = 0;
      while (!std::equal(heads[row].begin(), heads[row].end(), p.begin())) ++row;
      gen::Completion g;
      g.tokens = thens[row];
      g.logprobs.assign(g.tokens.size(), -0.01f);
      out.push_back(std::move(g));
    }
    return out;
  };
  std::vector<double> whole, parse, command, suffix;
  int64_t calls = 0;
  for (int r = 0; r < repeats; ++r) {
    auto comps = fresh();
    whole.push_back(bench::seconds_of(
        [&] { calls = grpo::run_tool_loop(tk, parser, tools, ex, prompts, comps, generate, o).calls; }));
    std::vector<ojson> turns;
    parse.push_back(bench::seconds_of([&] {
      for (int i = 0; i < n; ++i)
        turns.push_back(parser.parse(prompts[static_cast<size_t>(i)], firsts[static_cast<size_t>(i)], schemas));
    }));
    std::vector<tasks::ToolCall> tc;
    for (int i = 0; i < n; ++i)
      tc.push_back({ex[static_cast<size_t>(i)], turns[static_cast<size_t>(i)]["tool_calls"][0]});
    std::vector<tasks::ToolResult> results;
    command.push_back(bench::seconds_of([&] { results = tools.run(tc); }));
    suffix.push_back(bench::seconds_of([&] {
      for (int i = 0; i < n; ++i)
        grpo::tool_suffix_ids(tk, ojson::array({results[static_cast<size_t>(i)].message}), ojson::object());
    }));
  }
  std::printf("tool loop, %d completions x 1 round (%lld calls), prompts %zu tokens, medians of %d:\n", n,
              static_cast<long long>(calls), prompts[0].size(), repeats);
  std::printf("  whole round %.2f ms  (parse first turns %.2f ms, tool command %.2f ms, tool-result tokens %.2f ms)\n",
              1e3 * bench::median(whole), 1e3 * bench::median(parse), 1e3 * bench::median(command),
              1e3 * bench::median(suffix));
  std::printf("{\"whole_ms\": %.3f, \"parse_ms\": %.3f, \"command_ms\": %.3f, \"suffix_ms\": %.3f}\n",
              1e3 * bench::median(whole), 1e3 * bench::median(parse), 1e3 * bench::median(command),
              1e3 * bench::median(suffix));
  if (!cases_out.empty()) {
    nlohmann::json prompts_j = nlohmann::json::array(), logps = nlohmann::json::array(),
                   conts = nlohmann::json::object();
    for (int i = 0; i < n; ++i) {
      prompts_j.push_back(nlohmann::json::parse(examples[static_cast<size_t>(i)].messages.dump()));
      logps.push_back(std::vector<double>(firsts[static_cast<size_t>(i)].size(), -0.5));
      conts[std::to_string(i)] = nlohmann::json::array({thens[static_cast<size_t>(i)]});
    }
    const nlohmann::json c = {{"model_dir", model},
                              {"chat_template_kwargs", nlohmann::json::object()},
                              {"max_completion_length", o.max_completion_length},
                              {"max_tool_calling_iterations", nullptr},
                              {"max_position_embeddings", o.max_model_len},
                              {"prompts", prompts_j},
                              {"prompt_ids", prompts},
                              {"completion_ids", firsts},
                              {"logprobs", logps},
                              {"continuations", conts}};
    std::ofstream(cases_out) << nlohmann::json::array({c}).dump();
  }
  return 0;
}
