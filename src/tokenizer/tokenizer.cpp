// Hugging Face tokenizer.json: the pipeline normalizer -> pre-tokenizer -> BPE model ->
// post-processor, and the decoder back to text. Supported pieces (anything else is a
// UserError naming the file and the field):
//   normalizer: null, NFC (identity: see the note in apply_normalizer), Prepend, Replace, Sequence
//   pre_tokenizer: ByteLevel (GPT-2 regex), Split (regex or string, Isolated), Metaspace, Sequence
//   model: BPE (merges as "a b" or ["a","b"], byte_fallback, unk_token, ignore_merges)
//   decoder: ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence
//   post_processor: TemplateProcessing (single), ByteLevel, null
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/tokenizer.h"

#include <pcre2.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "util/error.h"

namespace brl::tok {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string cp_to_utf8(uint32_t c) {
  std::string s;
  if (c < 0x80) s += static_cast<char>(c);
  else if (c < 0x800) s += static_cast<char>(0xC0 | (c >> 6)), s += static_cast<char>(0x80 | (c & 0x3F));
  else if (c < 0x10000)
    s += static_cast<char>(0xE0 | (c >> 12)), s += static_cast<char>(0x80 | ((c >> 6) & 0x3F)), s += static_cast<char>(0x80 | (c & 0x3F));
  else
    s += static_cast<char>(0xF0 | (c >> 18)), s += static_cast<char>(0x80 | ((c >> 12) & 0x3F)),
        s += static_cast<char>(0x80 | ((c >> 6) & 0x3F)), s += static_cast<char>(0x80 | (c & 0x3F));
  return s;
}

// Length of the UTF-8 sequence starting with byte b (1 for invalid bytes).
size_t utf8_len(unsigned char b) { return b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1; }

std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t n = std::min(utf8_len(static_cast<unsigned char>(s[i])), s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

// GPT-2's reversible byte <-> printable-unicode map.
struct ByteMap {
  std::string enc[256];
  std::unordered_map<std::string, unsigned char> dec;
  ByteMap() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      enc[b] = cp_to_utf8(printable ? b : 256 + n++);
      dec[enc[b]] = static_cast<unsigned char>(b);
    }
  }
};
const ByteMap& byte_map() {
  static ByteMap m;
  return m;
}

struct Regex {
  pcre2_code* code = nullptr;
  explicit Regex(const std::string& pat, const std::string& where) {
    int err;
    PCRE2_SIZE off;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.c_str()), pat.size(), PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
    if (!code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw UserError(where + ": regex /" + pat + "/ does not compile: " + reinterpret_cast<char*>(msg));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  }
  ~Regex() { pcre2_code_free(code); }
  Regex(const Regex&) = delete;
  // Splits s into pieces: matches and the gaps between them (HF's "Isolated").
  std::vector<std::string> split_isolated(const std::string& s) const {
    std::vector<std::string> out;
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
    size_t pos = 0, last = 0;
    while (pos <= s.size()) {
      int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), pos, 0, md, nullptr);
      if (rc < 0) break;
      PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      size_t b = ov[0], e = ov[1];
      if (e == b) {  // empty match: step one character
        pos = b + (b < s.size() ? utf8_len(static_cast<unsigned char>(s[b])) : 1);
        continue;
      }
      if (b > last) out.push_back(s.substr(last, b - last));
      out.push_back(s.substr(b, e - b));
      last = pos = e;
    }
    if (last < s.size()) out.push_back(s.substr(last));
    pcre2_match_data_free(md);
    return out;
  }
};

struct PreStep {
  enum Kind { kByteLevel, kSplitRegex, kMetaspace } kind;
  std::shared_ptr<Regex> re;  // kByteLevel (when use_regex) and kSplitRegex
  bool byte_encode = false;
  std::string replacement = "\xE2\x96\x81";  // ▁
  bool prepend = true;
};

struct NormStep {
  enum Kind { kPrepend, kReplace } kind;
  std::string a, b;
};

struct DecStep {
  enum Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
  std::string a, b;
  int strip_start = 0, strip_stop = 0;
};

struct AddedToken {
  std::string content;
  int32_t id;
  bool special;
};

}  // namespace

struct Tokenizer::Impl {
  std::string source;
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<std::string> id_to_tok;
  std::map<std::pair<int32_t, int32_t>, std::pair<int32_t, int32_t>> merges;  // pair -> (rank, merged id)
  bool byte_fallback = false, ignore_merges = false;
  std::optional<int32_t> unk;
  std::vector<NormStep> norm;
  std::vector<PreStep> pre;
  std::vector<DecStep> dec;
  std::vector<AddedToken> added;  // longest first
  std::vector<int32_t> prefix_ids, suffix_ids;  // post-processor (add_special_tokens)
  std::optional<int32_t> bos, pad;
  std::vector<int32_t> eos;
  std::vector<bool> is_special;
  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  void bpe_word(const std::string& word, std::vector<int32_t>& out) const;
  std::vector<std::string> pre_tokenize(const std::string& text) const;
  std::string normalize(std::string s) const;
};

namespace {

std::string replace_all(std::string s, const std::string& a, const std::string& b) {
  if (a.empty()) return s;
  for (size_t p = 0; (p = s.find(a, p)) != std::string::npos; p += b.size()) s.replace(p, a.size(), b);
  return s;
}

std::string pattern_of(const json& pat, const std::string& where) {
  if (pat.contains("Regex")) return pat["Regex"].get<std::string>();
  if (pat.contains("String")) {  // literal: escape for PCRE2
    std::string s = pat["String"].get<std::string>(), r = "\\Q" + s + "\\E";
    return r;
  }
  throw UserError(where + ": pattern must be {\"Regex\": ...} or {\"String\": ...}");
}

void parse_normalizer(const json& n, Tokenizer::Impl& t, const std::string& where) {
  if (n.is_null()) return;
  std::string type = n.value("type", "");
  if (type == "Sequence") {
    for (auto& x : n["normalizers"]) parse_normalizer(x, t, where);
  } else if (type == "NFC" || type == "NFKC") {
    // Unicode normalization is not applied: text already in NFC (the usual case, and all
    // ASCII) tokenizes identically; decomposed input may differ from HF.
  } else if (type == "Prepend") {
    t.norm.push_back({NormStep::kPrepend, n.value("prepend", ""), ""});
  } else if (type == "Replace") {
    auto& p = n["pattern"];
    if (!p.contains("String")) throw UserError(where + ": normalizer Replace with a regex pattern is not supported");
    t.norm.push_back({NormStep::kReplace, p["String"].get<std::string>(), n.value("content", "")});
  } else {
    throw UserError(where + ": normalizer.type '" + type + "' is not supported",
                    "supported: NFC, Prepend, Replace, Sequence");
  }
}

void parse_pre(const json& p, Tokenizer::Impl& t, const std::string& where) {
  if (p.is_null()) return;
  std::string type = p.value("type", "");
  if (type == "Sequence") {
    for (auto& x : p["pretokenizers"]) parse_pre(x, t, where);
  } else if (type == "ByteLevel") {
    PreStep s{PreStep::kByteLevel};
    s.byte_encode = true;
    if (p.value("add_prefix_space", false)) throw UserError(where + ": pre_tokenizer ByteLevel add_prefix_space = true is not supported");
    if (p.value("use_regex", true)) s.re = std::make_shared<Regex>(kGpt2Pattern, where);
    t.pre.push_back(s);
  } else if (type == "Split") {
    std::string beh = p.value("behavior", "");
    if (beh != "Isolated" || p.value("invert", false))
      throw UserError(where + ": pre_tokenizer Split behavior '" + beh + "' is not supported", "supported: Isolated");
    PreStep s{PreStep::kSplitRegex};
    s.re = std::make_shared<Regex>(pattern_of(p["pattern"], where), where + ": pre_tokenizer.pattern");
    t.pre.push_back(s);
  } else if (type == "Metaspace") {
    PreStep s{PreStep::kMetaspace};
    s.replacement = p.value("replacement", std::string("\xE2\x96\x81"));
    s.prepend = p.value("prepend_scheme", std::string("always")) != "never" && p.value("add_prefix_space", true);
    t.pre.push_back(s);
  } else if (type == "Digits" || type == "Whitespace" || type == "BertPreTokenizer") {
    throw UserError(where + ": pre_tokenizer.type '" + type + "' is not supported", "supported: ByteLevel, Split, Metaspace, Sequence");
  } else {
    throw UserError(where + ": pre_tokenizer.type '" + type + "' is not supported", "supported: ByteLevel, Split, Metaspace, Sequence");
  }
}

void parse_decoder(const json& d, Tokenizer::Impl& t, const std::string& where) {
  if (d.is_null()) return;
  std::string type = d.value("type", "");
  if (type == "Sequence") {
    for (auto& x : d["decoders"]) parse_decoder(x, t, where);
  } else if (type == "ByteLevel") {
    t.dec.push_back({DecStep::kByteLevel});
  } else if (type == "Replace") {
    auto& p = d["pattern"];
    if (!p.contains("String")) throw UserError(where + ": decoder Replace with a regex pattern is not supported");
    t.dec.push_back({DecStep::kReplace, p["String"].get<std::string>(), d.value("content", "")});
  } else if (type == "ByteFallback") {
    t.dec.push_back({DecStep::kByteFallback});
  } else if (type == "Fuse") {
    t.dec.push_back({DecStep::kFuse});
  } else if (type == "Strip") {
    DecStep s{DecStep::kStrip, d.value("content", " "), ""};
    s.strip_start = d.value("start", 0);
    s.strip_stop = d.value("stop", 0);
    t.dec.push_back(s);
  } else if (type == "Metaspace") {
    t.dec.push_back({DecStep::kMetaspace, d.value("replacement", std::string("\xE2\x96\x81")), ""});
  } else {
    throw UserError(where + ": decoder.type '" + type + "' is not supported");
  }
}

std::optional<std::string> token_string(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

json read_json(const fs::path& p) {
  std::ifstream f(p);
  if (!f) throw UserError("cannot read '" + p.string() + "'");
  json j = json::parse(f, nullptr, false);
  if (j.is_discarded()) throw UserError(p.string() + ": not valid JSON");
  return j;
}

}  // namespace

std::string Tokenizer::Impl::normalize(std::string s) const {
  for (auto& n : norm) s = n.kind == NormStep::kPrepend ? (s.empty() ? s : n.a + s) : replace_all(s, n.a, n.b);
  return s;
}

std::vector<std::string> Tokenizer::Impl::pre_tokenize(const std::string& text) const {
  std::vector<std::string> pieces = {text};
  for (auto& p : pre) {
    std::vector<std::string> next;
    for (auto& piece : pieces) {
      if (p.kind == PreStep::kMetaspace) {
        std::string s = replace_all(piece, " ", p.replacement);
        if (p.prepend && s.rfind(p.replacement, 0) != 0) s = p.replacement + s;
        next.push_back(s);
        continue;
      }
      std::vector<std::string> parts = p.re ? p.re->split_isolated(piece) : std::vector<std::string>{piece};
      for (auto& part : parts) {
        if (p.byte_encode) {
          std::string enc;
          for (unsigned char c : part) enc += byte_map().enc[c];
          next.push_back(enc);
        } else {
          next.push_back(part);
        }
      }
    }
    pieces = std::move(next);
  }
  return pieces;
}

void Tokenizer::Impl::bpe_word(const std::string& word, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    auto it = vocab.find(word);
    if (it != vocab.end()) return out.push_back(it->second);
  }
  {
    std::lock_guard<std::mutex> g(cache_mu);
    auto c = cache.find(word);
    if (c != cache.end()) {
      out.insert(out.end(), c->second.begin(), c->second.end());
      return;
    }
  }
  std::vector<int32_t> syms;
  for (auto& ch : utf8_chars(word)) {
    auto it = vocab.find(ch);
    if (it != vocab.end()) syms.push_back(it->second);
    else if (byte_fallback) {
      for (unsigned char b : ch) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "<0x%02X>", b);
        auto bt = vocab.find(buf);
        if (bt == vocab.end()) throw UserError(source + ": byte_fallback token " + std::string(buf) + " missing from model.vocab");
        syms.push_back(bt->second);
      }
    } else if (unk) {
      syms.push_back(*unk);
    } else {
      throw UserError(source + ": character '" + ch + "' is not in the vocabulary and there is no unk_token or byte_fallback");
    }
  }
  // Repeatedly merge the lowest-ranked adjacent pair (HF's BPE without dropout).
  while (syms.size() > 1) {
    int32_t best_rank = INT32_MAX, best_id = -1;
    size_t best_i = 0;
    for (size_t i = 0; i + 1 < syms.size(); ++i) {
      auto m = merges.find({syms[i], syms[i + 1]});
      if (m != merges.end() && m->second.first < best_rank) best_rank = m->second.first, best_id = m->second.second, best_i = i;
    }
    if (best_id < 0) break;
    std::vector<int32_t> next;
    for (size_t i = 0; i < syms.size(); ++i) {
      if (i + 1 < syms.size() && syms[i] == syms[best_i] && syms[i + 1] == syms[best_i + 1] &&
          merges.at({syms[i], syms[i + 1]}).first == best_rank) {
        next.push_back(best_id);
        ++i;
      } else {
        next.push_back(syms[i]);
      }
    }
    syms = std::move(next);
  }
  {
    std::lock_guard<std::mutex> g(cache_mu);
    if (cache.size() < 200000) cache.emplace(word, syms);
  }
  out.insert(out.end(), syms.begin(), syms.end());
}

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::Tokenizer(const Tokenizer&) = default;
Tokenizer& Tokenizer::operator=(const Tokenizer&) = default;

Tokenizer Tokenizer::from_file(const std::string& path) {
  json j = read_json(path);
  auto t = std::make_shared<Impl>();
  t->source = path;
  if (!j.is_object() || !j.contains("model")) throw UserError(path + ": no \"model\" section", "is this a Hugging Face tokenizer.json?");
  const json& m = j["model"];
  std::string type = m.value("type", "BPE");
  if (type != "BPE") throw UserError(path + ": model.type '" + type + "' is not supported (supported: BPE)");
  if (!m.contains("vocab") || !m["vocab"].is_object()) throw UserError(path + ": model.vocab must be an object of token -> id");
  int32_t max_id = -1;
  for (auto& [tokstr, id] : m["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) throw UserError(path + ": model.vocab['" + tokstr + "'] is not a non-negative id");
    t->vocab[tokstr] = id.get<int32_t>();
    max_id = std::max(max_id, id.get<int32_t>());
  }
  t->byte_fallback = m.value("byte_fallback", false);
  t->ignore_merges = m.value("ignore_merges", false);
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    auto it = t->vocab.find(m["unk_token"].get<std::string>());
    if (it != t->vocab.end()) t->unk = it->second;
  }
  int32_t rank = 0;
  for (auto& mg : m.value("merges", json::array())) {
    std::string a, b;
    if (mg.is_string()) {
      std::string s = mg.get<std::string>();
      auto sp = s.find(' ', 1);
      if (sp == std::string::npos) throw UserError(path + ": model.merges[" + std::to_string(rank) + "] '" + s + "' is not \"a b\"");
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else if (mg.is_array() && mg.size() == 2) {
      a = mg[0].get<std::string>(), b = mg[1].get<std::string>();
    } else {
      throw UserError(path + ": model.merges[" + std::to_string(rank) + "] must be \"a b\" or [a, b]");
    }
    auto ia = t->vocab.find(a), ib = t->vocab.find(b), ic = t->vocab.find(a + b);
    if (ia == t->vocab.end() || ib == t->vocab.end() || ic == t->vocab.end())
      throw UserError(path + ": model.merges[" + std::to_string(rank) + "] '" + a + " " + b + "' uses tokens missing from model.vocab");
    t->merges.emplace(std::make_pair(ia->second, ib->second), std::make_pair(rank, ic->second));
    ++rank;
  }
  for (auto& a : j.value("added_tokens", json::array())) {
    AddedToken at{a.value("content", ""), a.value("id", -1), a.value("special", false)};
    if (at.content.empty() || at.id < 0) throw UserError(path + ": added_tokens entry without content or id");
    t->added.push_back(at);
    max_id = std::max(max_id, at.id);
  }
  std::sort(t->added.begin(), t->added.end(), [](auto& x, auto& y) { return x.content.size() > y.content.size(); });
  t->id_to_tok.assign(static_cast<size_t>(max_id + 1), "");
  t->is_special.assign(static_cast<size_t>(max_id + 1), false);
  for (auto& [s, id] : t->vocab) t->id_to_tok[static_cast<size_t>(id)] = s;
  for (auto& a : t->added) t->id_to_tok[static_cast<size_t>(a.id)] = a.content, t->is_special[static_cast<size_t>(a.id)] = a.special;
  parse_normalizer(j.value("normalizer", json()), *t, path);
  parse_pre(j.value("pre_tokenizer", json()), *t, path);
  parse_decoder(j.value("decoder", json()), *t, path);
  const json& pp = j.value("post_processor", json());
  if (pp.is_object() && pp.value("type", "") == "TemplateProcessing") {
    bool seen_a = false;
    for (auto& item : pp["single"]) {
      if (item.contains("Sequence")) {
        seen_a = true;
        continue;
      }
      std::string id = item["SpecialToken"]["id"].get<std::string>();
      auto& st = pp["special_tokens"][id];
      for (auto& x : st["ids"]) (seen_a ? t->suffix_ids : t->prefix_ids).push_back(x.get<int32_t>());
    }
  } else if (pp.is_object() && pp.value("type", "") == "Sequence") {
    for (auto& p : pp["processors"])
      if (p.value("type", "") == "TemplateProcessing") {
        bool seen_a = false;
        for (auto& item : p["single"]) {
          if (item.contains("Sequence")) {
            seen_a = true;
            continue;
          }
          std::string id = item["SpecialToken"]["id"].get<std::string>();
          for (auto& x : p["special_tokens"][id]["ids"]) (seen_a ? t->suffix_ids : t->prefix_ids).push_back(x.get<int32_t>());
        }
      }
  }
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
  auto id_of = [&](const json& v) -> std::optional<int32_t> {
    if (v.is_number_integer()) return v.get<int32_t>();
    if (auto s = token_string(v)) return tk.token_to_id(*s);
    return std::nullopt;
  };
  auto add_eos = [&](const json& v) {
    if (v.is_array())
      for (auto& x : v) {
        if (auto i = id_of(x)) t->eos.push_back(*i);
      }
    else if (auto i = id_of(v))
      t->eos.push_back(*i);
  };
  for (const char* f : {"config.json", "generation_config.json"}) {
    if (!fs::exists(d / f)) continue;
    json j = read_json(d / f);
    if (j.contains("bos_token_id") && !j["bos_token_id"].is_null()) t->bos = id_of(j["bos_token_id"]);
    if (j.contains("eos_token_id") && !j["eos_token_id"].is_null()) t->eos.clear(), add_eos(j["eos_token_id"]);
    if (j.contains("pad_token_id") && !j["pad_token_id"].is_null()) t->pad = id_of(j["pad_token_id"]);
  }
  if (fs::exists(d / "tokenizer_config.json")) {
    json j = read_json(d / "tokenizer_config.json");
    if (j.contains("bos_token") && !j["bos_token"].is_null() && !t->bos) t->bos = id_of(j["bos_token"]);
    if (j.contains("eos_token") && !j["eos_token"].is_null()) {
      auto e = id_of(j["eos_token"]);
      if (e && std::find(t->eos.begin(), t->eos.end(), *e) == t->eos.end()) t->eos.push_back(*e);
    }
    if (j.contains("pad_token") && !j["pad_token"].is_null() && !t->pad) t->pad = id_of(j["pad_token"]);
  }
  return tk;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text_in, bool add_special) const {
  const Impl& t = *impl_;
  std::vector<int32_t> out;
  if (add_special) out.insert(out.end(), t.prefix_ids.begin(), t.prefix_ids.end());
  std::string text(text_in);
  // Split out added tokens (longest first at each position), then run the pipeline on the gaps.
  size_t start = 0;
  auto flush = [&](size_t end) {
    if (end <= start) return;
    std::string seg = t.normalize(text.substr(start, end - start));
    for (auto& piece : t.pre_tokenize(seg))
      if (!piece.empty()) t.bpe_word(piece, out);
  };
  for (size_t i = 0; i < text.size();) {
    const AddedToken* hit = nullptr;
    for (auto& a : t.added)
      if (text.compare(i, a.content.size(), a.content) == 0) {
        hit = &a;
        break;
      }
    if (!hit) {
      ++i;
      continue;
    }
    flush(i);
    out.push_back(hit->id);
    i += hit->content.size();
    start = i;
  }
  flush(text.size());
  if (add_special) out.insert(out.end(), t.suffix_ids.begin(), t.suffix_ids.end());
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  const Impl& t = *impl_;
  std::vector<std::string> toks;
  std::vector<bool> added_tok;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= t.id_to_tok.size()) continue;
    if (skip_special && t.is_special[static_cast<size_t>(id)]) continue;
    toks.push_back(t.id_to_tok[static_cast<size_t>(id)]);
    bool is_added = std::any_of(t.added.begin(), t.added.end(), [&](auto& a) { return a.id == id; });
    added_tok.push_back(is_added);
  }
  // Added tokens pass through verbatim; the decoder chain runs on the runs between them.
  std::string result;
  size_t i = 0;
  while (i < toks.size()) {
    if (added_tok[i]) {
      result += toks[i++];
      continue;
    }
    std::vector<std::string> run;
    while (i < toks.size() && !added_tok[i]) run.push_back(toks[i++]);
    for (auto& d : t.dec) {
      switch (d.kind) {
        case DecStep::kByteLevel: {
          std::string joined;
          for (auto& s : run) joined += s;
          std::string bytes;
          for (auto& ch : utf8_chars(joined)) {
            auto it = byte_map().dec.find(ch);
            bytes += it != byte_map().dec.end() ? std::string(1, static_cast<char>(it->second)) : ch;
          }
          run = {bytes};
          break;
        }
        case DecStep::kReplace:
          for (auto& s : run) s = replace_all(s, d.a, d.b);
          break;
        case DecStep::kMetaspace:
          for (size_t k = 0; k < run.size(); ++k) {
            run[k] = replace_all(run[k], d.a, " ");
            if (k == 0 && result.empty() && !run[k].empty() && run[k][0] == ' ') run[k].erase(0, 1);
          }
          break;
        case DecStep::kByteFallback: {
          std::vector<std::string> next;
          std::string pending;
          for (auto& s : run) {
            unsigned v;
            if (s.size() == 6 && s.rfind("<0x", 0) == 0 && s[5] == '>' && std::sscanf(s.c_str(), "<0x%2X>", &v) == 1) {
              pending += static_cast<char>(v);
              continue;
            }
            if (!pending.empty()) next.push_back(pending), pending.clear();
            next.push_back(s);
          }
          if (!pending.empty()) next.push_back(pending);
          run = std::move(next);
          break;
        }
        case DecStep::kFuse: {
          std::string joined;
          for (auto& s : run) joined += s;
          run = {joined};
          break;
        }
        case DecStep::kStrip:
          for (size_t k = 0; k < run.size(); ++k) {
            std::string& s = run[k];
            for (int n = 0; n < d.strip_start && s.compare(0, d.a.size(), d.a) == 0; ++n) s.erase(0, d.a.size());
            for (int n = 0; n < d.strip_stop && s.size() >= d.a.size() && s.compare(s.size() - d.a.size(), d.a.size(), d.a) == 0; ++n)
              s.erase(s.size() - d.a.size());
          }
          break;
      }
    }
    for (auto& s : run) result += s;
  }
  return result;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_to_tok.size()); }
std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (auto& a : impl_->added)
    if (a.content == token) return a.id;
  auto it = impl_->vocab.find(std::string(token));
  if (it == impl_->vocab.end()) return std::nullopt;
  return it->second;
}
std::string Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_to_tok.size()) return "";
  return impl_->id_to_tok[static_cast<size_t>(id)];
}
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::vector<int32_t> Tokenizer::eos_ids() const { return impl_->eos; }
std::optional<int32_t> Tokenizer::pad_id() const { return impl_->pad; }

}  // namespace brl::tok
