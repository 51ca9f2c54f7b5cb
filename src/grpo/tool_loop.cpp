#include "grpo/tool_loop.h"

#include <algorithm>

#include "tokenizer/chat_template.h"
#include "util/error.h"

namespace brl::grpo {

namespace {

bool ends_with_stop(const tok::Tokenizer& tk, const std::vector<int32_t>& t) {
  const auto eos = tk.eos_ids();
  return !t.empty() && std::find(eos.begin(), eos.end(), t.back()) != eos.end();
}

}  // namespace

nlohmann::ordered_json assistant_turn(const tok::Tokenizer& tk, const std::vector<int32_t>& tokens) {
  std::vector<int32_t> t = tokens;
  while (ends_with_stop(tk, t)) t.pop_back();
  return tasks::parse_assistant_turn(tk.decode(t, /*skip_special_tokens=*/false),
                                     tk.decode(t, /*skip_special_tokens=*/true));
}

std::vector<int32_t> tool_suffix_ids(const tok::Tokenizer& tk, const nlohmann::ordered_json& tool_messages,
                                     const nlohmann::ordered_json& chat_template_kwargs) {
  const tok::ChatTemplate* t = tk.chat_template();
  if (!t)
    throw UserError("tool calling needs the model's chat template to write the tool results",
                    "give the model folder a chat_template.jinja (or tokenizer_config.json \"chat_template\")");
  // A minimal conversation, as TRL's: the real tool name (some templates head the tool turn with it).
  nlohmann::ordered_json call = {
      {"type", "function"},
      {"function", {{"name", tool_messages[0]["name"]}, {"arguments", nlohmann::ordered_json::object()}}}};
  nlohmann::ordered_json dummy = nlohmann::ordered_json::array(
      {{{"role", "user"}, {"content", "dummy"}},
       {{"role", "assistant"}, {"content", ""}, {"tool_calls", nlohmann::ordered_json::array({call})}}});
  tok::ChatOptions o;
  o.kwargs = chat_template_kwargs.is_object() ? chat_template_kwargs : nlohmann::ordered_json::object();
  auto prefix = tk.encode(t->apply(dummy, o));
  nlohmann::ordered_json full = dummy;
  for (const auto& m : tool_messages) full.push_back(m);
  o.add_generation_prompt = true;
  const auto full_ids = tk.encode(t->apply(full, o));
  // The tool results start after the assistant turn's end-of-turn token (Qwen's templates write a
  // newline after it). TRL cuts `full` at the length of `prefix` up to its last EOS, and refuses
  // templates under which that is not a prefix of `full` (then it trains with a prefix-preserving
  // template of its own: Qwen3's renders a last assistant turn with an empty <think> block).
  // Cutting after as many EOS as that prefix holds is the same cut wherever TRL's works, and
  // also the right one under such templates.
  const auto eos = tk.eos_ids();
  auto is_eos = [&](int32_t id) { return std::find(eos.begin(), eos.end(), id) != eos.end(); };
  const auto turns = std::count_if(prefix.begin(), prefix.end(), is_eos);
  size_t cut = prefix.size();
  if (turns == 0) {
    if (full_ids.size() < prefix.size() || !std::equal(prefix.begin(), prefix.end(), full_ids.begin()))
      throw UserError("chat template " + t->label() +
                          ": a conversation with tool results does not start with the same tokens as the one without",
                      "tool calling appends the tool results' tokens to the completion: use a template that renders "
                      "earlier turns the same whatever follows");
  } else {
    std::ptrdiff_t seen = 0;
    for (cut = 0; cut < full_ids.size() && seen < turns;) seen += is_eos(full_ids[cut++]);
    if (seen < turns)
      throw UserError(
          "chat template " + t->label() + ": a conversation with tool results has fewer turns than the one without",
          "use a template that writes tool messages (e.g. TRL's trl/chat_templates/qwen3_training.jinja)");
  }
  return {full_ids.begin() + static_cast<std::ptrdiff_t>(cut), full_ids.end()};
}

ToolLoopResult run_tool_loop(const tok::Tokenizer& tk, const tasks::ToolCommand& tools,
                             const std::vector<const tasks::Example*>& examples,
                             const std::vector<std::vector<int32_t>>& prompts, std::vector<gen::Completion>& comps,
                             const ContinueFn& generate, const ToolLoopOptions& opt) {
  ToolLoopResult r;
  r.messages.resize(comps.size());
  std::vector<size_t> active;  // completions whose last assistant turn called tools
  for (size_t i = 0; i < comps.size(); ++i) {
    if (examples[i]->messages.is_null()) continue;  // a text prompt: a text completion
    auto turn = assistant_turn(tk, comps[i].tokens);
    if (turn.contains("tool_calls")) active.push_back(i);
    r.messages[i] = nlohmann::ordered_json::array({std::move(turn)});
  }
  auto prompt_of = [&](size_t i) -> const std::vector<int32_t>& {
    return prompts[static_cast<size_t>(comps[i].prompt_index)];
  };
  for (int64_t round = 0; !active.empty() && round < opt.max_iterations; ++round) {
    // 1. Every call of every active completion, in one run of the command.
    std::vector<tasks::ToolCall> calls;
    std::vector<size_t> owner;
    for (size_t i : active)
      for (const auto& c : r.messages[i].back()["tool_calls"]) calls.push_back({examples[i], c}), owner.push_back(i);
    const auto results = tools.run(calls);
    r.calls += static_cast<int64_t>(calls.size());
    // 2. Each completion's prefix for the next turn: prompt + completion + the tool results'
    // tokens; a completion that would pass its budget keeps its turn as it is and leaves the loop.
    std::vector<size_t> next;
    std::vector<std::vector<int32_t>> prefixes, suffixes;
    int64_t budget = 0;
    for (size_t i : active) {
      nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
      int64_t failures = 0;
      for (size_t k = 0; k < calls.size(); ++k)
        if (owner[k] == i) msgs.push_back(results[k].message), failures += results[k].failed;
      r.failures += failures;
      auto suffix = tool_suffix_ids(tk, msgs, opt.chat_template_kwargs);
      const auto len = static_cast<int64_t>(comps[i].tokens.size() + suffix.size());
      if (len > opt.max_completion_length || static_cast<int64_t>(prompt_of(i).size()) + len >= opt.max_model_len)
        continue;
      for (auto& m : msgs) r.messages[i].push_back(std::move(m));
      std::vector<int32_t> prefix = prompt_of(i);
      prefix.insert(prefix.end(), comps[i].tokens.begin(), comps[i].tokens.end());
      prefix.insert(prefix.end(), suffix.begin(), suffix.end());
      prefixes.push_back(std::move(prefix));
      suffixes.push_back(std::move(suffix));
      budget = std::max(budget, opt.max_completion_length - len);
      next.push_back(i);
    }
    if (next.empty()) break;
    // 3. The model's next turn, cut to each completion's budget.
    auto post = generate(prefixes, std::max<int64_t>(budget, 1), round);
    BRL_ASSERT(post.size() == next.size(), "one continuation per prefix");
    active.clear();
    for (size_t k = 0; k < next.size(); ++k) {
      gen::Completion& c = comps[next[k]];
      const auto& suffix = suffixes[k];
      auto& p = post[k];
      const auto keep = static_cast<size_t>(
          std::max<int64_t>(0, opt.max_completion_length - static_cast<int64_t>(c.tokens.size() + suffix.size())));
      if (p.tokens.size() > keep) p.tokens.resize(keep), p.logprobs.resize(keep);
      if (c.tool_mask.empty()) c.tool_mask.assign(c.tokens.size(), 1);
      c.tokens.insert(c.tokens.end(), suffix.begin(), suffix.end());
      c.logprobs.insert(c.logprobs.end(), suffix.size(), 0.f);
      c.tool_mask.insert(c.tool_mask.end(), suffix.size(), 0);
      c.tokens.insert(c.tokens.end(), p.tokens.begin(), p.tokens.end());
      c.logprobs.insert(c.logprobs.end(), p.logprobs.begin(), p.logprobs.end());
      c.tool_mask.insert(c.tool_mask.end(), p.tokens.size(), 1);
      c.finish = ends_with_stop(tk, c.tokens) ? gen::FinishReason::kStop : gen::FinishReason::kLength;
      if (p.tokens.empty()) continue;  // cut away entirely: no turn to add
      auto turn = assistant_turn(tk, p.tokens);
      const bool calls_again = turn.contains("tool_calls");
      r.messages[next[k]].push_back(std::move(turn));
      if (calls_again) active.push_back(next[k]);
    }
  }
  return r;
}

}  // namespace brl::grpo
