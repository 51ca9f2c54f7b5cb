// TRL's tool-calling loop (GRPOTrainer._tool_call_loop): after a generation batch is sampled,
// every completion whose assistant turn calls tools has the calls run (tasks::ToolCommand), the
// tool messages appended as the chat template writes them, and the model generates on from
// there; until no completion calls a tool, or max_tool_calling_iterations rounds. The tokens
// the model did not sample (the tool results and the template's turn markers around them) stay
// in the completion with tool_mask 0: the trainer forwards them but does not train on them.
// No libtorch here: the generation is a callback.
#pragma once

#include <nlohmann/json.hpp>

#include <bitset>
#include <cstdint>
#include <functional>
#include <limits>
#include <unordered_map>
#include <vector>

#include "generate/generate.h"
#include "tasks/tools.h"
#include "tokenizer/tokenizer.h"

namespace brl::grpo {

// How the loop reads the model's turns, as TRL's parse_response reads token ids with
// transformers' response template (task.response_template; "auto": the model folder's
// tokenizer_config.json response_template, else the format its chat template writes: Hermes
// <tool_call> blocks for Qwen2.5 / Qwen3, Llama 3.1 / 3.2's JSON). As transformers does with
// token ids, a control token (a special added token, or an added token the chat template
// writes) only opens or closes a region where the model sampled it as its own token: spelled
// out by other tokens it is text. UserError when no format can be told.
class TurnParser {
 public:
  TurnParser(const tok::Tokenizer& tk, const std::string& response_template);
  // The turn in `tokens` (stop tokens included or not) after the conversation in `prefix`
  // (prompt token ids, and earlier turns and tool results), tools typing the arguments.
  nlohmann::ordered_json parse(const std::vector<int32_t>& prefix, const std::vector<int32_t>& tokens,
                               const nlohmann::ordered_json& tools) const;
  // The text the response template reads: control tokens sampled as ids spelled out, their
  // spellings in other tokens' text broken with U+FDD2 (transformers' TokenIdDecoder).
  std::string text(const std::vector<int32_t>& ids) const;

 private:
  const tok::Tokenizer& tk_;
  tasks::ResponseTemplate template_;
  std::vector<std::pair<int32_t, std::string>> control_;  // id, spelling; longest spelling first
  std::unordered_map<int32_t, size_t> control_at_;        // id -> its place in control_
  std::bitset<256> control_first_;                        // the bytes their spellings start with
  std::vector<std::string> eos_;
};

struct ToolLoopOptions {
  int64_t max_completion_length = 0;                             // the whole completion's budget, tool results included
  int64_t max_iterations = std::numeric_limits<int64_t>::max();  // max_tool_calling_iterations; unset: no limit
  int64_t max_model_len = std::numeric_limits<int64_t>::max();   // prompt + completion stay below it
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
};

struct ToolLoopResult {
  // Per completion, TRL's conversational completion: the assistant turns (parsed, with their
  // tool calls) and the tool messages between them.
  std::vector<nlohmann::ordered_json> messages;
  int64_t calls = 0, failures = 0;  // TRL's tool_call_count and tool_failure_count
};

// Generates one completion per prefix (prompt_index = its position), at most max_new_tokens
// each; `round` counts the loop's rounds from 0 (for the sampling streams).
using ContinueFn = std::function<std::vector<gen::Completion>(const std::vector<std::vector<int32_t>>& prefixes,
                                                              int64_t max_new_tokens, int64_t round)>;

// Runs the loop over comps (completion i answers examples[i], whose prompt token ids are
// prompts[comps[i].prompt_index]); extends the completions that called tools in place:
// tokens, logprobs (0 for tool tokens), tool_mask and finish (kStop when the last token is a
// stop token, as TRL's is_truncated).
ToolLoopResult run_tool_loop(const tok::Tokenizer& tk, const TurnParser& parser, const tasks::ToolCommand& tools,
                             const std::vector<const tasks::Example*>& examples,
                             const std::vector<std::vector<int32_t>>& prompts, std::vector<gen::Completion>& comps,
                             const ContinueFn& generate, const ToolLoopOptions& opt);

// TRL's _get_tool_suffix_ids: the tokens the chat template writes after an assistant turn that
// called tools (after its end-of-turn token) for these tool messages, up to and including the
// next assistant turn's generation prompt. Also under templates that render a last assistant
// turn differently (Qwen3's stock one), where TRL swaps in a template of its own. Throws
// UserError when the template cannot say where the turn ends.
std::vector<int32_t> tool_suffix_ids(const tok::Tokenizer& tk, const nlohmann::ordered_json& tool_messages,
                                     const nlohmann::ordered_json& chat_template_kwargs);

}  // namespace brl::grpo
