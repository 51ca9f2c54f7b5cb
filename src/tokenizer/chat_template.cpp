#include "tokenizer/chat_template.h"

#include <filesystem>

#include "util/error.h"
#include "util/file.h"

namespace brl::tok {
namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

ojson read_object(const fs::path& p) {
  ojson j = ojson::parse(read_file(p.string()), nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw UserError(p.string() + ": not a JSON object");
  return j;
}

// transformers' special_tokens_map: these names, as strings ({"content": ...} unwrapped).
ojson special_tokens(const ojson& cfg) {
  ojson out = ojson::object();
  for (const char* name :
       {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    auto it = cfg.find(name);
    if (it == cfg.end()) continue;
    if (it->is_string()) out[name] = *it;
    else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) out[name] = (*it)["content"];
  }
  return out;
}

// Python's str.strip() for the ASCII whitespace that ends messages in practice.
std::string strip(std::string_view s) {
  const char* ws = " \t\n\r\f\v";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return "";
  return std::string(s.substr(b, s.find_last_not_of(ws) - b + 1));
}

const char* const kContinueTag = "CONTINUE_FINAL_MESSAGE_TAG ";

}  // namespace

ChatTemplate::ChatTemplate(std::string_view source, ojson special_tokens, std::string label,
                           std::string_view tool_use_source)
    : tpl_(source, label), specials_(std::move(special_tokens)), source_(source) {
  if (!tool_use_source.empty()) {
    tool_use_ = std::make_shared<const JinjaTemplate>(tool_use_source, label + " (tool_use)");
    source_ += '\0';
    source_ += tool_use_source;
  }
}

namespace {

std::optional<ChatTemplate> template_in(const fs::path& d, const ojson& cfg) {
  ojson specials = special_tokens(cfg);
  if (fs::exists(d / "chat_template.jinja"))
    return ChatTemplate(read_file((d / "chat_template.jinja").string()), specials,
                        (d / "chat_template.jinja").string());
  const std::string where = (d / "tokenizer_config.json").string() + ": chat_template";
  ojson t = cfg.contains("chat_template") ? cfg["chat_template"] : ojson();
  if (t.is_null() && fs::exists(d / "chat_template.json")) {
    ojson j = read_object(d / "chat_template.json");
    if (j.contains("chat_template")) t = j["chat_template"];
  }
  if (t.is_null()) return std::nullopt;
  if (t.is_string()) return ChatTemplate(t.get<std::string>(), specials, where);
  if (!t.is_array()) throw UserError(where + ": expected a string or a list of {\"name\", \"template\"}");
  std::string dflt, tool_use, names;
  for (auto& e : t) {
    if (!e.is_object() || !e.contains("name") || !e.contains("template") || !e["name"].is_string() ||
        !e["template"].is_string())
      throw UserError(where + ": each entry of the list needs string \"name\" and \"template\"");
    const std::string n = e["name"].get<std::string>();
    names += (names.empty() ? "" : ", ") + n;
    if (n == "default") dflt = e["template"].get<std::string>();
    if (n == "tool_use") tool_use = e["template"].get<std::string>();
  }
  if (dflt.empty())
    throw UserError(where + ": several templates (" + names + ") and none named \"default\"",
                    "name the one to use \"default\", as transformers expects");
  return ChatTemplate(dflt, specials, where, tool_use);
}

}  // namespace

std::optional<ChatTemplate> ChatTemplate::from_dir(const std::string& model_dir) {
  const fs::path d(model_dir);
  ojson cfg = fs::exists(d / "tokenizer_config.json") ? read_object(d / "tokenizer_config.json") : ojson::object();
  auto t = template_in(d, cfg);
  if (t && cfg.contains("response_template")) t->response_template_ = cfg["response_template"];
  return t;
}

std::string ChatTemplate::apply(const ojson& messages, const ChatOptions& opt) const {
  const std::string& lbl = label();
  if (!messages.is_array())
    throw UserError(lbl + ": messages must be a list of {\"role\": ..., \"content\": ...} objects");
  if (opt.continue_final_message && opt.add_generation_prompt)
    throw UserError("continue_final_message and add_generation_prompt cannot both be set",
                    "continue the last message, or open a new assistant turn, not both");
  // As transformers normalizes: null-valued keys dropped; reasoning under its older names
  // also given as reasoning_content (and thinking, which gpt-oss templates read).
  ojson chat = ojson::array();
  for (auto& m : messages) {
    if (!m.is_object()) throw UserError(lbl + ": a message is not an object: " + m.dump());
    ojson n = ojson::object();
    for (auto& [k, v] : m.items())
      if (!v.is_null()) n[k] = v;
    for (const char* f : {"reasoning_content", "thinking", "reasoning"}) {
      if (!n.contains(f)) continue;
      ojson r = n[f], a = ojson::object();
      a["thinking"] = r;
      for (auto& [k, v] : n.items()) a[k] = v;
      a["reasoning_content"] = r;
      n = std::move(a);
      break;
    }
    chat.push_back(std::move(n));
  }
  std::string final_text;
  if (opt.continue_final_message) {
    if (chat.empty()) throw UserError("continue_final_message is set but the conversation is empty");
    ojson& last = chat.back();
    if (!last.contains("content"))
      throw UserError("continue_final_message is set but the final message has no content");
    ojson& c = last["content"];
    if (c.is_string()) {
      final_text = c.get<std::string>();
      c = final_text + kContinueTag;
    } else if (c.is_array()) {
      bool found = false;
      for (auto it = c.rbegin(); it != c.rend() && !found; ++it)
        if (it->is_object() && it->contains("text") && (*it)["text"].is_string()) {
          final_text = (*it)["text"].get<std::string>();
          (*it)["text"] = final_text + kContinueTag;
          found = true;
        }
      if (!found) throw UserError("continue_final_message is set but the final message has no text to continue");
    } else {
      throw UserError("continue_final_message is set but the final message's content is neither text nor a list");
    }
  }
  ojson vars = ojson::object();
  vars["messages"] = std::move(chat);
  vars["tools"] = opt.tools;
  vars["documents"] = nullptr;
  vars["add_generation_prompt"] = opt.add_generation_prompt;
  for (auto& [k, v] : specials_.items()) vars[k] = v;
  if (!opt.kwargs.is_null() && !opt.kwargs.is_object())
    throw UserError(lbl + ": chat_template_kwargs must be a JSON object, got " + opt.kwargs.dump());
  if (opt.kwargs.is_object())
    for (auto& [k, v] : opt.kwargs.items()) vars[k] = v;
  const JinjaTemplate& t = !opt.tools.is_null() && tool_use_ ? *tool_use_ : tpl_;
  std::string out = t.render(vars, opt.limits);
  if (!opt.continue_final_message) return out;
  // Cut at the tag so that the final message stays open, as transformers does.
  const std::string tag = kContinueTag, bare = strip(tag);
  if (out.find(strip(final_text)) == std::string::npos || out.find(bare) == std::string::npos)
    throw UserError(lbl + ": continue_final_message is set but the final message does not appear in the rendered chat",
                    "the template changes or drops the final message; end the prompt with a user message instead");
  size_t at = out.rfind(bare);
  if (out.compare(at, tag.size(), tag) == 0) return out.substr(0, at);
  std::string head = out.substr(0, at);
  while (!head.empty() && std::isspace(static_cast<unsigned char>(head.back()))) head.pop_back();
  return head;
}

std::string ChatTemplate::apply_prompt(const ojson& messages, const ojson& kwargs, const std::string& where,
                                       const ojson& tools) const {
  if (!messages.is_array() || messages.empty() || !messages.back().is_object())
    throw UserError(where + ": a conversational prompt must be a non-empty list of {\"role\", \"content\"} objects");
  ChatOptions o;
  o.add_generation_prompt = true;  // always, as GRPOTrainer._tokenize_prompts (TRL 1.x)
  if (!kwargs.is_null()) o.kwargs = kwargs;
  if (!tools.empty()) o.tools = tools;
  return apply(messages, o);
}

}  // namespace brl::tok
