// Hugging Face tokenizer.json, the way HF's tokenizers runs it: added tokens split out of the
// raw text (normalized ones after normalizing), normalizer, pre-tokenizer, BPE per
// pre-token, post-processor; decoding through the decoder chain. The stages live in
// pipeline.cpp, the BPE model in bpe.cpp; this file holds the added tokens, the special
// token ids of a model folder and the public API.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "tokenizer/bpe.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/text.h"
#include "util/error.h"
#include "util/file.h"

namespace brl::tok {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct AddedToken {
  std::string content;
  int32_t id;
  bool special, normalized, lstrip, rstrip, single_word;
};

// Added tokens of one kind (normalized or not), indexed by first byte, longest first, so
// that a scan finds HF's leftmost-longest match.
struct AddedSet {
  std::array<std::vector<const AddedToken*>, 256> by_first;
  bool empty = true;
  void add(const AddedToken* t) {
    by_first[static_cast<unsigned char>(t->content[0])].push_back(t);
    empty = false;
  }
  void finish() {
    for (auto& v : by_first)
      std::stable_sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->content.size() > b->content.size(); });
  }
};

uint32_t decode_cp(std::string_view s, size_t i, size_t* len) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = std::min(utf8_len(c), s.size() - i);
  *len = n;
  if (n == 1) return c;
  uint32_t cp = n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}
// Rust's char::is_whitespace (Unicode White_Space).
bool is_ws(uint32_t c) {
  return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}
// Word characters for single_word, as Rust's regex \w (HF's test): Alphabetic, marks,
// decimal digits, connector punctuation, joiners.
bool is_word_char(std::string_view ch) {
  if (ch.size() == 1) return ch[0] == '_' || std::isalnum(static_cast<unsigned char>(ch[0])) != 0;
  static const Regex word(R"(^[\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}])", "single_word");
  std::vector<std::pair<size_t, size_t>> m;
  word.find_all(ch, m);
  return !m.empty();
}
bool word_before(std::string_view s, size_t b) {
  size_t i = b;
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
  if (i > 0) --i;
  return is_word_char(s.substr(i, b - i));
}
bool word_after(std::string_view s, size_t e) {
  return is_word_char(s.substr(e, std::min(utf8_len(static_cast<unsigned char>(s[e])), s.size() - e)));
}

// Segment of the input: either text for the pipeline or an added token's id.
struct Seg {
  std::string text;
  int32_t id;  // -1: text
  bool at_start;
};

// Splits `text` by the tokens of `set` (HF's AddedVocabulary::find_matches).
void split_added(const AddedSet& set, const std::string& text, bool at_start, std::vector<Seg>& out) {
  if (set.empty) {
    out.push_back({text, -1, at_start});
    return;
  }
  size_t seg_start = 0, i = 0;
  while (i < text.size()) {
    const AddedToken* hit = nullptr;
    for (const AddedToken* t : set.by_first[static_cast<unsigned char>(text[i])])
      if (text.compare(i, t->content.size(), t->content) == 0) {
        hit = t;
        break;
      }
    if (!hit) {
      ++i;
      continue;
    }
    size_t b = i, e = i + hit->content.size();
    if (hit->single_word) {
      bool left_ok = b == 0 || !word_before(text, b);
      bool right_ok = e == text.size() || !word_after(text, e);
      if (!left_ok || !right_ok) {
        i = e;  // HF's scan resumes after a rejected match
        continue;
      }
    }
    if (hit->lstrip)
      while (b > seg_start) {
        size_t p = b - 1;
        while (p > seg_start && (static_cast<unsigned char>(text[p]) & 0xC0) == 0x80) --p;
        size_t n;
        if (!is_ws(decode_cp(text, p, &n))) break;
        b = p;
      }
    if (hit->rstrip)
      while (e < text.size()) {
        size_t n;
        if (!is_ws(decode_cp(text, e, &n))) break;
        e += n;
      }
    if (b > seg_start) out.push_back({text.substr(seg_start, b - seg_start), -1, at_start && seg_start == 0});
    out.push_back({"", hit->id, false});
    seg_start = i = e;
  }
  if (seg_start < text.size()) out.push_back({text.substr(seg_start), -1, at_start && seg_start == 0});
}

json parse_json(std::string_view text, const std::string& label) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) throw UserError(label + ": not valid JSON");
  return j;
}

json read_json(const fs::path& p) { return parse_json(read_file(p.string()), p.string()); }

}  // namespace

struct Tokenizer::Impl {
  std::string file;
  BpeModel bpe;
  Pipeline pipe;
  std::vector<AddedToken> added;
  AddedSet raw_added, norm_added;  // normalized: false / true
  std::unordered_map<std::string, int32_t> added_ids;
  std::vector<std::string> id_to_tok;
  std::vector<uint8_t> special;  // per id
  std::optional<int32_t> bos, pad;
  std::vector<int32_t> eos;
};

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::Tokenizer(const Tokenizer&) = default;
Tokenizer& Tokenizer::operator=(const Tokenizer&) = default;

Tokenizer Tokenizer::from_file(const std::string& path) { return from_json(read_file(path), path); }

Tokenizer Tokenizer::from_json(std::string_view text, const std::string& path) {
  json j = parse_json(text, path);
  auto t = std::make_shared<Impl>();
  t->file = path;
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object())
    throw UserError(path + ": no \"model\" object", "is this a Hugging Face tokenizer.json?");
  const json& m = j["model"];
  std::string type = m.value("type", std::string("BPE"));
  if (type != "BPE") throw UserError(path + ": model.type '" + type + "' is not supported (supported: BPE)");
  t->bpe.load(m, path);
  t->pipe.file = path;
  t->pipe.parse(j);

  int32_t max_id = t->bpe.max_id();
  const json& at = j.value("added_tokens", json::array());
  if (!at.is_array()) throw UserError(path + ": added_tokens must be an array");
  t->added.reserve(at.size());  // pointers into it are kept by the AddedSets
  for (size_t i = 0; i < at.size(); ++i) {
    const json& a = at[i];
    std::string f = "added_tokens[" + std::to_string(i) + "]";
    std::optional<int32_t> id = a.is_object() && a.contains("id") ? token_id(a["id"]) : std::nullopt;
    if (!id || !a.contains("content") || !a["content"].is_string() || a["content"].get<std::string>().empty())
      throw UserError(path + ": " + f + " needs a non-empty \"content\" and an \"id\" in [0, " +
                      std::to_string(kMaxTokenId) + "]");
    bool special = a.value("special", false);
    t->added.push_back({a["content"].get<std::string>(), *id, special, a.value("normalized", !special),
                        a.value("lstrip", false), a.value("rstrip", false), a.value("single_word", false)});
    max_id = std::max(max_id, t->added.back().id);
  }
  if (max_id < 0)  // found by fuzz/tokenizer_json_fuzz: a tokenizer that can say nothing
    throw UserError(path + ": no tokens: model.vocab and added_tokens are both empty",
                    "is this the tokenizer.json of a trained model?");
  t->id_to_tok.assign(static_cast<size_t>(max_id + 1), "");
  t->special.assign(static_cast<size_t>(max_id + 1), 0);
  for (auto& [s, id] : t->bpe.vocab()) t->id_to_tok[static_cast<size_t>(id)] = s;
  for (auto& a : t->added) {
    t->id_to_tok[static_cast<size_t>(a.id)] = a.content;
    t->special[static_cast<size_t>(a.id)] = a.special;
    t->added_ids[a.content] = a.id;
    // Without a normalizer the normalized text is the raw text: one pass suffices.
    (a.normalized && !t->pipe.norm.empty() ? t->norm_added : t->raw_added).add(&a);
  }
  t->raw_added.finish();
  t->norm_added.finish();
  for (int32_t id : t->pipe.prefix_ids)
    if (id < 0 || id > max_id)
      throw UserError(path + ": post_processor adds id " + std::to_string(id) + ", outside the vocabulary");
  for (int32_t id : t->pipe.suffix_ids)
    if (id < 0 || id > max_id)
      throw UserError(path + ": post_processor adds id " + std::to_string(id) + ", outside the vocabulary");
  Tokenizer tk;
  tk.impl_ = t;
  return tk;
}

Tokenizer Tokenizer::from_dir(const std::string& dir) {
  fs::path d(dir);
  if (!fs::exists(d / "tokenizer.json"))
    throw UserError("no tokenizer.json in '" + dir + "'", "a model folder needs the Hugging Face tokenizer.json");
  Tokenizer tk = from_file((d / "tokenizer.json").string());
  auto t = std::const_pointer_cast<Impl>(tk.impl_);
  // Ids as ints (config.json, generation_config.json) or token strings / {content: ...}
  // (tokenizer_config.json); null means "none".
  auto id_of = [&](const json& v, const std::string& where) -> std::optional<int32_t> {
    if (v.is_null()) return std::nullopt;
    if (v.is_number_integer()) {
      int64_t id = v.get<int64_t>();
      if (id < 0 || id >= tk.vocab_size())
        throw UserError(where + ": id " + std::to_string(id) + " is outside the vocabulary (size " +
                        std::to_string(tk.vocab_size()) + ")");
      return static_cast<int32_t>(id);
    }
    const json* s = &v;
    if (v.is_object() && v.contains("content")) s = &v["content"];
    if (!s->is_string()) throw UserError(where + ": expected a token id, a token string or {\"content\": ...}");
    auto id = tk.token_to_id(s->get<std::string>());
    if (!id) throw UserError(where + ": token '" + s->get<std::string>() + "' is not in tokenizer.json");
    return id;
  };
  std::optional<int32_t> bos, pad;
  std::vector<int32_t> eos;
  auto add_eos = [&](std::optional<int32_t> id) {
    if (id && std::find(eos.begin(), eos.end(), *id) == eos.end()) eos.push_back(*id);
  };
  // Precedence: generation_config.json, then config.json, then tokenizer_config.json; eos
  // ids from all three are kept (generation stops on any).
  for (auto [f, suffix] : {std::pair{"generation_config.json", "_id"}, std::pair{"config.json", "_id"},
                           std::pair{"tokenizer_config.json", ""}}) {
    if (!fs::exists(d / f)) continue;
    json j = read_json(d / f);
    if (!j.is_object()) throw UserError((d / f).string() + ": expected a JSON object");
    std::string file = (d / f).string();
    auto field = [&, suffix = suffix](const std::string& name) -> const json* {  // clang 14: no binding captures
      std::string k = name + suffix;
      return j.contains(k) ? &j[k] : nullptr;
    };
    if (auto* v = field("bos_token"); v && !bos) bos = id_of(*v, file + ": " + "bos_token" + suffix);
    if (auto* v = field("pad_token"); v && !pad) pad = id_of(*v, file + ": " + "pad_token" + suffix);
    if (auto* v = field("eos_token")) {
      std::string where = file + ": eos_token" + suffix;
      if (v->is_array()) {
        for (size_t i = 0; i < v->size(); ++i) add_eos(id_of((*v)[i], where + "[" + std::to_string(i) + "]"));
      } else {
        add_eos(id_of(*v, where));
      }
    }
  }
  t->bos = bos, t->pad = pad, t->eos = eos;
  try {
    if (auto c = ChatTemplate::from_dir(dir)) tk.chat_ = std::make_shared<const ChatTemplate>(std::move(*c));
  } catch (const UserError& e) {
    tk.chat_error_ = e.what();
  }
  return tk;
}

const ChatTemplate* Tokenizer::chat_template() const {
  if (!chat_error_.empty()) throw UserError(chat_error_);
  return chat_.get();
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  const Impl& t = *impl_;
  std::vector<int32_t> out;
  if (add_special) out.insert(out.end(), t.pipe.prefix_ids.begin(), t.pipe.prefix_ids.end());
  std::vector<Seg> raw, norm;
  split_added(t.raw_added, std::string(text), true, raw);
  std::vector<std::string> words;
  for (auto& s : raw) {
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    norm.clear();
    split_added(t.norm_added, t.pipe.normalize(std::move(s.text)), s.at_start, norm);
    for (auto& n : norm) {
      if (n.id >= 0) {
        out.push_back(n.id);
        continue;
      }
      words.clear();
      t.pipe.pre_tokenize({std::move(n.text), n.at_start}, words);
      for (auto& w : words) t.bpe.encode_word(w, t.pipe.byte_level, out);
    }
  }
  if (add_special) out.insert(out.end(), t.pipe.suffix_ids.begin(), t.pipe.suffix_ids.end());
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  const Impl& t = *impl_;
  std::vector<std::string> toks;
  toks.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= t.id_to_tok.size()) continue;  // HF drops unknown ids
    if (skip_special && t.special[static_cast<size_t>(id)]) continue;
    toks.push_back(t.id_to_tok[static_cast<size_t>(id)]);
  }
  if (t.pipe.dec.empty()) {  // HF joins with spaces when there is no decoder
    std::string s;
    for (size_t i = 0; i < toks.size(); ++i) s += (i ? " " : "") + toks[i];
    return s;
  }
  return t.pipe.decode(std::move(toks));
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_to_tok.size()); }
std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  std::string s(token);
  if (auto it = impl_->added_ids.find(s); it != impl_->added_ids.end()) return it->second;
  auto it = impl_->bpe.vocab().find(s);
  if (it == impl_->bpe.vocab().end()) return std::nullopt;
  return it->second;
}
std::string Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_to_tok.size()) return "";
  return impl_->id_to_tok[static_cast<size_t>(id)];
}
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::vector<int32_t> Tokenizer::eos_ids() const { return impl_->eos; }
std::optional<int32_t> Tokenizer::pad_id() const { return impl_->pad; }

std::vector<Tokenizer::Added> Tokenizer::added_tokens() const {
  std::vector<Added> out;
  for (const auto& a : impl_->added) out.push_back({a.content, a.id, a.special});
  return out;
}

}  // namespace brl::tok
