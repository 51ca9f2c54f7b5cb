#include "tasks/response_template.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>

#include "tokenizer/text.h"
#include "util/error.h"

namespace brl::tasks {

using ojson = nlohmann::ordered_json;

namespace {

[[noreturn]] void fail(const std::string& what) { throw ResponseParseError(what); }

// --- regular expressions ------------------------------------------------------------------

struct Match {
  size_t begin = 0, end = 0;
  std::vector<std::pair<std::string, std::optional<std::string>>> named;  // in the pattern's order
  std::optional<std::string> group(const std::string& name) const {
    for (const auto& [n, v] : named)
      if (n == name) return v;
    return std::nullopt;
  }
  bool has_group(const std::string& name) const {
    return std::any_of(named.begin(), named.end(), [&](const auto& g) { return g.first == name; });
  }
};

// A pattern as Python's `regex` module runs it with re.DOTALL: Unicode classes (\w, \s, \d), and
// \Z only at the very end (PCRE2's \Z also before a final newline: its \z is Python's \Z).
class Pattern {
 public:
  Pattern(const std::string& pattern, const std::string& where) {
    std::string pat;
    for (size_t i = 0; i < pattern.size(); ++i) {
      if (pattern[i] == '\\' && i + 1 < pattern.size()) {
        pat += '\\';
        pat += pattern[i + 1] == 'Z' ? 'z' : pattern[i + 1];
        ++i;
      } else {
        pat += pattern[i];
      }
    }
    int err = 0;
    PCRE2_SIZE off = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(), PCRE2_UTF | PCRE2_UCP | PCRE2_DOTALL,
                          &err, &off, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw UserError(where + ": regex /" + pattern + "/ does not compile (PCRE2 at offset " + std::to_string(off) +
                      ": " + reinterpret_cast<char*>(msg) + ")");
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
    uint32_t count = 0, size = 0;
    PCRE2_SPTR table = nullptr;
    pcre2_pattern_info(code_, PCRE2_INFO_NAMECOUNT, &count);
    pcre2_pattern_info(code_, PCRE2_INFO_NAMEENTRYSIZE, &size);
    pcre2_pattern_info(code_, PCRE2_INFO_NAMETABLE, &table);
    for (uint32_t i = 0; i < count; ++i) {
      const PCRE2_SPTR e = table + i * size;
      names_.emplace_back((e[0] << 8) | e[1], reinterpret_cast<const char*>(e + 2));
    }
    std::sort(names_.begin(), names_.end());  // by group number: the pattern's order
  }
  ~Pattern() { pcre2_code_free(code_); }
  Pattern(const Pattern&) = delete;
  Pattern& operator=(const Pattern&) = delete;

  std::vector<std::string> group_names() const {
    std::vector<std::string> out;
    for (const auto& [n, name] : names_) out.push_back(name);
    return out;
  }

  // The leftmost match at or after `from` (what came before is seen by lookbehinds).
  std::optional<Match> search(std::string_view s, size_t from) const {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
    const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), from, 0, md, nullptr);
    if (rc < 0) {
      pcre2_match_data_free(md);
      if (rc == PCRE2_ERROR_NOMATCH) return std::nullopt;
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      fail(std::string("regex match failed: ") + reinterpret_cast<char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const uint32_t pairs = pcre2_get_ovector_count(md);
    Match m{ov[0], ov[1], {}};
    for (const auto& [n, name] : names_) {
      std::optional<std::string> v;
      if (static_cast<uint32_t>(n) < pairs && ov[2 * n] != PCRE2_UNSET)
        v = std::string(s.substr(ov[2 * n], ov[2 * n + 1] - ov[2 * n]));
      m.named.emplace_back(name, std::move(v));
    }
    pcre2_match_data_free(md);
    return m;
  }

  // Every non-overlapping match, left to right (an empty match steps over one character).
  std::vector<Match> find_all(std::string_view s) const {
    std::vector<Match> out;
    size_t pos = 0;
    while (pos <= s.size()) {
      auto m = search(s, pos);
      if (!m) break;
      pos = m->end > m->begin   ? m->end
            : m->end < s.size() ? m->end + tok::utf8_len(static_cast<unsigned char>(s[m->end]))
                                : m->end + 1;
      out.push_back(std::move(*m));
    }
    return out;
  }

 private:
  pcre2_code* code_ = nullptr;
  std::vector<std::pair<int, std::string>> names_;
};

std::string escape(std::string_view lit) {
  std::string out;
  for (char c : lit) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out += '\\';
    out += c;
  }
  return out;
}

// Compiled patterns by source, for the content parsers' own patterns (tag_pattern, ...).
const Pattern& cached(const std::string& pattern) {
  thread_local std::map<std::string, std::unique_ptr<Pattern>> cache;
  if (cache.size() > 256 && !cache.count(pattern)) cache.clear();  // a template has a handful
  auto& p = cache[pattern];
  if (!p) {
    try {
      p = std::make_unique<Pattern>(pattern, "response template");
    } catch (const UserError& e) {
      cache.erase(pattern);
      fail(e.what());
    }
  }
  return *p;
}

// --- Python's text primitives -------------------------------------------------------------

// Python's str.isspace() for one code point.
bool py_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

uint32_t decode_at(std::string_view s, size_t i, size_t* len) {
  const auto b = static_cast<unsigned char>(s[i]);
  size_t n = tok::utf8_len(b);
  if (i + n > s.size()) n = 1;
  uint32_t c = n == 1 ? b : b & (0x7f >> n);
  for (size_t k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
  *len = n;
  return c;
}

// Python's str.strip() (Unicode whitespace).
std::string py_strip(std::string_view s) {
  size_t b = 0, e = s.size(), n = 0;
  while (b < e && py_space(decode_at(s, b, &n))) b += n;
  while (e > b) {
    size_t k = e - 1;
    while (k > b && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
    if (!py_space(decode_at(s, k, &n))) break;
    e = k;
  }
  return std::string(s.substr(b, e - b));
}

std::string ascii_lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Python's int(s) for ASCII text: surrounding whitespace, a sign, digits with single underscores
// between them.
std::optional<int64_t> py_int(std::string_view raw) {
  std::string s = py_strip(raw), digits;
  size_t i = 0;
  bool neg = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  for (; i < s.size(); ++i) {
    if (std::isdigit(static_cast<unsigned char>(s[i]))) digits += s[i];
    else if (s[i] == '_' && !digits.empty() && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])))
      continue;
    else return std::nullopt;
  }
  if (digits.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(digits.c_str(), &end, 10);
  if (errno == ERANGE) return std::nullopt;
  return neg ? -v : v;
}

// Python's float(s) for ASCII text: decimal and exponent forms, inf / infinity / nan.
std::optional<double> py_float(std::string_view raw) {
  std::string s = py_strip(raw), t;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_') {
      const bool ok = i > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
                      std::isdigit(static_cast<unsigned char>(s[i + 1]));
      if (!ok) return std::nullopt;
      continue;
    }
    t += c;
  }
  const std::string l = ascii_lower(t);
  const std::string body = (!l.empty() && (l[0] == '+' || l[0] == '-')) ? l.substr(1) : l;
  const double sign = (!l.empty() && l[0] == '-') ? -1.0 : 1.0;
  if (body == "inf" || body == "infinity") return sign * INFINITY;
  if (body == "nan") return NAN;
  // Digits, an optional point, an optional exponent: no hex, no words.
  static const std::string allowed = "0123456789.eE+-";
  if (body.empty() || body.find_first_not_of(allowed) != std::string::npos) return std::nullopt;
  bool digit = false;
  for (char c : body) {
    if (c == 'e' || c == 'E') break;
    digit = digit || std::isdigit(static_cast<unsigned char>(c));
  }
  if (!digit) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return v;
}

ojson json_number(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9.2e18) return static_cast<int64_t>(v);
  return v;
}

// Python's json.loads; nullopt where it raises.
std::optional<ojson> json_loads(std::string_view s) {
  auto j = ojson::parse(s, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// U+FDD2, a noncharacter transformers puts between the characters of a control token spelled
// out by ordinary tokens (so that it matches no anchor), removed from the values.
void strip_markers(ojson& v) {
  static const std::string kMarker = "\xEF\xB7\x92";
  auto strip = [](std::string s) {
    for (size_t at = s.find(kMarker); at != std::string::npos; at = s.find(kMarker, at)) s.erase(at, kMarker.size());
    return s;
  };
  if (v.is_string()) {
    v = strip(v.get<std::string>());
  } else if (v.is_array()) {
    for (auto& x : v) strip_markers(x);
  } else if (v.is_object()) {
    ojson out = ojson::object();
    for (auto& [k, x] : v.items()) {
      strip_markers(x);
      out[strip(k)] = std::move(x);
    }
    v = std::move(out);
  }
}

bool is_empty(const ojson& v) {
  return v.is_null() || ((v.is_array() || v.is_object()) && v.empty()) ||
         (v.is_string() && v.get_ref<const std::string&>().empty());
}

// --- content parsers (transformers' content_parsers.py) -----------------------------------

ojson parse_content(const std::optional<std::string>& text, const std::string& name, const ojson& args);

bool arg_bool(const ojson& args, const char* key, bool dflt) {
  return args.contains(key) && args[key].is_boolean() ? args[key].get<bool>() : dflt;
}
std::string arg_str(const ojson& args, const char* key, const std::string& dflt) {
  return args.contains(key) && args[key].is_string() ? args[key].get<std::string>() : dflt;
}

std::string text_of(const std::optional<std::string>& t, const ojson& args) {
  if (!t) fail("a content parser got no text (a group that did not take part in the match)");
  return arg_bool(args, "strip", true) ? py_strip(*t) : *t;
}

ojson parse_json(const std::string& text, const ojson& args) {
  static const std::string kOpen = "\x01", kClose = "\x02";
  const ojson delims = args.contains("string_delims") ? args["string_delims"] : ojson::array();
  if (!delims.empty() && (text.find(kOpen) != std::string::npos || text.find(kClose) != std::string::npos))
    fail("json: input contains reserved sentinel characters");
  std::string working = text;
  std::vector<std::string> captured;
  for (const auto& d : delims) {
    if (!d.is_array() || d.size() != 2 || !d[0].is_string() || !d[1].is_string())
      fail("json: string_delims must be [[open, close], ...]");
    const Pattern& p = cached(escape(d[0].get<std::string>()) + "(?P<body>.*?)" + escape(d[1].get<std::string>()));
    std::string out;
    size_t last = 0;
    for (const auto& m : p.find_all(working)) {
      out += working.substr(last, m.begin - last);
      captured.push_back(*m.group("body"));
      out += kOpen + std::to_string(captured.size() - 1) + kClose;
      last = m.end;
    }
    working = out + working.substr(last);
  }
  if (arg_bool(args, "unquoted_keys", false)) {
    const Pattern& p = cached(R"re("(?:\\.|[^"\\])*"|(?<=[{,])(?P<pre>\s*)(?P<key>\w+)(?P<post>\s*):)re");
    std::string out;
    size_t last = 0;
    for (const auto& m : p.find_all(working)) {
      out += working.substr(last, m.begin - last);
      if (!m.group("key")) out += working.substr(m.begin, m.end - m.begin);  // a whole string: as it is
      else out += *m.group("pre") + "\"" + *m.group("key") + "\"" + *m.group("post") + ":";
      last = m.end;
    }
    working = out + working.substr(last);
  }
  for (size_t i = 0; i < captured.size(); ++i) {
    const std::string key = kOpen + std::to_string(i) + kClose;
    const size_t at = working.find(key);
    if (at != std::string::npos) working.replace(at, key.size(), ojson(captured[i]).dump());
  }
  if (auto j = json_loads(working)) return *j;
  if (arg_bool(args, "allow_non_json", false)) return text_of(text, args);
  fail("json parser could not parse region as JSON: " + text);
}

ojson parse_xml_inline(const std::string& text, const ojson& args) {
  if (!args.contains("tag_pattern") || !args["tag_pattern"].is_string()) fail("xml-inline: 'tag_pattern' is required");
  const ojson value_parser = args.contains("value_parser") ? args["value_parser"] : ojson();
  const bool merge = arg_bool(args, "merge_duplicates", false);
  std::string by_group;
  ojson by_parsers;
  if (args.contains("value_parser_by")) {
    const auto& b = args["value_parser_by"];
    if (!b.is_object() || !b.contains("group") || !b["group"].is_string() || !b.contains("parsers") ||
        !b["parsers"].is_object())
      fail("xml-inline: 'value_parser_by' must be {\"group\": ..., \"parsers\": {...}}");
    by_group = b["group"].get<std::string>();
    by_parsers = b["parsers"];
  }
  auto sub_parse = [](const std::optional<std::string>& raw, const ojson& parser) -> ojson {
    if (parser.is_null()) return raw ? ojson(*raw) : ojson();
    return parse_content(raw, arg_str(parser, "name", "text"),
                         parser.contains("args") ? parser["args"] : ojson::object());
  };
  ojson out = ojson::object();
  std::set<std::string> merged;
  for (const auto& m : cached(args["tag_pattern"].get<std::string>()).find_all(text)) {
    const auto key = m.group("key");
    if (!m.has_group("key")) fail("xml-inline: tag_pattern must have a named group 'key'");
    if (!key) fail("xml-inline: the 'key' group did not take part in a match");
    ojson parser = value_parser;
    if (!by_group.empty()) {
      if (!m.has_group(by_group))
        fail("xml-inline: value_parser_by names group '" + by_group + "', not in tag_pattern");
      const auto g = m.group(by_group);
      if (g && by_parsers.contains(*g)) parser = by_parsers[*g];
    }
    const ojson value = sub_parse(m.has_group("value") ? m.group("value") : std::optional<std::string>(""), parser);
    if (out.contains(*key) && merge) {
      if (!merged.count(*key)) {
        out[*key] = ojson::array({out[*key]});
        merged.insert(*key);
      }
      out[*key].push_back(value);
    } else {
      out[*key] = value;
    }
  }
  return out;
}

ojson parse_kv_lines(const std::string& text, const ojson& args) {
  const std::string line_sep = arg_str(args, "line_sep", "\n"), kv_sep = arg_str(args, "kv_sep", ":");
  if (line_sep.empty() || kv_sep.empty()) fail("kv-lines: empty separator");
  const ojson parser = args.contains("value_parser") ? args["value_parser"] : ojson();
  ojson out = ojson::object();
  size_t pos = 0;
  while (true) {
    const size_t next = text.find(line_sep, pos);
    const std::string line =
        text_of(text.substr(pos, next == std::string::npos ? std::string::npos : next - pos), args);
    if (!line.empty() && line.find(kv_sep) != std::string::npos) {
      const size_t at = line.find(kv_sep);
      const std::string k = text_of(line.substr(0, at), args), v = text_of(line.substr(at + kv_sep.size()), args);
      out[k] = parser.is_null() ? ojson(v)
                                : parse_content(v, arg_str(parser, "name", "text"),
                                                parser.contains("args") ? parser["args"] : ojson::object());
    }
    if (next == std::string::npos) break;
    pos = next + line_sep.size();
  }
  return out;
}

// transformers' python-call-list grammar (docs/source/en/chat_response_parsing.md): a list of
// keyword-argument calls, `[get_weather(city='Paris', days=3), ping()]`.
class CallListParser {
 public:
  explicit CallListParser(std::string_view t) : t_(t) {}

  ojson run() {
    expect('[');
    ojson calls = items(']', [&] { return call(); });
    ws();
    if (p_ != t_.size()) bad("unexpected content after the closing ']'");
    return calls;
  }

 private:
  [[noreturn]] void bad(const std::string& what) { fail("python-call-list: " + what + " at " + std::to_string(p_)); }
  void ws() {
    while (p_ < t_.size() && (t_[p_] == ' ' || t_[p_] == '\t' || t_[p_] == '\n' || t_[p_] == '\r')) ++p_;
  }
  bool at(char c) {
    ws();
    return p_ < t_.size() && t_[p_] == c;
  }
  void expect(char c) {
    if (!at(c)) bad(std::string("expected '") + c + "'");
    ++p_;
  }
  template <class F>
  ojson items(char close, F item) {
    ojson out = ojson::array();
    if (at(close)) {
      ++p_;
      return out;
    }
    while (true) {
      out.push_back(item());
      if (at(close)) {
        ++p_;
        return out;
      }
      expect(',');
    }
  }
  static bool name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
  static bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
  // [A-Za-z_][A-Za-z0-9_]*(?:[-.][A-Za-z0-9_]+)*
  std::optional<std::string> name_here() {
    if (p_ >= t_.size() || !name_start(t_[p_])) return std::nullopt;
    size_t e = p_ + 1;
    while (e < t_.size() && name_char(t_[e])) ++e;
    while (e + 1 < t_.size() && (t_[e] == '-' || t_[e] == '.') && name_char(t_[e + 1])) {
      e += 2;
      while (e < t_.size() && name_char(t_[e])) ++e;
    }
    return std::string(t_.substr(p_, e - p_));
  }
  std::string name(const std::string& what) {
    ws();
    auto n = name_here();
    if (!n) bad("expected " + what);
    p_ += n->size();
    return *n;
  }
  std::optional<uint32_t> hex4(size_t at) const {
    if (at + 4 > t_.size()) return std::nullopt;
    uint32_t v = 0;
    for (size_t i = at; i < at + 4; ++i) {
      const char c = t_[i];
      if (!std::isxdigit(static_cast<unsigned char>(c))) return std::nullopt;
      v = v * 16 +
          static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (std::tolower(c) - 'a' + 10));
    }
    return v;
  }
  // '...' or "..." on one line, with JSON's escapes (and \' ); no lone surrogates.
  std::string string() {
    const char q = t_[p_];
    size_t e = p_ + 1;
    std::string out;
    while (true) {
      if (e >= t_.size() || t_[e] == '\n' || t_[e] == '\r') bad("invalid string");
      const char c = t_[e];
      if (c == q) break;
      if (c != '\\') {
        out += c;
        ++e;
        continue;
      }
      if (e + 1 >= t_.size() || t_[e + 1] == '\n' || t_[e + 1] == '\r') bad("invalid string");
      const char x = t_[e + 1];
      static const std::string simple = "\\'\"/bfnrt", mapped = "\\'\"/\b\f\n\r\t";
      if (const size_t k = simple.find(x); k != std::string::npos) {
        out += mapped[k];
        e += 2;
        continue;
      }
      if (x != 'u') bad("unsupported escape in a string");
      auto code = hex4(e + 2);
      if (!code) bad("unsupported escape in a string");
      e += 6;
      if (*code >= 0xD800 && *code <= 0xDBFF && e + 1 < t_.size() && t_[e] == '\\' && t_[e + 1] == 'u') {
        auto low = hex4(e + 2);
        if (low && *low >= 0xDC00 && *low <= 0xDFFF) {
          code = 0x10000 + ((*code - 0xD800) << 10) + (*low - 0xDC00);
          e += 6;
        }
      }
      if (*code >= 0xD800 && *code <= 0xDFFF) bad("lone surrogate escape in a string");
      out += tok::cp_to_utf8(*code);
    }
    p_ = e + 1;
    return out;
  }
  ojson value(int depth) {
    if (at('\'') || at('"')) return string();
    if (at('[') || at('{')) {
      if (depth >= 100) bad("lists and dicts nested more than 100 levels deep");
      const char open = t_[p_++];
      if (open == '[') return items(']', [&] { return value(depth + 1); });
      return unique(items('}', [&] { return pair(depth + 1); }));
    }
    // -?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
    size_t e = p_;
    if (e < t_.size() && t_[e] == '-') ++e;
    const size_t int_begin = e;
    if (e < t_.size() && t_[e] == '0') ++e;
    else
      while (e < t_.size() && std::isdigit(static_cast<unsigned char>(t_[e]))) ++e;
    if (e > int_begin) {
      bool integer = true;
      if (e + 1 < t_.size() && t_[e] == '.' && std::isdigit(static_cast<unsigned char>(t_[e + 1]))) {
        integer = false;
        ++e;
        while (e < t_.size() && std::isdigit(static_cast<unsigned char>(t_[e]))) ++e;
      }
      if (e < t_.size() && (t_[e] == 'e' || t_[e] == 'E')) {
        size_t x = e + 1;
        if (x < t_.size() && (t_[x] == '+' || t_[x] == '-')) ++x;
        if (x < t_.size() && std::isdigit(static_cast<unsigned char>(t_[x]))) {
          integer = false;
          e = x;
          while (e < t_.size() && std::isdigit(static_cast<unsigned char>(t_[e]))) ++e;
        }
      }
      const std::string lit(t_.substr(p_, e - p_));
      if (integer) {
        const auto v = lit.size() <= 17 ? py_int(lit) : std::nullopt;
        if (!v || std::llabs(*v) > (int64_t{1} << 53) - 1) bad("integer outside the range of -(2^53 - 1) to 2^53 - 1");
        p_ = e;
        return *v;
      }
      const double d = std::strtod(lit.c_str(), nullptr);
      if (std::isinf(d)) bad("number too large");
      p_ = e;
      return d;
    }
    if (auto n = name_here()) {
      static const std::map<std::string, ojson> constants = {{"True", true},   {"true", true},    {"False", false},
                                                             {"false", false}, {"None", nullptr}, {"null", nullptr}};
      if (auto it = constants.find(*n); it != constants.end()) {
        p_ += n->size();
        return it->second;
      }
    }
    bad("expected a string, number, list, dict, True, False or None");
  }
  ojson pair(int depth) {
    if (!(at('\'') || at('"'))) bad("dict keys must be strings");
    std::string key = string();
    expect(':');
    return ojson::array({key, value(depth)});
  }
  ojson unique(const ojson& pairs) {
    ojson out = ojson::object();
    for (const auto& kv : pairs) {
      const std::string k = kv[0].get<std::string>();
      if (out.contains(k)) bad("repeated name '" + k + "'");
      out[k] = kv[1];
    }
    return out;
  }
  ojson call() {
    std::string fn = name("a function name");
    expect('(');
    ojson args = unique(items(')', [&] {
      std::string key = name("a keyword argument (positional arguments and trailing commas are not supported)");
      if (!at('=')) bad("expected '=' (positional arguments are not supported)");
      ++p_;
      return ojson::array({key, value(0)});
    }));
    return {{"name", fn}, {"arguments", args}};
  }

  std::string_view t_;
  size_t p_ = 0;
};

ojson parse_content(const std::optional<std::string>& text, const std::string& name, const ojson& args_in) {
  const ojson args = args_in.is_object() ? args_in : ojson::object();
  if (name == "text") return text_of(text, args);
  const std::string t = text_of(text, ojson{{"strip", false}});
  if (name == "int") {
    if (auto v = py_int(text_of(text, args))) return *v;
    fail("int: not an integer: " + t);
  }
  if (name == "float") {
    if (auto v = py_float(text_of(text, args))) return *v;
    fail("float: not a number: " + t);
  }
  if (name == "bool") {
    const std::string l = ascii_lower(text_of(text, args));
    return l == "true" || l == "1";
  }
  if (name == "json") return parse_json(t, args);
  if (name == "xml-inline") return parse_xml_inline(t, args);
  if (name == "kv-lines") return parse_kv_lines(t, args);
  if (name == "python-call-list") return CallListParser(t).run();
  fail("unknown content parser '" + name + "'");
}

const std::set<std::string>& content_parsers() {
  static const std::set<std::string> s = {"text", "int",        "float",    "bool",
                                          "json", "xml-inline", "kv-lines", "python-call-list"};
  return s;
}

// --- transforms ---------------------------------------------------------------------------

// "{name}" or "{name.key.key}" (the whole string), as transformers' _PLACEHOLDER fullmatch.
std::optional<std::vector<std::string>> placeholder(const std::string& s) {
  if (s.size() < 3 || s.front() != '{' || s.back() != '}') return std::nullopt;
  std::vector<std::string> path(1);
  for (size_t i = 1; i + 1 < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '.') {
      if (path.back().empty()) return std::nullopt;
      path.emplace_back();
    } else if (std::isalnum(c) || c == '_' || c >= 0x80) {
      path.back() += s[i];
    } else {
      return std::nullopt;
    }
  }
  if (path.back().empty()) return std::nullopt;
  return path;
}

// A string mixing a placeholder with text: refused at load, as transformers refuses it.
bool mixes_placeholder(const std::string& s) {
  for (size_t b = s.find('{'); b != std::string::npos; b = s.find('{', b + 1)) {
    const size_t e = s.find('}', b);
    if (e == std::string::npos) break;
    if (placeholder(s.substr(b, e - b + 1)) && !placeholder(s)) return true;
  }
  return false;
}

void check_transform(const std::string& scope, const ojson& t) {
  if (t.is_object() || t.is_array()) {
    for (const auto& v : t) check_transform(scope, v);
  } else if (t.is_string() && mixes_placeholder(t.get<std::string>())) {
    throw UserError(scope + ": transform string " + t.dump() + " mixes a {placeholder} with literal text",
                    "use a whole-string placeholder (\"{content}\") or a plain literal");
  }
}

ojson apply_transform(const ojson& t, const ojson& scope) {
  if (t.is_object()) {
    ojson out = ojson::object();
    for (const auto& [k, v] : t.items()) out[k] = apply_transform(v, scope);
    return out;
  }
  if (t.is_array()) {
    ojson out = ojson::array();
    for (const auto& v : t) out.push_back(apply_transform(v, scope));
    return out;
  }
  if (!t.is_string()) return t;
  const auto path = placeholder(t.get<std::string>());
  if (!path) return t;
  if (!scope.contains((*path)[0])) fail("transform placeholder " + t.dump() + " is not defined");
  const ojson* v = &scope[(*path)[0]];
  for (size_t i = 1; i < path->size(); ++i) {
    if (!v->is_object() || !v->contains((*path)[i])) fail("transform placeholder " + t.dump() + " does not resolve");
    v = &(*v)[(*path)[i]];
  }
  return *v;
}

// --- tool-argument typing (transformers' _schema_types / _coerce) ----------------------------

void schema_types(const ojson& schema, std::vector<std::string>& out) {
  if (!schema.is_object()) return;
  if (schema.contains("type")) {
    const auto& t = schema["type"];
    if (t.is_string()) out.push_back(t.get<std::string>());
    if (t.is_array())
      for (const auto& x : t)
        if (x.is_string()) out.push_back(x.get<std::string>());
  }
  for (const char* u : {"anyOf", "oneOf"})
    if (schema.contains(u) && schema[u].is_array())
      for (const auto& c : schema[u]) schema_types(c, out);
  const bool nullable = schema.contains("nullable") && !is_empty(schema["nullable"]) &&
                        !(schema["nullable"].is_boolean() && !schema["nullable"].get<bool>()) &&
                        !(schema["nullable"].is_number() && schema["nullable"].get<double>() == 0);
  if (nullable && std::find(out.begin(), out.end(), "null") == out.end()) out.push_back("null");
}

ojson coerce(const std::string& raw, const std::vector<std::string>& types) {
  for (const auto& type : types) {
    if (type == "integer") {
      if (auto v = py_int(raw)) return *v;
      if (auto d = py_float(raw); d && std::isfinite(*d) && *d == std::floor(*d)) return json_number(*d);
    } else if (type == "number") {
      if (auto d = py_float(raw); d && std::isfinite(*d)) {
        if (*d == std::floor(*d) && raw.find('.') == std::string::npos) return json_number(*d);
        return *d;
      }
    } else if (type == "boolean") {
      const std::string l = ascii_lower(py_strip(raw));
      if (l == "true" || l == "1" || l == "false" || l == "0") return l == "true" || l == "1";
    } else if (type == "null") {
      const std::string s = py_strip(raw);
      if (s == "null" || s == "None") return nullptr;
    } else if (type == "object" || type == "array") {
      if (auto j = json_loads(raw); j && (type == "object" ? j->is_object() : j->is_array())) return *j;
    }
  }
  return raw;
}

}  // namespace

// --- the template ---------------------------------------------------------------------------

struct Field {
  std::string name;
  std::unique_ptr<Pattern> open, close;
  std::optional<std::vector<std::string>> open_literals, close_literals;
  std::string content = "text";
  ojson content_args = ojson::object();
  bool repeats = false, optional = true, transform_each = false;
  std::optional<std::string> join;
  ojson transform;  // null: none
};

struct ResponseTemplate::Impl {
  std::string source;
  ojson defaults = ojson::object();
  std::vector<std::unique_ptr<Field>> fields;  // in the template's order
  const Field* implicit = nullptr;
  std::unique_ptr<Pattern> start_anchor;
};

namespace {

// An anchor: a literal, a list of literals (any of them; the longest first), or a pattern.
std::unique_ptr<Pattern> compile_anchor(const std::string& scope, const ojson& spec, const std::string& literal_key,
                                        const std::string& pattern_key,
                                        std::optional<std::vector<std::string>>* literals = nullptr) {
  if (spec.contains(literal_key) && spec.contains(pattern_key))
    throw UserError(scope + ": cannot specify both '" + literal_key + "' and '" + pattern_key + "'");
  if (spec.contains(literal_key)) {
    const auto& raw = spec[literal_key];
    std::vector<std::string> lits;
    if (raw.is_string()) {
      lits.push_back(raw.get<std::string>());
    } else if (raw.is_array() && !raw.empty()) {
      for (const auto& s : raw) {
        if (!s.is_string()) throw UserError(scope + ": '" + literal_key + "' list must contain only strings");
        if (std::find(lits.begin(), lits.end(), s.get<std::string>()) == lits.end())
          lits.push_back(s.get<std::string>());
      }
    } else {
      throw UserError(scope + ": '" + literal_key + "' must be a string or a non-empty list of strings");
    }
    if (std::any_of(lits.begin(), lits.end(), [](const std::string& s) { return s.empty(); }))
      throw UserError(scope + ": '" + literal_key + "' literals cannot be empty strings");
    std::vector<std::string> ordered = lits;
    std::stable_sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
    std::string pat;
    for (const auto& s : ordered) pat += (pat.empty() ? "" : "|") + escape(s);
    if (literals) *literals = lits;
    return std::make_unique<Pattern>(pat, scope + ": " + literal_key);
  }
  if (spec.contains(pattern_key)) {
    if (!spec[pattern_key].is_string()) throw UserError(scope + ": '" + pattern_key + "' must be a string");
    return std::make_unique<Pattern>(spec[pattern_key].get<std::string>(), scope + ": " + pattern_key);
  }
  return nullptr;
}

std::unique_ptr<Field> build_field(const std::string& source, const std::string& name, const ojson& f) {
  static const std::set<std::string> allowed = {"open",     "open_pattern", "close",         "close_pattern",
                                                "content",  "content_args", "repeats",       "join",
                                                "optional", "transform",    "transform_each"};
  const std::string scope = source + ": field '" + name + "'";
  if (!f.is_object()) throw UserError(scope + " must be an object");
  for (const auto& [k, v] : f.items())
    if (!allowed.count(k)) throw UserError(scope + ": unknown key '" + k + "'");
  auto out = std::make_unique<Field>();
  out->name = name;
  if (f.contains("content")) {
    if (!f["content"].is_string() || !content_parsers().count(f["content"].get<std::string>()))
      throw UserError(scope + ": unknown content parser " + f["content"].dump(),
                      "one of text, int, float, bool, json, xml-inline, kv-lines, python-call-list");
    out->content = f["content"].get<std::string>();
  }
  out->open = compile_anchor(scope, f, "open", "open_pattern", &out->open_literals);
  out->close = compile_anchor(scope, f, "close", "close_pattern", &out->close_literals);
  auto flag = [&](const char* key, bool dflt) {
    if (!f.contains(key)) return dflt;
    if (!f[key].is_boolean()) throw UserError(scope + ": '" + key + "' must be true or false");
    return f[key].get<bool>();
  };
  out->repeats = flag("repeats", false);
  out->optional = flag("optional", true);
  out->transform_each = flag("transform_each", false);
  if (f.contains("content_args")) {
    if (!f["content_args"].is_object()) throw UserError(scope + ": 'content_args' must be an object");
    out->content_args = f["content_args"];
  }
  if (f.contains("join") && !f["join"].is_null()) {
    if (!f["join"].is_string()) throw UserError(scope + ": 'join' must be a string");
    if (!out->repeats) throw UserError(scope + ": 'join' requires 'repeats': true");
    out->join = f["join"].get<std::string>();
  }
  if (f.contains("transform")) out->transform = f["transform"];
  if (out->transform_each && out->transform.is_null())
    throw UserError(scope + ": transform_each is set but no transform was provided");
  if (!out->transform.is_null()) {
    check_transform(scope, out->transform);
  } else {
    std::vector<std::string> groups;
    for (const auto* p : {out->open.get(), out->close.get()})
      if (p)
        for (const auto& g : p->group_names()) groups.push_back(g);
    if (!groups.empty())
      throw UserError(scope + ": open_pattern/close_pattern name group(s) (" + groups[0] +
                          ", ...) but the field has no 'transform'",
                      "named captures reach the output only through a transform: add one, or drop the names");
  }
  return out;
}

// The state of one parse: transformers' ResponseParser fed the whole text, then finalized.
class Parser {
 public:
  Parser(const ResponseTemplate::Impl& t, const ojson& tools) : t_(t), out_(t.defaults), current_(t.implicit) {
    if (tools.is_array())
      for (const auto& tool : tools) {
        const ojson& fn = tool.is_object() && tool.contains("function") ? tool["function"] : tool;
        if (!fn.is_object() || !fn.contains("name") || !fn["name"].is_string()) continue;
        const ojson params = fn.contains("parameters") ? fn["parameters"] : ojson();
        params_[fn["name"].get<std::string>()] =
            params.is_object() && params.contains("properties") && params["properties"].is_object()
                ? params["properties"]
                : ojson::object();
      }
  }

  ojson run(std::string buffer) {
    buffer_ = std::move(buffer);
    // Anchors that match the empty string at the same place over and over (an empty open and an
    // empty close) would loop for ever (transformers' parser too): a parse that stops advancing
    // is refused.
    size_t last_pos = 0, stalls = 0;
    while (true) {
      if (pos_ == last_pos && ++stalls > 4 * t_.fields.size() + 4)
        fail("the template's anchors match without advancing");
      if (pos_ != last_pos) last_pos = pos_, stalls = 0;
      struct Best {
        bool open;
        const Field* field;
        Match m;
      };
      std::optional<Best> best;
      auto consider = [&](bool open, const Field* f) {
        auto m = (open ? f->open : f->close)->search(buffer_, pos_);
        if (!m) return;
        // Earliest start, then the longest, opens before closes, then the field's name.
        auto key = [](const Best& b) {
          return std::make_tuple(b.m.begin, -static_cast<int64_t>(b.m.end - b.m.begin), b.open ? 0 : 1, b.field->name);
        };
        Best cand{open, f, std::move(*m)};
        if (!best || key(cand) < key(*best)) best = std::move(cand);
      };
      if (current_ && current_ != t_.implicit) {
        if (current_->close) consider(false, current_);
      } else {
        for (const auto& f : t_.fields)
          if (f->open) consider(true, f.get());
        if (t_.implicit && t_.implicit->close) consider(false, t_.implicit);
      }
      if (!best) {
        if (pos_ < buffer_.size()) accumulate(buffer_.substr(pos_));
        pos_ = buffer_.size();
        close_current();
        break;
      }
      if (best->m.begin > pos_) accumulate(buffer_.substr(pos_, best->m.begin - pos_));
      pos_ = best->m.end;
      if (best->open) {
        close_current();
        current_ = best->field;
        take_captures(best->m);
        body_.clear();
        opened_ = true;
      } else {
        const bool had_content = opened_;
        take_captures(best->m);  // the close's join the open's
        close_current();
        if (!had_content && best->m.begin == best->m.end) break;
      }
    }
    for (const auto& f : t_.fields)
      if (!f->optional && !out_.contains(f->name)) fail("required field '" + f->name + "' missing from the response");
    ojson out = ojson::object();
    for (const auto& [k, v] : out_.items())
      if (t_.defaults.contains(k) || !is_empty(v)) out[k] = v;
    return out;
  }

 private:
  // A match's named groups that took part, into the transform's scope.
  void take_captures(const Match& m) {
    for (const auto& [n, v] : m.named)
      if (v) captures_[n] = *v;
  }

  void accumulate(const std::string& text) {
    if (text.empty() || !current_) return;
    opened_ = true;
    body_ += text;
  }

  void close_current() {
    if (current_ && opened_) {
      const Field& f = *current_;
      ojson value = parse_content(body_, f.content, f.content_args);
      if (!f.transform.is_null()) {
        if (f.transform_each) {
          if (!value.is_array()) fail("field '" + f.name + "': transform_each needs a list");
          ojson items = ojson::array();
          for (const auto& item : value) {
            if (!item.is_object()) fail("field '" + f.name + "': transform_each needs a list of objects");
            ojson scope = captures_;
            for (const auto& [k, v] : item.items()) scope[k] = v;
            items.push_back(apply_transform(f.transform, scope));
          }
          value = std::move(items);
        } else {
          ojson scope = captures_;
          scope["content"] = std::move(value);
          value = apply_transform(f.transform, scope);
        }
      }
      strip_markers(value);
      if (!params_.empty() && !f.content_args.contains("value_parser_by"))
        type_calls(value, f.content == "json" || f.content == "python-call-list");
      if (f.join) {
        if (!value.is_string()) fail("field '" + f.name + "': 'join' needs each match to parse to a string");
        if (!out_.contains(f.name) || out_[f.name].is_null()) out_[f.name] = value;
        else out_[f.name] = out_[f.name].get<std::string>() + *f.join + value.get<std::string>();
      } else if (f.repeats) {
        if (!out_.contains(f.name) || !out_[f.name].is_array()) out_[f.name] = ojson::array();
        out_[f.name].push_back(std::move(value));
      } else {
        out_[f.name] = std::move(value);
      }
    }
    current_ = t_.implicit;
    captures_ = ojson::object();
    body_.clear();
    opened_ = false;
  }

  // Tool-call arguments given as text, typed with the calling tool's schema.
  void type_calls(ojson& value, bool typed) {
    if (value.is_array()) {
      for (auto& v : value) type_calls(v, typed);
      return;
    }
    if (!value.is_object() || !value.contains("function") || !value["function"].is_object()) return;
    ojson& fn = value["function"];
    if (!fn.contains("name") || !fn["name"].is_string() || !fn.contains("arguments") || !fn["arguments"].is_object())
      return;
    auto it = params_.find(fn["name"].get<std::string>());
    if (it == params_.end() || it->second.empty()) return;
    const ojson& props = it->second;
    for (auto& [key, arg] : fn["arguments"].items()) {
      if (!props.contains(key)) continue;
      std::vector<std::string> types;
      schema_types(props[key], types);
      if (types.empty()) continue;
      const bool string_ok = std::find(types.begin(), types.end(), "string") != types.end();
      if (typed && string_ok) continue;
      if (arg.is_string()) {
        arg = coerce(arg.get<std::string>(), types);
      } else if (arg.is_array() && std::find(types.begin(), types.end(), "array") == types.end()) {
        for (auto& x : arg)
          if (x.is_string()) x = coerce(x.get<std::string>(), types);
      }
    }
  }

  const ResponseTemplate::Impl& t_;
  std::map<std::string, ojson> params_;
  ojson out_;
  const Field* current_ = nullptr;
  ojson captures_ = ojson::object();
  std::string body_, buffer_;
  size_t pos_ = 0;
  bool opened_ = false;
};

}  // namespace

ResponseTemplate ResponseTemplate::from_json(const ojson& spec, const std::string& source) {
  if (!spec.is_object()) throw UserError(source + ": a response template must be a JSON object");
  if (spec.contains("version") && spec["version"] != 1)
    throw UserError(source + ": unsupported response_template version " + spec["version"].dump(), "version 1");
  for (const auto& [k, v] : spec.items())
    if (k != "version" && k != "defaults" && k != "fields" && k != "start_anchor" && k != "start_anchor_pattern")
      throw UserError(source + ": unknown key '" + k + "' in the response template",
                      "keys: version, defaults, fields, start_anchor, start_anchor_pattern");
  auto impl = std::make_shared<Impl>();
  impl->source = source;
  if (spec.contains("defaults")) {
    if (!spec["defaults"].is_object()) throw UserError(source + ": 'defaults' must be an object");
    impl->defaults = spec["defaults"];
  }
  if (!spec.contains("fields") || !spec["fields"].is_object() || spec["fields"].empty())
    throw UserError(source + ": 'fields' must be a non-empty object");
  std::string implicit_names;
  for (const auto& [name, f] : spec["fields"].items()) {
    impl->fields.push_back(build_field(source, name, f));
    if (!impl->fields.back()->open) {
      implicit_names += (implicit_names.empty() ? "" : ", ") + name;
      if (impl->implicit)
        throw UserError(source + ": at most one field may omit 'open'/'open_pattern' (found " + implicit_names + ")");
      impl->implicit = impl->fields.back().get();
    }
  }
  impl->start_anchor = compile_anchor(source, spec, "start_anchor", "start_anchor_pattern");
  if (!impl->start_anchor)
    throw UserError(source + ": the response template needs 'start_anchor' or 'start_anchor_pattern'");
  ResponseTemplate t;
  t.impl_ = std::move(impl);
  return t;
}

ojson ResponseTemplate::parse(std::string_view prefix, std::string_view text, const ojson& tools) const {
  std::string buffer;
  if (!prefix.empty()) {
    size_t cut = 0;
    for (const auto& m : impl_->start_anchor->find_all(prefix)) cut = m.end;
    buffer = std::string(prefix.substr(cut));  // no anchor: the whole prefix, as transformers
  }
  buffer += text;
  return Parser(*impl_, tools).run(std::move(buffer));
}

bool ResponseTemplate::anchored(std::string_view prefix) const {
  return impl_->start_anchor->search(prefix, 0).has_value();
}

const std::string& ResponseTemplate::source() const { return impl_->source; }

std::vector<std::string> ResponseTemplate::builtin_names() { return {"qwen3", "llama3"}; }

ResponseTemplate ResponseTemplate::builtin(const std::string& name) {
  // Our own descriptions of the formats; tests/tasks/response_template_oracle_test.cpp checks
  // them against TRL's templates of the same names in transformers' parser.
  static const std::map<std::string, std::string> specs = {
      {"qwen3", R"({
        "defaults": {"role": "assistant"},
        "start_anchor": "<|im_start|>assistant\n",
        "fields": {
          "reasoning_content": {"open": "<think>", "close_pattern": "</think>\\s*"},
          "tool_calls": {"open": "<tool_call>", "close_pattern": "</tool_call>\\s*", "repeats": true,
                         "content": "json", "transform": {"type": "function", "function": "{content}"}},
          "content": {"close_pattern": "<\\|im_end\\|>\\s*"}
        }})"},
      {"llama3", R"({
        "defaults": {"role": "assistant"},
        "start_anchor": "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "fields": {
          "tool_calls": {"open_pattern": "\\{\"name\":\\s*\"(?P<name>[^\"]+)\",\\s*\"parameters\":\\s*",
                         "close_pattern": "\\}<\\|eot_id\\|>\\s*", "repeats": true, "content": "json",
                         "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}}},
          "content": {"close_pattern": "<\\|eot_id\\|>\\s*"}
        }})"},
  };
  auto it = specs.find(name);
  if (it == specs.end()) {
    std::string names;
    for (const auto& n : builtin_names()) names += (names.empty() ? "" : ", ") + n;
    throw UserError("no built-in response template named '" + name + "'",
                    "one of " + names + ", or the path of a JSON file with transformers' response_template format");
  }
  return from_json(ojson::parse(it->second), "response template '" + name + "'");
}

}  // namespace brl::tasks
