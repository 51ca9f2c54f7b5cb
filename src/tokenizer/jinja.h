// The Jinja2 subset that Hugging Face chat templates are written in, rendered the way
// transformers renders them: jinja2's ImmutableSandboxedEnvironment with trim_blocks,
// lstrip_blocks and loop controls, transformers' tojson / raise_exception / strftime_now /
// namespace / dict globals, Python semantics for values (str(), repr of floats and lists,
// slicing, string methods, integer division, truthiness) and jinja2's Undefined.
//
// Covered: {{ }}, {% %}, {# #} with -/+ whitespace control; if/elif/else, for (tuple
// targets, inline filter, else, loop.*, break/continue), set (names, tuples, namespace
// attributes, blocks), macro, generation, raw; the usual filters, tests and str/dict/list
// methods. Anything else (include, extends, call blocks, %-formatting, ...) is refused with
// the template's name and line. Rendering is bounded (output size, loop steps, recursion),
// so a hostile template fails cleanly rather than hanging or crashing.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace brl::tok {

struct JinjaLimits {
  size_t max_output = 16u << 20;   // bytes of rendered text
  int64_t max_steps = 10'000'000;  // loop iterations and macro calls, all together
  int max_depth = 200;             // nested macro calls
  int64_t now_unix = -1;           // strftime_now's clock; -1: the real one (tests pin it)
};

class JinjaTemplate {
 public:
  // Parses `source`; a syntax error or an unsupported construct throws UserError naming
  // `label` and the line.
  JinjaTemplate(std::string_view source, std::string label);
  // `vars`: a JSON object, its members the template's variables (key order kept, as Python
  // dicts keep it). Runtime errors (raise_exception, undefined variables used in arithmetic,
  // type errors) throw UserError naming the label and line.
  std::string render(const nlohmann::ordered_json& vars, const JinjaLimits& limits = {}) const;
  const std::string& label() const { return label_; }

  struct Program;

 private:
  std::shared_ptr<const Program> prog_;
  std::string label_;
};

}  // namespace brl::tok
