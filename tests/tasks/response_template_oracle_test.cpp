// tasks::ResponseTemplate against transformers 5.25's own parser (utils/chat_parsing, what
// tokenizer.parse_response runs) with TRL 1.16's response templates: every template TRL ships,
// loaded from TRL's own definitions (tools/trl/response_template.py prints them), on answers in
// each format cut at every character (a generation stops anywhere), with and without tools to
// type the arguments. Also our built-in "qwen3" and "llama3" (our descriptions of the formats)
// against TRL's templates of those names.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <map>

#include "../test_files.h"
#include "tasks/response_template.h"

using namespace brl;
using json = nlohmann::ordered_json;

namespace {

struct Family {
  const char* name;
  const char* prefix;  // the conversation before the answer (the template's start anchor in it)
  std::vector<std::string> answers;
};

const std::vector<Family>& families() {
  static const std::vector<Family> f = {
      {"qwen3",
       "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
       {"<think>\nhm\n</think>\n\nLet me add.\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 3, \"b\": "
        "\"4\"}}"
        "\n</tool_call><|im_end|>",
        "a <tool_call>{\"name\": \"f\", \"arguments\": {\"x\": \"1.5\"}}</tool_call> b <tool_call>{\"name\":\"g\"}"
        "</tool_call> c<|im_end|>\n",
        "x<think>y</think>z<think>q</think>w", "é\u00a0answer 7\u3000<|im_end|>",
        "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1</tool_call><tool_call>[1]</tool_call><|im_end|>"}},
      {"llama3",
       "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
       {"{\"name\": \"add\", \"parameters\": {\"a\": 3, \"b\": \"4\"}}<|eot_id|>", "The answer is 7.<|eot_id|>",
        "text {\"name\": \"f\", \"parameters\": {\"x\": \"2\"}}<|eot_id|>"}},
      {"qwen3_5",
       "<|im_start|>assistant\n",
       {"<think>\nplan\n</think>\n\nok\n<tool_call>\n<function=add>\n<parameter=a>\n3\n</parameter>\n<parameter=b>"
        "\nfour\n</parameter>\n</function>\n</tool_call><|im_end|>"}},
      {"glm4moe",
       "<|assistant|>",
       {"<think>t</think>hello<tool_call>add\n<arg_key>a</arg_key>\n<arg_value>3</arg_value>\n<arg_key>b</arg_key>"
        "\n<arg_value>[1,2]</arg_value></tool_call><|user|>"}},
      {"gptoss",
       "<|start|>assistant",
       {"<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>Hi<|return|>",
        "<|channel|>analysis<|message|>x<|end|><|start|>assistant to=functions.add<|channel|>commentary json"
        "<|message|>{\"a\": \"1\"}<|call|>"}},
      {"lfm2_2_5",
       "<|im_start|>assistant\n",
       {"<think>t</think><|tool_call_start|>[add(a=1, b='x'), ping(), f(x=[1, {\"k\": 2}])]<|tool_call_end|>done"
        "<|im_end|>"}},
      {"nemotron_3",
       "<|im_start|>assistant\n<think>\n",
       {"reason</think>answer<tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>"
        "<|im_end|>"}},
      {"gemma4",
       "<|turn>model\n",
       {"<|channel>thought\nhm<channel|>Sure<|tool_call>call:add{a:1,b:<|\"|>x, y<|\"|>}<tool_call|><turn|>"}},
      {"deepseek_r1_distill", "<｜Assistant｜><think>\n", {"think</think>answer<｜end▁of▁sentence｜>"}},
  };
  return f;
}

// The tools the answers call: typed arguments (integer, a union, a number) and one without a schema.
const json& tools() {
  static const json t = json::parse(R"([
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
      "a": {"type": "integer"}, "b": {"type": ["integer", "string"]}}}}},
    {"type": "function", "function": {"name": "f", "parameters": {"properties": {"x": {"type": "number"}}}}},
    {"type": "function", "function": {"name": "ping"}}])");
  return t;
}

// Every cut of `s` at a character boundary, the whole of it included.
std::vector<std::string> cuts(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) out.push_back(s.substr(0, i));
  return out;
}

}  // namespace

TEST(ResponseTemplateOracle, ParsesAsTransformersWithTrlsTemplates) {
  ASSERT_TRUE(std::filesystem::exists(BRL_PYTHON)) << "no Python at " BRL_PYTHON ": run scripts/setup.sh --test";
  json spec = {{"templates", json::array()}, {"cases", json::array()}};
  for (const auto& f : families()) {
    spec["templates"].push_back(f.name);
    for (const auto& a : f.answers)
      for (const auto& text : cuts(a))
        for (bool with_tools : {false, true})
          spec["cases"].push_back(
              {{"template", f.name}, {"prefix", f.prefix}, {"text", text}, {"tools", with_tools ? tools() : json()}});
  }
  // The whole answer without its prefix too (then the anchors are not seen).
  for (const auto& f : families())
    spec["cases"].push_back({{"template", f.name}, {"prefix", ""}, {"text", f.answers[0]}, {"tools", tools()}});
  test::TempDir dir;
  test::write_file(dir.str("cases.json"), spec.dump());
  const std::string cmd = "'" BRL_PYTHON "' '" BRL_SOURCE_DIR "/tools/trl/response_template.py' < '" +
                          dir.str("cases.json") + "' > '" + dir.str("answers.json") + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n  transformers or TRL missing in .venv? scripts/setup.sh --test";
  const json answers = json::parse(test::read_file(dir.str("answers.json")));
  std::map<std::string, tasks::ResponseTemplate> trl;
  for (const auto& [name, t] : answers["templates"].items())
    trl.emplace(name, tasks::ResponseTemplate::from_json(t, name));
  const auto ours = tasks::ResponseTemplate::builtin_names();
  size_t compared = 0, failures = 0, errors = 0;
  for (size_t i = 0; i < spec["cases"].size(); ++i) {
    const json& c = spec["cases"][i];
    const json& want = answers["results"][i];
    const std::string name = c["template"].get<std::string>();
    std::vector<const tasks::ResponseTemplate*> under = {&trl.at(name)};
    tasks::ResponseTemplate builtin = trl.at(name);
    if (std::find(ours.begin(), ours.end(), name) != ours.end()) {
      builtin = tasks::ResponseTemplate::builtin(name);
      under.push_back(&builtin);
    }
    for (const auto* t : under) {
      json got;
      try {
        got = t->parse(c["prefix"].get<std::string>(), c["text"].get<std::string>(), c["tools"]);
      } catch (const tasks::ResponseParseError&) {
        got = {{"error", "ValueError"}};
      }
      ++compared;
      errors += want.contains("error");
      // Key order aside (Python's dicts compare without it).
      if (nlohmann::json::parse(got.dump()) != nlohmann::json::parse(want.dump()) && ++failures <= 20)
        ADD_FAILURE() << name << (t == &builtin ? " (ours)" : " (TRL's)") << " on " << json(c["text"]).dump()
                      << (c["tools"].is_null() ? "" : " with tools") << "\n  transformers: " << want.dump()
                      << "\n  ours:         " << got.dump();
    }
  }
  EXPECT_EQ(failures, 0u) << "of " << compared;
  // The corpus reaches both outcomes: parses, and the texts transformers refuses.
  EXPECT_GT(errors, 100u);
  EXPECT_GT(compared, 2000u);
  std::printf("%zu parses equal to transformers' (%zu of them refusals)\n", compared, errors);
}
