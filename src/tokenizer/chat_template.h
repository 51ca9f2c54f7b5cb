// A model's chat template, applied as transformers' tokenizer.apply_chat_template(...,
// tokenize=False) applies it, and TRL's rule for conversational prompts on top.
//
// Where the template comes from (a model folder, as transformers reads it): chat_template.jinja,
// else tokenizer_config.json's "chat_template" (a string, or a list of {name, template} from
// which "default" is used, "tool_use" when tools are given), else chat_template.json.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>

#include "tokenizer/jinja.h"

namespace brl::tok {

struct ChatOptions {
  bool add_generation_prompt = false;
  // Leave the final message open (no end-of-turn) so that generation continues it.
  bool continue_final_message = false;
  nlohmann::ordered_json tools;                                      // null: none
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();  // chat_template_kwargs, e.g. enable_thinking
  JinjaLimits limits;
};

class ChatTemplate {
 public:
  // The folder's template, or nullopt when it has none. A template that does not parse throws
  // UserError naming the file and line.
  static std::optional<ChatTemplate> from_dir(const std::string& model_dir);
  // `special_tokens`: bos_token, eos_token, ... as strings (the template sees them by name).
  ChatTemplate(std::string_view source, nlohmann::ordered_json special_tokens, std::string label,
               std::string_view tool_use_source = {});

  // messages: a list of {"role": ..., "content": ...} objects (other keys kept, e.g.
  // tool_calls, reasoning_content; null-valued keys dropped as transformers drops them).
  std::string apply(const nlohmann::ordered_json& messages, const ChatOptions& opt = {}) const;

  // A conversational prompt as TRL's GRPOTrainer renders it: the generation prompt added,
  // chat_template_kwargs (an object, or null) passed as template variables, `tools` (JSON
  // schemas; null or empty: none, as TRL's `tools or None`). A malformed list is an error
  // naming `where`.
  std::string apply_prompt(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& kwargs,
                           const std::string& where, const nlohmann::ordered_json& tools = nullptr) const;

  const std::string& label() const { return tpl_.label(); }
  // The template's text (with the tool_use one, if any, after a NUL), for what it names.
  const std::string& source() const { return source_; }
  // The folder's tokenizer_config.json "response_template" (how transformers parses the
  // model's answers: tasks/response_template.h), or null.
  const nlohmann::ordered_json& response_template() const { return response_template_; }

 private:
  JinjaTemplate tpl_;
  std::shared_ptr<const JinjaTemplate> tool_use_;
  nlohmann::ordered_json specials_;
  std::string source_;
  nlohmann::ordered_json response_template_;
};

}  // namespace brl::tok
