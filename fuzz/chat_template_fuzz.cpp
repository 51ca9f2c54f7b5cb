// Fuzzes a model's chat template (JinjaTemplate): the text a worker renders every prompt with,
// from a base model anyone may publish. Invariants: a bad or hostile template is a UserError
// (never another exception, a crash, a hang or undefined behaviour); bounds (output, steps,
// depth) hold at any input. Rendered over a fixed conversation with tools.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/jinja.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json vars = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi \u00e9"},
      {"role": "assistant", "content": "Hello", "tool_calls": [{"type": "function",
        "function": {"name": "f", "arguments": {"x": 1, "y": [1.5, null, true]}}}]},
      {"role": "tool", "content": "42"}, {"role": "user", "content": " pad "}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "documents": null, "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
    "n": 7, "f": 2.5, "s": "Hello World", "d": {"b": 1, "a": 2}})");
  brl::tok::JinjaLimits lim;
  lim.max_output = 1 << 20;
  lim.max_steps = 200000;
  lim.max_depth = 50;
  lim.now_unix = 0;
  try {
    brl::tok::JinjaTemplate t(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.jinja");
    std::string out = t.render(vars, lim);
    if (out.size() > lim.max_output) __builtin_trap();
  } catch (const brl::UserError&) {
  }
  return 0;
}
