// Tool calling's torch-free parts: the assistant turn parsed as TRL parses it with transformers'
// response templates (the parser itself against transformers' in
// response_template_oracle_test.cpp), Python's str() of a tool's result, and the tool command's
// protocol. The whole loop against TRL's own runs in tests/grpo/trl_tool_oracle_test.cpp.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../test_files.h"
#include "tasks/tools.h"

using namespace brl;
using namespace brl::tasks;
using json = nlohmann::ordered_json;

// Expected: transformers 5.25's tokenizer.parse_response with TRL 1.16's Qwen3 response template
// (add_response_schema over trl/chat_templates/qwen3.jinja), as trl.chat_template_utils.parse_response
// calls it, on these texts with <|im_end|> after each (printed once and copied here; the live
// comparison is TrlToolOracle). Failed parses fall back to the plain text.
TEST(ParseAssistantTurn, AsTransformersParsesQwen3) {
  const std::string call = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
  const std::string f = R"({"type": "function", "function": {"name": "f", "arguments": {"a": 1}}})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"Answer 7", R"({"role": "assistant", "content": "Answer 7"})"},
      {"<think>\nhm\n</think>\n\nLet me add.\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 3, \"b\": 4}}\n"
       "</tool_call>",
       R"({"role": "assistant", "reasoning_content": "hm", "content": "Let me add.", "tool_calls": [{"type":
          "function", "function": {"name": "add", "arguments": {"a": 3, "b": 4}}}]})"},
      // The content is the last segment outside the blocks; whitespace around blocks is theirs.
      {"a " + call + " b " + call + " c",
       R"({"role": "assistant", "content": "c", "tool_calls": [)" + f + "," + f + "]}"},
      {"a\n\n" + call + "\n\n", R"({"role": "assistant", "content": "a", "tool_calls": [)" + f + "]}"},
      {call + "\n\nb\n", R"({"role": "assistant", "content": "b", "tool_calls": [)" + f + "]}"},
      {"x<think>y</think>z", R"({"role": "assistant", "content": "z", "reasoning_content": "y"})"},
      {"<think>y</think>" + call + "<think>q</think>w",
       R"({"role": "assistant", "reasoning_content": "q", "content": "w", "tool_calls": [)" + f + "]}"},
      // A region left open runs to the end, the end-of-turn token with it (TRL removes it from the content only).
      {"<think>unclosed", R"({"role": "assistant", "reasoning_content": "unclosed<|im_end|>", "content": ""})"},
      // Arguments missing: {}; a string or a list is kept (the call then fails at the tool).
      {"<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
       R"({"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f",
          "arguments": {}}}]})"},
      {"<tool_call>{\"name\":\"f\",\"arguments\":[1]}</tool_call>",
       R"({"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f",
          "arguments": [1]}}]})"},
      {"<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}\n</tool_call>",
       R"({"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f",
          "arguments": "{\"a\": 1}"}}]})"},
      {"é " + std::string("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"é\"}}\n</tool_call>"),
       R"({"role": "assistant", "content": "é", "tool_calls": [{"type": "function", "function": {"name": "f",
          "arguments": {"a": "é"}}}]})"},
  };
  const auto qwen3 = ResponseTemplate::builtin("qwen3");
  auto parse = [&](const std::string& text, const std::string& plain) {
    return parse_assistant_turn(qwen3, "", text + "<|im_end|>", plain, {"<|im_end|>"}, nullptr);
  };
  for (const auto& [text, want] : cases)  // key order aside (that is the order fields open in)
    EXPECT_EQ(nlohmann::json::parse(parse(text, "unused").dump()), nlohmann::json::parse(want)) << text;
  // Calls that do not parse: the whole turn is the plain text.
  for (const std::string bad :
       {"<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 3</tool_call>", "<tool_call>\n[1,2]\n</tool_call>",
        "<tool_call>\n{\"name\": 3}\n</tool_call>", "<tool_call>\n{\"function\": \"f\"}\n</tool_call>",
        "a <tool_call> b", "<tool_call>\n{\"name\": \"f\", \"arguments\": {}} trailing\n</tool_call>"})
    EXPECT_EQ(parse(bad, "PLAIN"), json::parse(R"({"role": "assistant", "content": "PLAIN"})")) << bad;
}

// TRL's parse_response around the template's parse: the content without a trailing EOS token
// and "" when missing; calls' missing arguments {}; with tools, arguments typed by their schema
// (Llama 3.1's format; expected: transformers 5.25's parse_response with TRL 1.16's
// llama3_template and these tools).
TEST(ParseAssistantTurn, TypesArgumentsAndNormalizesAsTrl) {
  const auto llama3 = ResponseTemplate::builtin("llama3");
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "add", "parameters": {"type": "object",
      "properties": {"a": {"type": "integer"}, "b": {"type": ["integer", "string"]}, "c": {"type": "number"},
      "d": {"type": "boolean"}, "e": {"type": "array"}}}}}])");
  const std::string prefix =
      "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n";
  const auto call = parse_assistant_turn(
      llama3, prefix,
      R"({"name": "add", "parameters": {"a": "3", "b": "4", "c": "2", "d": "true", "e": "[1]"}}<|eot_id|>)", "plain",
      {"<|eot_id|>"}, tools);
  EXPECT_EQ(nlohmann::json::parse(call.dump()),
            nlohmann::json::parse(R"({"role": "assistant", "content": "", "tool_calls": [{"type": "function",
                "function": {"name": "add", "arguments": {"a": 3, "b": "4", "c": 2, "d": true, "e": [1]}}}]})"));
  // Without tools the text stays text; a plain answer is content, its EOS token removed.
  EXPECT_EQ(parse_assistant_turn(llama3, prefix, R"({"name": "add", "parameters": {"a": "3"}}<|eot_id|>)", "plain",
                                 {"<|eot_id|>"}, nullptr)["tool_calls"][0]["function"]["arguments"],
            json::parse(R"({"a": "3"})"));
  EXPECT_EQ(parse_assistant_turn(llama3, prefix, "7<|end_of_text|>", "plain", {"<|end_of_text|>"}, nullptr),
            json::parse(R"({"role": "assistant", "content": "7"})"));
}

TEST(ResponseTemplate, BadTemplatesAreErrorsNamingThem) {
  auto err = [](const char* spec) {
    return test::error_of([&] { ResponseTemplate::from_json(json::parse(spec), "t.json"); });
  };
  EXPECT_NE(err(R"({"fields": {"content": {}}})").find("t.json: the response template needs 'start_anchor'"),
            std::string::npos);
  EXPECT_NE(err(R"({"start_anchor": "A", "fields": {"a": {}, "b": {}}})").find("at most one field may omit"),
            std::string::npos);
  EXPECT_NE(err(R"({"start_anchor": "A", "fields": {"a": {"open": "x", "clse": "y"}}})").find("unknown key 'clse'"),
            std::string::npos);
  EXPECT_NE(err(R"j({"start_anchor": "A", "fields": {"a": {"open_pattern": "(x"}}})j").find("does not compile"),
            std::string::npos);
  EXPECT_NE(err(R"j({"start_anchor": "A", "fields": {"a": {"open_pattern": "(?P<n>x)"}}})j").find("no 'transform'"),
            std::string::npos);
  EXPECT_NE(err(R"j({"start_anchor": "A", "fields": {"a": {"open": "x", "transform": "f({content})"}}})j")
                .find("mixes a {placeholder}"),
            std::string::npos);
  EXPECT_NE(err(R"({"start_anchor": "A", "fields": {"a": {"content": "yaml"}}})").find("unknown content parser"),
            std::string::npos);
  test::TempDir dir;
  EXPECT_NE(test::error_of([&] { named_response_template("hermes"); }).find("not a built-in name nor a readable file"),
            std::string::npos);
  test::write_file(dir.str("bad.json"), "{");
  EXPECT_NE(test::error_of([&] { ToolCommand("cat", dir.str("bad.json")); }).find("not valid JSON"), std::string::npos);
  TaskOptions no_tools;
  no_tools.response_template = "qwen3";
  EXPECT_NE(test::error_of([&] { make_task(no_tools); }).find("without task.tool_command"), std::string::npos);
  // Anchors that match the empty string: refused at the parse, not a hang.
  const auto stuck = ResponseTemplate::from_json(
      json::parse(R"({"start_anchor": "A", "fields": {"x": {"open_pattern": "", "close_pattern": ""}}})"), "t");
  EXPECT_THROW(stuck.parse("", "abc"), ResponseParseError);
  test::write_file(dir.str("t.json"), R"({"start_anchor": "A", "fields": {"content": {}}})");
  EXPECT_EQ(named_response_template(dir.str("t.json")).parse("", " x ")["content"], "x");
}

// Expected: Python 3.11's str(json.loads(value)), what TRL writes for a tool's result.
TEST(PythonStr, AsPythonsStrOfTheParsedValue) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("plain text")", "plain text"},
      {"7", "7"},
      {"-3", "-3"},
      {"2.5", "2.5"},
      {"1e-05", "1e-05"},
      {"1e+16", "1e+16"},
      {"100.0", "100.0"},
      {"true", "True"},
      {"null", "None"},
      {R"([1, "a", false, null])", "[1, 'a', False, None]"},
      {R"({"k": [1, true, null, "it's"], "q": "say \"hi\"", "n": "a\nb\\c\t\u0001", "u": "é日"})",
       R"({'k': [1, True, None, "it's"], 'q': 'say "hi"', 'n': 'a\nb\\c\t\x01', 'u': 'é日'})"},
      {"{}", "{}"},
      {"[]", "[]"},
      {R"({"error": "bad input"})", "{'error': 'bad input'}"},
      {R"("it's \"quoted\"")", "it's \"quoted\""},
      {"[0.1, 3.0, 12345678901234567890]", "[0.1, 3.0, 12345678901234567890]"},
  };
  for (const auto& [value, want] : cases) EXPECT_EQ(python_str(json::parse(value)), want) << value;
}

// One run of the command per batch: each call a JSON line with the example's fields, one JSON
// value back per call; calls the example's tools do not list, or with arguments that are not an
// object, fail without reaching it, with TRL's messages.
TEST(ToolCommand, RunsTheCallsAndReturnsToolMessages) {
  test::TempDir dir;
  Example e{"", "7"};
  e.extra = {{"id", 3}};
  e.tools = json::parse(R"([{"type": "function", "function": {"name": "add"}}, {"name": "echo"}])");
  auto call = [](const char* name, const char* args) {
    return json{{"type", "function"}, {"function", {{"name", name}, {"arguments", json::parse(args)}}}};
  };
  const std::vector<ToolCall> calls = {
      {&e, call("add", R"({"a": 3, "b": 4})")}, {&e, call("nope", "{}")},           {&e, call("echo", "[1]")},
      {&e, call("echo", R"({"x": "y"})")},      {&e, call("add", R"({"a": "x"})")}, {&e, call("echo", "{}")}};
  const std::string seen = dir.str("seen.jsonl");
  ToolCommand cmd("cat > '" + seen +
                  "'; printf '%s\\n' 7 '\"text\"' '{\"error\": \"bad input\"}' '{\"k\": [1, true]}'");
  const auto r = cmd.run(calls);
  ASSERT_EQ(r.size(), 6u);
  auto msg = [](const char* name, const std::string& content) {
    return json{{"role", "tool"}, {"name", name}, {"content", content}};
  };
  EXPECT_EQ(r[0].message, msg("add", "7"));
  EXPECT_FALSE(r[0].failed);
  EXPECT_EQ(r[1].message, msg("nope", "{'error': 'Tool nope not found.'}"));
  EXPECT_TRUE(r[1].failed);
  EXPECT_EQ(r[2].message, msg("echo", "{'error': 'echo() argument after ** must be a mapping, not list'}"));
  EXPECT_TRUE(r[2].failed);
  EXPECT_EQ(r[3].message, msg("echo", "text"));
  EXPECT_FALSE(r[3].failed);
  EXPECT_EQ(r[4].message, msg("add", "{'error': 'bad input'}"));
  EXPECT_TRUE(r[4].failed);
  EXPECT_EQ(r[5].message, msg("echo", "{'k': [1, True]}"));
  EXPECT_FALSE(r[5].failed);
  const auto lines = test::read_file(seen);
  EXPECT_EQ(lines, std::string(R"({"arguments":{"a":3,"b":4},"id":3,"name":"add"})") + "\n" +
                       R"({"arguments":{"x":"y"},"id":3,"name":"echo"})" + "\n" +
                       R"({"arguments":{"a":"x"},"id":3,"name":"add"})" + "\n" +
                       R"({"arguments":{},"id":3,"name":"echo"})" + "\n");
  // Nothing to run: the command does not start. A call of another type fails as TRL's does.
  EXPECT_EQ(ToolCommand("exit 1").run({{&e, call("nope", "{}")}}).size(), 1u);
  const auto other = ToolCommand("exit 1").run({{&e, json::parse(R"({"type": "code", "name": "run"})")}});
  EXPECT_EQ(other[0].message, msg("run", "{'error': 'Unsupported tool call type: code'}"));
  EXPECT_TRUE(other[0].failed);
}

TEST(ToolCommand, BadCommandsAreErrorsNamingThem) {
  Example e;
  e.tools = json::parse(R"([{"name": "f"}])");
  const std::vector<ToolCall> two = {
      {&e, json::parse(R"({"type": "function", "function": {"name": "f", "arguments": {}}})")},
      {&e, json::parse(R"({"type": "function", "function": {"name": "f", "arguments": {}}})")}};
  auto err = [&](const std::string& c) { return test::error_of([&] { ToolCommand(c).run(two); }); };
  EXPECT_NE(err("exit 3").find("tool command 'exit 3' exited with status 3"), std::string::npos) << err("exit 3");
  EXPECT_NE(err("cat >/dev/null; echo 1").find("printed 1 results for 2 calls"), std::string::npos);
  EXPECT_NE(err("cat >/dev/null; echo 1; echo 2; echo 3").find("more lines than the 2 calls"), std::string::npos);
  EXPECT_NE(err("cat >/dev/null; echo 1; echo not json").find("'not json' for call 2, not a JSON value"),
            std::string::npos);
}

TEST(ToolNames, OfFunctionSchemasAndBareOnes) {
  EXPECT_EQ(tool_names(json::parse(R"([{"type": "function", "function": {"name": "a"}}, {"name": "b"}, {"x": 1}])")),
            (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(tool_names(nullptr).empty());
}
