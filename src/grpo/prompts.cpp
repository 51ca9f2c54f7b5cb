#include "grpo/prompts.h"

#include <atomic>

#include "tokenizer/chat_template.h"
#include "util/error.h"
#include "util/log.h"

namespace brl::grpo {

std::string prompt_text(const tok::Tokenizer& tk, const tasks::Example& e, const nlohmann::json& chat_template_kwargs) {
  if (e.messages.is_null()) return e.prompt;
  const tok::ChatTemplate* t = tk.chat_template();
  if (!t)
    throw UserError("the model has no chat template to render a conversational prompt (a list of messages) with",
                    "give the model folder a chat_template.jinja (or tokenizer_config.json \"chat_template\"), "
                    "or give the prompt as text");
  nlohmann::ordered_json kwargs(chat_template_kwargs);
  if (e.chat_template_kwargs.is_object()) kwargs.update(e.chat_template_kwargs);
  return t->apply_prompt(e.messages, kwargs, "a conversational prompt", e.tools);
}

std::vector<int32_t> prompt_ids_of_text(const tok::Tokenizer& tk, const tasks::Example& e, const std::string& text,
                                        int max_len) {
  // A rendered template wrote its own special tokens; a text prompt gets the tokenizer's.
  auto ids = tk.encode(text, /*add_special_tokens=*/e.messages.is_null());
  if (static_cast<int>(ids.size()) > max_len) {
    // Said once a process: a cut prompt loses its beginning (the instructions, a system message).
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      LOG_WARN(
          "a prompt of {} tokens was cut to its last {} (grpo.max_prompt_length; TRL 1.16 no longer cuts): "
          "raise grpo.max_prompt_length to keep whole prompts (`bucketrl dataset --render` shows them)",
          ids.size(), max_len);
    ids.erase(ids.begin(), ids.end() - max_len);  // keep the end
  }
  return ids;
}

std::vector<int32_t> prompt_ids(const tok::Tokenizer& tk, const tasks::Example& e, int max_len,
                                const nlohmann::json& chat_template_kwargs) {
  return prompt_ids_of_text(tk, e, prompt_text(tk, e, chat_template_kwargs), max_len);
}

}  // namespace brl::grpo
