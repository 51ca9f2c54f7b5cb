// Chat templates without the oracle: where a model folder's template is read from, the bounds
// that keep a hostile template from hanging or crashing the process, errors that name the
// template and line, and conversational prompts as TRL's GRPOTrainer renders them. Expected texts are derived by
// hand from the templates; rendering itself is compared with transformers in
// chat_template_oracle_test.
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

using brl::tok::ChatOptions;
using brl::tok::ChatTemplate;
using brl::tok::JinjaLimits;
using brl::tok::JinjaTemplate;
using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

std::string render_error(const std::string& tpl, const JinjaLimits& lim = {}) {
  try {
    JinjaTemplate(tpl, "t.jinja").render(ojson::object(), lim);
  } catch (const brl::UserError& e) {
    return e.what();
  }
  return "no error";
}

struct TempDir {
  fs::path p;
  TempDir() {
    char t[] = "/tmp/brl_chat_XXXXXX";
    p = mkdtemp(t);
    fs::copy_file(std::string(BRL_SOURCE_DIR) + "/tests/tokenizer/data/tiny_bpe.json", p / "tokenizer.json");
  }
  ~TempDir() { fs::remove_all(p); }
  void write(const std::string& name, const std::string& text) const { std::ofstream(p / name) << text; }
};

const char* kChatml =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

ojson msgs(const char* json) { return ojson::parse(json); }

}  // namespace

TEST(ChatTemplate, BoundsStopHostileTemplates) {
  JinjaLimits lim;
  lim.max_steps = 1000;
  EXPECT_NE(render_error("{% for i in range(10) %}{% for j in range(10) %}{% for k in range(11) %}{% endfor %}"
                         "{% endfor %}{% endfor %}",
                         lim)
                .find("loop steps"),
            std::string::npos);
  EXPECT_NE(render_error("{{ range(100001)|length }}").find("range too big"), std::string::npos);
  lim = {};
  lim.max_output = 1000;
  EXPECT_NE(render_error("{% for i in range(2000) %}x{% endfor %}", lim).find("output passed 1000 bytes"),
            std::string::npos);
  EXPECT_NE(render_error("{{ 'x' * 5000 }}", lim).find("output limit"), std::string::npos);
  EXPECT_NE(render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("nested deeper"),
            std::string::npos);
  // Nesting that would overflow a recursive parser's stack is a syntax error.
  std::string deep(100000, '(');
  EXPECT_NE(render_error("{{ " + deep + " }}").find("nested too deeply"), std::string::npos);
  EXPECT_NE(render_error(std::string(100000, '[')).find("no error"), std::string::npos);  // plain text
  EXPECT_NE(render_error("{{ 9223372036854775807 + 1 }}").find("integer overflow"), std::string::npos);
}

TEST(ChatTemplate, ErrorsNameTheTemplateAndLine) {
  EXPECT_EQ(render_error("a\nb\n{% if x %}\nunclosed"),
            "t.jinja: line 4: template syntax error: missing {% elif or else or endif %}\n  hint: chat templates "
            "follow jinja2 as transformers renders them; see docs/chat-templates.md for the supported subset");
  EXPECT_EQ(render_error("line 1\n{{ raise_exception('no system role') }}"),
            "t.jinja: line 2: the template raised an exception: no system role");
  EXPECT_EQ(render_error("{{ a.b }}"), "t.jinja: line 1: 'a' is undefined");
  EXPECT_NE(render_error("{% include 'x' %}").find("not supported"), std::string::npos);
}

TEST(ChatTemplate, ReadFromTheModelFolderAsTransformersDoes) {
  TempDir d;
  EXPECT_FALSE(ChatTemplate::from_dir(d.p.string()).has_value());
  EXPECT_EQ(brl::tok::Tokenizer::from_dir(d.p.string()).chat_template(), nullptr);
  // tokenizer_config.json's string, with the special tokens the template sees by name.
  d.write("tokenizer_config.json",
          ojson{{"bos_token", {{"content", "<B>"}, {"lstrip", false}}},
                {"eos_token", "<E>"},
                {"chat_template", "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}{{ pad_token is defined }}"}}
              .dump());
  auto t = ChatTemplate::from_dir(d.p.string());
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->apply(msgs(R"([{"role": "user", "content": "hi"}])")), "<B>hi<E>False");
  // chat_template.jinja wins over the config's.
  d.write("chat_template.jinja", "jinja file: {{ messages|length }}\n");
  EXPECT_EQ(ChatTemplate::from_dir(d.p.string())->apply(msgs("[]")), "jinja file: 0");
  fs::remove(d.p / "chat_template.jinja");
  // The list form: "default", or "tool_use" when tools are given.
  d.write(
      "tokenizer_config.json",
      R"({"chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T{{ tools|length }}"}]})");
  t = ChatTemplate::from_dir(d.p.string());
  ChatOptions o;
  EXPECT_EQ(t->apply(msgs("[]"), o), "D");
  o.tools = ojson::array({ojson::object()});
  EXPECT_EQ(t->apply(msgs("[]"), o), "T1");
  d.write("tokenizer_config.json", R"({"chat_template": [{"name": "rag", "template": "R"}]})");
  EXPECT_THROW(ChatTemplate::from_dir(d.p.string()), brl::UserError);
  // A broken template fails where it is used, not when the tokenizer loads.
  d.write("tokenizer_config.json", R"({"chat_template": "{% if %}"})");
  auto tk = brl::tok::Tokenizer::from_dir(d.p.string());
  try {
    tk.chat_template();
    ADD_FAILURE() << "a broken template was not reported";
  } catch (const brl::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json: chat_template: line 1"), std::string::npos)
        << e.what();
  }
}

TEST(ChatTemplate, PromptsAsTrlsGrpoTrainerRendersThem) {
  ChatTemplate t(kChatml, ojson::object(), "chatml");
  // Ending with a user message: the assistant turn is opened.
  EXPECT_EQ(t.apply_prompt(msgs(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "2+2?"}])"),
                           nullptr, "p"),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
  // Whatever the last role: TRL's GRPOTrainer always adds the generation prompt.
  EXPECT_EQ(t.apply_prompt(msgs(R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "A"}])"),
                           nullptr, "p"),
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n<|im_start|>assistant\n");
  // continue_final_message leaves the last message open instead (transformers' option).
  ChatOptions cont;
  cont.continue_final_message = true;
  EXPECT_EQ(
      t.apply(msgs(R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "The answer is"}])"), cont),
      "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\nThe answer is");
  // Null-valued keys are dropped, as transformers drops them (`is defined` sees no key).
  ChatTemplate d("{{ messages[0].tool_calls is defined }}", ojson::object(), "d");
  EXPECT_EQ(d.apply(msgs(R"([{"role": "user", "content": "x", "tool_calls": null}])")), "False");
  EXPECT_THROW(t.apply_prompt(msgs("[]"), nullptr, "p"), brl::UserError);
  EXPECT_THROW(t.apply_prompt(msgs(R"(["not an object"])"), nullptr, "p"), brl::UserError);
  // chat_template_kwargs reach the template as variables.
  ChatTemplate k("{{ enable_thinking }}", ojson::object(), "k");
  EXPECT_EQ(k.apply_prompt(msgs(R"([{"role": "user", "content": "x"}])"), {{"enable_thinking", false}}, "p"), "False");
}
