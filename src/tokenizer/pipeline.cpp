// Normalizer, pre-tokenizer, decoder and post-processor of a tokenizer.json (see pipeline.h).
#include "tokenizer/pipeline.h"

#include <nlohmann/json.hpp>

#include "tokenizer/bpe.h"
#include "util/error.h"
#include "util/json_int.h"

namespace brl::tok {

using json = nlohmann::json;

namespace {

const char* kMetaspace = "\xE2\x96\x81";  // ▁
const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string replace_all(std::string s, std::string_view a, std::string_view b) {
  if (a.empty()) return s;
  std::string out;
  size_t p = 0;
  for (size_t q; (q = s.find(a, p)) != std::string::npos; p = q + a.size()) out.append(s, p, q - p).append(b);
  out.append(s, p, std::string::npos);
  return out;
}

[[noreturn]] void unsupported(const std::string& file, const std::string& field, const std::string& value,
                              const std::string& supported) {
  throw UserError(file + ": " + field + " '" + value + "' is not supported (supported: " + supported + ")");
}

std::string type_of(const json& j, const std::string& file, const std::string& field) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    throw UserError(file + ": " + field + " has no \"type\"");
  return j["type"].get<std::string>();
}

// Optional fields are read with value(key, json()): const operator[] on an absent key is
// undefined behaviour in nlohmann (it read past the object's map; fuzz/tokenizer_json_fuzz).

// {"String": s} -> literal s (regex-escaped); {"Regex": r} -> r.
std::string pattern_regex(const json& p, const std::string& file, const std::string& field, bool* literal = nullptr,
                          std::string* text = nullptr) {
  if (p.is_object() && p.contains("String") && p["String"].is_string()) {
    std::string s = p["String"].get<std::string>();
    if (literal) *literal = true;
    if (text) *text = s;
    return "\\Q" + replace_all(s, "\\E", "\\E\\\\E\\Q") + "\\E";
  }
  if (p.is_object() && p.contains("Regex") && p["Regex"].is_string()) {
    if (literal) *literal = false;
    return p["Regex"].get<std::string>();
  }
  throw UserError(file + ": " + field + " must be {\"String\": ...} or {\"Regex\": ...}");
}

PreStep::Prepend parse_prepend(const json& j, const std::string& file, const std::string& field) {
  if (j.contains("prepend_scheme")) {
    std::string s = j["prepend_scheme"].get<std::string>();
    if (s == "always") return PreStep::kAlways;
    if (s == "first") return PreStep::kFirst;
    if (s == "never") return PreStep::kNever;
    unsupported(file, field + ".prepend_scheme", s, "always, first, never");
  }
  return j.value("add_prefix_space", true) ? PreStep::kAlways : PreStep::kNever;  // older files
}

void parse_normalizer(const json& n, Pipeline& p, const std::string& field) {
  if (n.is_null()) return;
  std::string type = type_of(n, p.file, field);
  if (type == "Sequence") {
    size_t i = 0;
    for (auto& x : n.value("normalizers", json::array()))
      parse_normalizer(x, p, field + ".normalizers[" + std::to_string(i++) + "]");
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    NormStep s{NormStep::kNorm};
    s.form = type == "NFC"    ? NormForm::kNFC
             : type == "NFD"  ? NormForm::kNFD
             : type == "NFKC" ? NormForm::kNFKC
                              : NormForm::kNFKD;
    p.norm.push_back(s);
  } else if (type == "Prepend") {
    p.norm.push_back({NormStep::kPrepend, NormForm::kNFC, n.value("prepend", std::string())});
  } else if (type == "Replace") {
    NormStep s{NormStep::kReplace};
    bool literal = false;
    std::string re = pattern_regex(n.value("pattern", json()), p.file, field + ".pattern", &literal, &s.a);
    if (!literal) s.re = std::make_shared<Regex>(re, p.file + ": " + field + ".pattern");
    s.b = n.value("content", std::string());
    p.norm.push_back(s);
  } else if (type == "Strip") {
    NormStep s{NormStep::kStrip};
    s.left = n.value("strip_left", true), s.right = n.value("strip_right", true);
    p.norm.push_back(s);
  } else {
    unsupported(p.file, field + ".type", type, "NFC, NFD, NFKC, NFKD, Prepend, Replace, Strip, Sequence");
  }
}

void parse_pre(const json& j, Pipeline& p, const std::string& field) {
  if (j.is_null()) return;
  std::string type = type_of(j, p.file, field);
  if (type == "Sequence") {
    size_t i = 0;
    for (auto& x : j.value("pretokenizers", json::array()))
      parse_pre(x, p, field + ".pretokenizers[" + std::to_string(i++) + "]");
  } else if (type == "ByteLevel") {
    PreStep s{PreStep::kByteLevel};
    s.add_prefix_space = j.value("add_prefix_space", false);
    if (j.value("use_regex", true)) s.re = std::make_shared<Regex>(kGpt2Pattern, p.file + ": " + field);
    p.pre.push_back(s);
  } else if (type == "Split") {
    PreStep s{PreStep::kSplit};
    std::string beh = j.value("behavior", std::string("Isolated"));
    if (beh == "Isolated") s.behavior = PreStep::kIsolated;
    else if (beh == "Removed") s.behavior = PreStep::kRemoved;
    else if (beh == "MergedWithPrevious") s.behavior = PreStep::kMergedWithPrevious;
    else if (beh == "MergedWithNext") s.behavior = PreStep::kMergedWithNext;
    else unsupported(p.file, field + ".behavior", beh, "Isolated, Removed, MergedWithPrevious, MergedWithNext");
    s.invert = j.value("invert", false);
    s.re = std::make_shared<Regex>(pattern_regex(j.value("pattern", json()), p.file, field + ".pattern"),
                                   p.file + ": " + field + ".pattern");
    p.pre.push_back(s);
  } else if (type == "Metaspace") {
    PreStep s{PreStep::kMetaspace};
    s.replacement = j.value("replacement", std::string(kMetaspace));
    s.prepend = parse_prepend(j, p.file, field);
    s.split = j.value("split", true);
    if (s.split)
      s.re =
          std::make_shared<Regex>(pattern_regex(json{{"String", s.replacement}}, p.file, field), p.file + ": " + field);
    p.pre.push_back(s);
  } else {
    unsupported(p.file, field + ".type", type, "ByteLevel, Split, Metaspace, Sequence");
  }
}

void parse_decoder(const json& d, Pipeline& p, const std::string& field) {
  if (d.is_null()) return;
  std::string type = type_of(d, p.file, field);
  if (type == "Sequence") {
    size_t i = 0;
    for (auto& x : d.value("decoders", json::array()))
      parse_decoder(x, p, field + ".decoders[" + std::to_string(i++) + "]");
  } else if (type == "ByteLevel") {
    p.dec.push_back({DecStep::kByteLevel});
  } else if (type == "Replace") {
    DecStep s{DecStep::kReplace};
    bool literal = false;
    pattern_regex(d.value("pattern", json()), p.file, field + ".pattern", &literal, &s.a);
    if (!literal) unsupported(p.file, field + ".pattern", "Regex", "String");
    s.b = d.value("content", std::string());
    p.dec.push_back(s);
  } else if (type == "ByteFallback") {
    p.dec.push_back({DecStep::kByteFallback});
  } else if (type == "Fuse") {
    p.dec.push_back({DecStep::kFuse});
  } else if (type == "Strip") {
    DecStep s{DecStep::kStrip, d.value("content", std::string(" "))};
    // HF's content is one char; an empty one made the strip loops spin `start` times.
    if (s.a.empty() || utf8_len(static_cast<unsigned char>(s.a[0])) != s.a.size())
      throw UserError(p.file + ": " + field + ".content '" + s.a + "' must be one character");
    try {  // not value("start", 0u): that casts a float such as 1e18, undefined behaviour
      s.start = json_int(d, "start", size_t{0}), s.stop = json_int(d, "stop", size_t{0});
    } catch (const json::type_error&) {
      throw UserError(p.file + ": " + field + ".start and .stop must be non-negative integers");
    }
    p.dec.push_back(s);
  } else if (type == "Metaspace") {
    DecStep s{DecStep::kMetaspace, d.value("replacement", std::string(kMetaspace))};
    s.prepend = parse_prepend(d, p.file, field);
    p.dec.push_back(s);
  } else {
    unsupported(p.file, field + ".type", type, "ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence");
  }
}

void parse_post(const json& j, Pipeline& p, const std::string& field) {
  if (j.is_null()) return;
  std::string type = type_of(j, p.file, field);
  auto ids_of = [&](const json& pair, const std::string& f) {  // Roberta/Bert: ["<s>", 0]
    std::optional<int32_t> id = pair.is_array() && pair.size() == 2 ? token_id(pair[1]) : std::nullopt;
    if (!id)
      throw UserError(p.file + ": " + f + " must be [token, id] with an id in [0, " + std::to_string(kMaxTokenId) +
                      "]");
    return *id;
  };
  if (type == "Sequence") {
    size_t i = 0;
    for (auto& x : j.value("processors", json::array()))
      parse_post(x, p, field + ".processors[" + std::to_string(i++) + "]");
  } else if (type == "ByteLevel") {
    // Only adjusts offsets; adds no tokens.
  } else if (type == "TemplateProcessing") {
    bool seen_seq = false;
    size_t i = 0;
    for (auto& item : j.value("single", json::array())) {
      std::string f = field + ".single[" + std::to_string(i++) + "]";
      if (item.contains("Sequence")) {
        seen_seq = true;
        continue;
      }
      if (!item.contains("SpecialToken")) throw UserError(p.file + ": " + f + " must be a SpecialToken or a Sequence");
      std::string id = item["SpecialToken"].value("id", std::string());
      const json& st = j.value("special_tokens", json::object());
      if (!st.contains(id) || !st[id].contains("ids"))
        throw UserError(p.file + ": " + field + ".special_tokens has no entry '" + id + "' (used by " + f + ")");
      for (auto& x : st[id]["ids"]) {
        std::optional<int32_t> tid = token_id(x);
        if (!tid)
          throw UserError(p.file + ": " + field + ".special_tokens['" + id + "'].ids has " + x.dump() +
                          ", not an id in [0, " + std::to_string(kMaxTokenId) + "]");
        (seen_seq ? p.suffix_ids : p.prefix_ids).push_back(*tid);
      }
    }
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    p.prefix_ids.push_back(ids_of(j.value("cls", json()), field + ".cls"));
    p.suffix_ids.push_back(ids_of(j.value("sep", json()), field + ".sep"));
  } else {
    unsupported(p.file, field + ".type", type,
                "TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence");
  }
}

}  // namespace

void Pipeline::parse(const json& j) {
  parse_normalizer(j.value("normalizer", json()), *this, "normalizer");
  parse_pre(j.value("pre_tokenizer", json()), *this, "pre_tokenizer");
  for (size_t i = 0; i + 1 < pre.size(); ++i)
    if (pre[i].kind == PreStep::kByteLevel)
      unsupported(file, "pre_tokenizer", "ByteLevel before another pre-tokenizer", "ByteLevel as the last step");
  byte_level = !pre.empty() && pre.back().kind == PreStep::kByteLevel;
  parse_decoder(j.value("decoder", json()), *this, "decoder");
  parse_post(j.value("post_processor", json()), *this, "post_processor");
}

std::string Pipeline::normalize(std::string s) const {
  for (auto& n : norm) {
    switch (n.kind) {
      case NormStep::kNorm: s = unicode_normalize(s, n.form); break;
      case NormStep::kPrepend:
        if (!s.empty()) s = n.a + s;
        break;
      case NormStep::kReplace:
        if (!n.re) {
          s = replace_all(std::move(s), n.a, n.b);
        } else {
          std::vector<std::pair<size_t, size_t>> m;
          n.re->find_all(s, m);
          std::string out;
          size_t last = 0;
          for (auto [b, e] : m) out.append(s, last, b - last).append(n.b), last = e;
          s = out.append(s, last, std::string::npos);
        }
        break;
      case NormStep::kStrip: {
        auto ws = [](unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };  // ASCII whitespace
        size_t b = 0, e = s.size();
        if (n.left)
          while (b < e && ws(static_cast<unsigned char>(s[b]))) ++b;
        if (n.right)
          while (e > b && ws(static_cast<unsigned char>(s[e - 1]))) --e;
        s = s.substr(b, e - b);
        break;
      }
      case NormStep::kLowercaseAscii: break;
    }
  }
  return s;
}

namespace {
// Splits `text` at the matches of `re` by HF's SplitDelimiterBehavior.
void split_by(const PreStep& st, const Piece& p, std::vector<Piece>& out) {
  std::vector<std::pair<size_t, size_t>> m;
  st.re->find_all(p.text, m);
  // Segments (begin, end, is_match) covering the text.
  struct Seg {
    size_t b, e;
    bool match;
  };
  std::vector<Seg> segs;
  size_t last = 0;
  for (auto [b, e] : m) {
    if (b > last) segs.push_back({last, b, st.invert});
    segs.push_back({b, e, !st.invert});
    last = e;
  }
  if (last < p.text.size()) segs.push_back({last, p.text.size(), st.invert});
  std::vector<std::pair<size_t, size_t>> pieces;
  for (size_t i = 0; i < segs.size(); ++i) {
    const Seg& s = segs[i];
    switch (st.behavior) {
      case PreStep::kIsolated: pieces.emplace_back(s.b, s.e); break;
      case PreStep::kRemoved:
        if (!s.match) pieces.emplace_back(s.b, s.e);
        break;
      case PreStep::kMergedWithPrevious:
        if (s.match && !pieces.empty() && !segs[i - 1].match) pieces.back().second = s.e;
        else pieces.emplace_back(s.b, s.e);
        break;
      case PreStep::kMergedWithNext:
        if (!s.match && i > 0 && segs[i - 1].match && !pieces.empty()) pieces.back().second = s.e;
        else pieces.emplace_back(s.b, s.e);
        break;
      case PreStep::kContiguous: pieces.emplace_back(s.b, s.e); break;
    }
  }
  for (auto [b, e] : pieces) out.push_back({p.text.substr(b, e - b), p.at_start && b == 0});
}
}  // namespace

void Pipeline::pre_tokenize(Piece piece, std::vector<std::string>& out) const {
  std::vector<Piece> cur, next;
  cur.push_back(std::move(piece));
  for (size_t k = 0; k < pre.size(); ++k) {
    const PreStep& st = pre[k];
    next.clear();
    for (auto& p : cur) {
      if (p.text.empty()) continue;
      if (st.kind == PreStep::kMetaspace) {
        p.text = replace_all(std::move(p.text), " ", st.replacement);
        bool starts = p.text.compare(0, st.replacement.size(), st.replacement) == 0;
        if (!starts && (st.prepend == PreStep::kAlways || (st.prepend == PreStep::kFirst && p.at_start)))
          p.text = st.replacement + p.text;
        if (st.split) {
          PreStep sp = st;
          sp.behavior = PreStep::kMergedWithNext;
          split_by(sp, p, next);
        } else {
          next.push_back(std::move(p));
        }
        continue;
      }
      if (st.kind == PreStep::kByteLevel && st.add_prefix_space && p.text[0] != ' ') p.text = " " + p.text;
      if (st.re) split_by(st, p, next);
      else next.push_back(std::move(p));
    }
    std::swap(cur, next);
  }
  for (auto& p : cur)
    if (!p.text.empty()) out.push_back(std::move(p.text));
}

std::string Pipeline::decode(std::vector<std::string> toks) const {
  for (const DecStep& d : dec) {
    switch (d.kind) {
      case DecStep::kByteLevel: {
        const ByteMap& bm = ByteMap::get();
        std::string bytes;
        for (auto& t : toks) {
          // A token whose characters all map back to bytes becomes those bytes; any other
          // (an added token such as "<|im_start|>" in Latin-1 range is fine) stays as is.
          std::string tb;
          bool ok = true;
          for (size_t i = 0; i < t.size() && ok;) {
            size_t n = utf8_len(static_cast<unsigned char>(t[i]));
            uint32_t cp = static_cast<unsigned char>(t[i]);
            if (n == 2 && i + 1 < t.size()) cp = ((cp & 0x1F) << 6) | (static_cast<unsigned char>(t[i + 1]) & 0x3F);
            else if (n != 1) cp = 0xFFFF;
            ok = cp < bm.dec.size() && bm.dec[cp] >= 0;
            if (ok) tb += static_cast<char>(bm.dec[cp]);
            i += n;
          }
          bytes += ok ? tb : t;
        }
        toks = {utf8_lossy(bytes)};
        break;
      }
      case DecStep::kReplace:
        for (auto& t : toks) t = replace_all(std::move(t), d.a, d.b);
        break;
      case DecStep::kMetaspace:
        for (size_t i = 0; i < toks.size(); ++i)
          toks[i] = replace_all(std::move(toks[i]), d.a, i == 0 && d.prepend != PreStep::kNever ? "" : " ");
        break;
      case DecStep::kByteFallback: {
        std::vector<std::string> out;
        std::string pending;
        size_t npending = 0;
        auto flush = [&] {
          if (!npending) return;
          if (is_valid_utf8(pending)) out.push_back(pending);
          else
            for (size_t k = 0; k < npending; ++k) out.push_back("\xEF\xBF\xBD");
          pending.clear(), npending = 0;
        };
        for (auto& t : toks) {
          auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
          if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && hex(t[3]) && hex(t[4])) {
            pending += static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16));
            ++npending;
            continue;
          }
          flush();
          out.push_back(std::move(t));
        }
        flush();
        toks = std::move(out);
        break;
      }
      case DecStep::kFuse: {
        std::string all;
        for (auto& t : toks) all += t;
        toks = {all};
        break;
      }
      case DecStep::kStrip:
        for (auto& t : toks) {
          // HF strips characters; the content is one character (usually a space).
          size_t b = 0, e = t.size();
          for (size_t n = 0; n < d.start && t.compare(b, d.a.size(), d.a) == 0 && b < e; ++n) b += d.a.size();
          for (size_t n = 0; n < d.stop && e >= b + d.a.size() && t.compare(e - d.a.size(), d.a.size(), d.a) == 0; ++n)
            e -= d.a.size();
          t = t.substr(b, e - b);
        }
        break;
    }
  }
  std::string out;
  for (auto& t : toks) out += t;
  return out;
}

}  // namespace brl::tok
