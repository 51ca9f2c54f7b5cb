// What the model is given for a task's prompt, as TRL's GRPOTrainer gives it: a text prompt
// encoded with the tokenizer's special tokens (its BOS); a conversational one (a list of
// messages) rendered by the model's chat template with the generation prompt, then encoded
// without special tokens (the template writes them). No libtorch here: the CLI's dataset and
// generate commands use it too.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "tasks/task.h"
#include "tokenizer/tokenizer.h"

namespace brl::grpo {

// The text the tokenizer encodes: a text prompt as it is, a conversational one rendered with
// grpo.chat_template_kwargs (`chat_template_kwargs`) under the example's own, key by key.
std::string prompt_text(const tok::Tokenizer& tk, const tasks::Example& e,
                        const nlohmann::json& chat_template_kwargs = nlohmann::json::object());

// Its token ids, the last max_len kept (TRL's max_prompt_length truncates from the left).
std::vector<int32_t> prompt_ids(const tok::Tokenizer& tk, const tasks::Example& e, int max_len,
                                const nlohmann::json& chat_template_kwargs = nlohmann::json::object());
// The same from e's prompt_text, already rendered (not rendered again).
std::vector<int32_t> prompt_ids_of_text(const tok::Tokenizer& tk, const tasks::Example& e, const std::string& text,
                                        int max_len);

}  // namespace brl::grpo
