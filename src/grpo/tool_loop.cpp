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

// transformers' TokenIdDecoder MARKER: breaks a control token's spelling in ordinary text.
constexpr std::string_view kMarker = "\xEF\xB7\x92";  // U+FDD2

tasks::ResponseTemplate resolve(const tok::Tokenizer& tk, const std::string& value) {
  if (value != "auto") return tasks::named_response_template(value);
  const tok::ChatTemplate* t = tk.chat_template();
  if (!t)
    throw UserError("tool calling needs the model's chat template to write the tools and their results",
                    "give the model folder a chat_template.jinja (or tokenizer_config.json \"chat_template\")");
  if (!t->response_template().is_null())
    return tasks::ResponseTemplate::from_json(t->response_template(), "tokenizer_config.json: response_template");
  // The format the template writes calls in, as TRL's add_response_schema tells it from the
  // template (it compares whole templates with its copies; these are what sets them apart).
  const std::string& src = t->source();
  auto has = [&](const char* s) { return src.find(s) != std::string::npos; };
  if (has("<tool_call>") && !has("<function=") && !has("<arg_key>")) return tasks::ResponseTemplate::builtin("qwen3");
  if (has("<|eot_id|>") && has("\"parameters\"")) return tasks::ResponseTemplate::builtin("llama3");
  throw UserError("chat template " + t->label() + ": which format it writes tool calls in is not known",
                  "set [task] response_template to \"qwen3\" (<tool_call>{json}</tool_call>), \"llama3\" ({\"name\", "
                  "\"parameters\"}) or a JSON file in transformers' response_template format");
}

}  // namespace

TurnParser::TurnParser(const tok::Tokenizer& tk, const std::string& response_template)
    : tk_(tk), template_(resolve(tk, response_template)) {
  // transformers' _get_control_tokens: special added tokens, and the added tokens the template
  // writes (whitespace ones aside); here found in the template's text.
  const tok::ChatTemplate* t = tk.chat_template();
  const std::string src = t ? t->source() : "";
  for (const auto& a : tk.added_tokens()) {
    const bool blank = a.content.find_first_not_of(" \t\n\r\f\v") == std::string::npos;
    if (a.special || (!blank && src.find(a.content) != std::string::npos)) control_.emplace_back(a.id, a.content);
  }
  std::stable_sort(control_.begin(), control_.end(),
                   [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
  for (size_t i = 0; i < control_.size(); ++i) {
    control_at_.emplace(control_[i].first, i);
    if (!control_[i].second.empty()) control_first_.set(static_cast<unsigned char>(control_[i].second[0]));
  }
  for (int32_t id : tk.eos_ids()) eos_.push_back(tk.decode({id}, /*skip_special_tokens=*/false));
}

std::string TurnParser::text(const std::vector<int32_t>& ids) const {
  auto spelling = [&](int32_t id) -> const std::string* {
    const auto it = control_at_.find(id);
    return it == control_at_.end() ? nullptr : &control_[it->second].second;
  };
  std::string out;
  for (size_t a = 0; a < ids.size();) {
    if (const std::string* s = spelling(ids[a])) {
      out += *s;
      ++a;
      continue;
    }
    size_t b = a;
    while (b < ids.size() && !spelling(ids[b])) ++b;
    auto decode_from = [&](size_t from) {
      return tk_.decode(std::vector<int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(from),
                                             ids.begin() + static_cast<std::ptrdiff_t>(b)),
                        false);
    };
    // Decoded in the stream, after the control token before it (a Metaspace decoder keeps a
    // leading space there that it drops at the start of a sequence).
    std::string piece = decode_from(a > 0 ? a - 1 : a);
    if (a > 0) {
      const std::string& head = *spelling(ids[a - 1]);
      piece = piece.compare(0, head.size(), head) == 0 ? piece.substr(head.size()) : decode_from(a);
    }
    // Control tokens' spellings in this text broken up (the longest first, left to right).
    for (size_t i = 0; i < piece.size();) {
      const std::string* hit = nullptr;
      if (control_first_.test(static_cast<unsigned char>(piece[i])))
        for (const auto& [cid, s] : control_)
          if (piece.compare(i, s.size(), s) == 0) {
            hit = &s;
            break;
          }
      if (!hit) {
        out += piece[i++];
        continue;
      }
      for (size_t k = 0; k < hit->size();) {  // code point by code point
        size_t n = 1;
        while (k + n < hit->size() && (static_cast<unsigned char>((*hit)[k + n]) & 0xC0) == 0x80) ++n;
        if (k > 0) out += kMarker;
        out.append(*hit, k, n);
        k += n;
      }
      i += hit->size();
    }
    a = b;
  }
  return out;
}

nlohmann::ordered_json TurnParser::parse(const std::vector<int32_t>& prefix, const std::vector<int32_t>& tokens,
                                         const nlohmann::ordered_json& tools) const {
  // A template told from the chat template (or named) may not match its turn headers: then the
  // turn is read alone, not after the whole conversation as transformers would.
  std::string p = text(prefix);
  if (!template_.anchored(p)) p.clear();
  return tasks::parse_assistant_turn(template_, p, text(tokens), tk_.decode(tokens, /*skip_special_tokens=*/true), eos_,
                                     tools);
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

ToolLoopResult run_tool_loop(const tok::Tokenizer& tk, const TurnParser& parser, const tasks::ToolCommand& tools,
                             const std::vector<const tasks::Example*>& examples,
                             const std::vector<std::vector<int32_t>>& prompts, std::vector<gen::Completion>& comps,
                             const ContinueFn& generate, const ToolLoopOptions& opt) {
  ToolLoopResult r;
  r.messages.resize(comps.size());
  auto prompt_of = [&](size_t i) -> const std::vector<int32_t>& {
    return prompts[static_cast<size_t>(comps[i].prompt_index)];
  };
  auto calls_tools = [](const nlohmann::ordered_json& turn) {
    return turn.contains("tool_calls") && !turn["tool_calls"].empty();
  };
  std::vector<size_t> active;  // completions whose last assistant turn called tools
  for (size_t i = 0; i < comps.size(); ++i) {
    if (examples[i]->messages.is_null()) continue;  // a text prompt: a text completion
    auto turn = parser.parse(prompt_of(i), comps[i].tokens, examples[i]->tools);
    if (calls_tools(turn)) active.push_back(i);
    r.messages[i] = nlohmann::ordered_json::array({std::move(turn)});
  }
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
      auto turn = parser.parse(prefixes[k], p.tokens, examples[next[k]]->tools);
      const bool calls_again = calls_tools(turn);
      r.messages[next[k]].push_back(std::move(turn));
      if (calls_again) active.push_back(next[k]);
    }
  }
  return r;
}

}  // namespace brl::grpo
