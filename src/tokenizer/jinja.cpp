// Jinja2 subset for chat templates (see jinja.h): lexer, parser to a small AST, tree-walking
// interpreter over Python-like values. The reference is jinja2 3.1 as transformers configures
// it; tests/tokenizer/chat_template_oracle_test.cpp compares renders with it.
#include "tokenizer/jinja.h"

#include <nlohmann/json.hpp>
#include <unicode/uchar.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <ctime>
#include <functional>
#include <unordered_map>

#include "tokenizer/text.h"
#include "util/error.h"
#include "util/xml.h"

namespace brl::tok {
namespace {

// ---------------------------------------------------------------------------------------
// Values: Python's, as the template sees them. Lists, tuples and dicts are immutable once
// built (the immutable sandbox refuses mutating methods), so they are shared; namespaces are
// the one mutable kind.

struct Value;
using List = std::vector<Value>;
struct Dict;
struct Fn;
struct Interp;
struct Args;

enum class T : uint8_t { Undef, None, Bool, Int, Float, Str, List, Tuple, Dict, Ns, Fn };

struct Value {
  T t = T::Undef;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                  // Str; Undef: what was missing, for the error message
  std::shared_ptr<const List> l;  // List, Tuple
  std::shared_ptr<Dict> d;        // Dict, Ns
  std::shared_ptr<const Fn> fn;

  static Value undef(std::string what) {
    Value v;
    v.s = std::move(what);
    return v;
  }
  static Value none() { return make(T::None); }
  static Value boolean(bool x) {
    Value v = make(T::Bool);
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v = make(T::Int);
    v.i = x;
    return v;
  }
  static Value real(double x) {
    Value v = make(T::Float);
    v.f = x;
    return v;
  }
  static Value str(std::string x) {
    Value v = make(T::Str);
    v.s = std::move(x);
    return v;
  }
  static Value list(List x, T kind = T::List) {
    Value v = make(kind);
    v.l = std::make_shared<const List>(std::move(x));
    return v;
  }
  static Value dict(std::shared_ptr<Dict> x, T kind = T::Dict) {
    Value v = make(kind);
    v.d = std::move(x);
    return v;
  }
  static Value make(T t) {
    Value v;
    v.t = t;
    return v;
  }
  bool is_num() const { return t == T::Bool || t == T::Int || t == T::Float; }
  bool is_intlike() const { return t == T::Bool || t == T::Int; }
  int64_t as_int() const { return t == T::Bool ? (b ? 1 : 0) : i; }
  double as_double() const { return t == T::Float ? f : static_cast<double>(as_int()); }
  bool is_seq() const { return t == T::List || t == T::Tuple; }
};

struct Dict {
  std::vector<std::pair<std::string, Value>> kv;
  const Value* find(std::string_view k) const {
    for (auto& [key, v] : kv)
      if (key == k) return &v;
    return nullptr;
  }
  void set(const std::string& k, Value v) {
    for (auto& [key, old] : kv)
      if (key == k) {
        old = std::move(v);
        return;
      }
    kv.emplace_back(k, std::move(v));
  }
};

struct Args {
  List pos;
  std::vector<std::pair<std::string, Value>> kw;
};

struct Fn {
  std::string name;
  std::function<Value(Interp&, Args&)> call;
};

// A runtime error inside the template; render() adds the template's name and line.
struct TplError {
  std::string msg;
};
[[noreturn]] void fail(std::string msg) { throw TplError{std::move(msg)}; }

const char* type_name(const Value& v) {
  switch (v.t) {
    case T::Undef: return "Undefined";
    case T::None: return "NoneType";
    case T::Bool: return "bool";
    case T::Int: return "int";
    case T::Float: return "float";
    case T::Str: return "str";
    case T::List: return "list";
    case T::Tuple: return "tuple";
    case T::Dict: return "dict";
    case T::Ns: return "Namespace";
    case T::Fn: return "function";
  }
  return "?";
}

[[noreturn]] void fail_undefined(const Value& v) { fail(v.s.empty() ? "a value is undefined" : v.s); }

// --- Text as code points (Python's str counts code points; ours is UTF-8) ----------------

std::u32string to_cps(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t p = 0; p < s.size();) {
    auto c = static_cast<unsigned char>(s[p]);
    size_t n = utf8_len(c);
    if (n == 1 || p + n > s.size()) {
      out.push_back(c < 0x80 ? c : 0xFFFD);
      ++p;
      continue;
    }
    uint32_t cp = n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    bool ok = true;
    for (size_t k = 1; k < n; ++k) {
      auto cc = static_cast<unsigned char>(s[p + k]);
      if ((cc & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    out.push_back(ok ? cp : 0xFFFD);
    p += ok ? n : 1;
  }
  return out;
}
std::string from_cps(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t c : cps) out += cp_to_utf8(c);
  return out;
}
bool ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}
size_t cp_len(std::string_view s) { return ascii(s) ? s.size() : to_cps(s).size(); }

// Python's str.isspace: category Zs or bidi class WS, B, S.
bool py_space(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  auto dir = u_charDirection(static_cast<UChar32>(c));
  return u_charType(static_cast<UChar32>(c)) == U_SPACE_SEPARATOR || dir == U_WHITE_SPACE_NEUTRAL ||
         dir == U_BLOCK_SEPARATOR || dir == U_SEGMENT_SEPARATOR;
}

// Full case mappings (ß -> SS), as Python's str methods use them. mode: 0 lower, 1 upper,
// 2 title case (of a single character, as str.capitalize and str.title start words).
std::string full_case(std::u32string_view s, int mode) {
  std::u16string in;
  for (char32_t c : s) {
    if (c >= 0x10000) {
      in += static_cast<char16_t>(0xD800 + ((c - 0x10000) >> 10));
      in += static_cast<char16_t>(0xDC00 + ((c - 0x10000) & 0x3FF));
    } else {
      in += static_cast<char16_t>(c);
    }
  }
  std::u16string out(in.size() * 3 + 8, u'\0');
  UErrorCode err = U_ZERO_ERROR;
  const auto cap = static_cast<int32_t>(out.size()), len = static_cast<int32_t>(in.size());
  int32_t n = mode == 0   ? u_strToLower(out.data(), cap, in.data(), len, "", &err)
              : mode == 1 ? u_strToUpper(out.data(), cap, in.data(), len, "", &err)
                          : u_strToTitle(out.data(), cap, in.data(), len, nullptr, "", &err);
  if (U_FAILURE(err)) fail("case mapping failed");
  std::string r;
  for (int32_t k = 0; k < n; ++k) {
    char32_t c = out[static_cast<size_t>(k)];
    if (c >= 0xD800 && c < 0xDC00 && k + 1 < n)
      c = 0x10000 + ((c - 0xD800) << 10) + (out[static_cast<size_t>(++k)] - 0xDC00);
    r += cp_to_utf8(c);
  }
  return r;
}

bool cased(char32_t c) {
  auto ch = static_cast<UChar32>(c);
  return u_isUUppercase(ch) || u_isULowercase(ch) || u_istitle(ch);
}

// 0 lower, 1 upper, 2 str.capitalize, 3 str.title, 4 jinja2's title filter (each run between
// '-', whitespace, '(', '{', '[', '<' starts upper case, the rest lower).
std::string map_case(std::string_view s, int mode) {
  std::u32string c = to_cps(s);
  if (mode < 2) return full_case(c, mode);
  std::string out;
  bool prev_cased = false, prev_sep = true;
  for (size_t k = 0; k < c.size(); ++k) {
    std::u32string_view one(&c[k], 1);
    bool start;
    if (mode == 2) start = k == 0;
    else if (mode == 3) start = !prev_cased;
    else {
      bool sep = c[k] == '-' || c[k] == '(' || c[k] == '{' || c[k] == '[' || c[k] == '<' || py_space(c[k]);
      start = k == 0 || sep != prev_sep;
      prev_sep = sep;
    }
    out += start ? full_case(one, mode == 4 ? 1 : 2) : full_case(one, 0);
    prev_cased = cased(c[k]);
  }
  return out;
}

// --- Python's str() and repr() -----------------------------------------------------------

std::string py_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);  // shortest round trip
  std::string_view sc(buf, static_cast<size_t>(r.ptr - buf));
  std::string out;
  if (sc.front() == '-') out += '-', sc.remove_prefix(1);
  size_t e = sc.find('e');
  std::string digits;
  for (char c : sc.substr(0, e))
    if (c != '.') digits += c;
  int exp = std::stoi(std::string(sc.substr(e + 1)));
  int decpt = exp + 1;
  const int nd = static_cast<int>(digits.size());
  if (decpt > 16 || decpt < -3) {  // Python's repr switches to exponent form here
    out += digits[0];
    if (nd > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out + eb;
  }
  if (decpt <= 0) return out + "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
  if (decpt >= nd) return out + digits + std::string(static_cast<size_t>(decpt - nd), '0') + ".0";
  return out + digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
}

std::string py_repr(const Value& v);

std::string py_str(const Value& v) {
  switch (v.t) {
    case T::Undef: return "";
    case T::None: return "None";
    case T::Bool: return v.b ? "True" : "False";
    case T::Int: return std::to_string(v.i);
    case T::Float: return py_float(v.f);
    case T::Str: return v.s;
    default: return py_repr(v);
  }
}

std::string str_repr(std::string_view s) {
  char q = '\'';
  if (s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos) q = '"';
  std::string out(1, q);
  char buf[16];
  for (char32_t c : to_cps(s)) {
    if (c == static_cast<char32_t>(q) || c == '\\') out += '\\', out += static_cast<char>(c);
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c)), out += buf;
    else if (c >= 0x80) {
      auto ty = u_charType(static_cast<UChar32>(c));
      bool printable =
          !(ty == U_CONTROL_CHAR || ty == U_FORMAT_CHAR || ty == U_SURROGATE || ty == U_PRIVATE_USE_CHAR ||
            ty == U_UNASSIGNED || ty == U_LINE_SEPARATOR || ty == U_PARAGRAPH_SEPARATOR || ty == U_SPACE_SEPARATOR);
      if (printable) out += cp_to_utf8(c);
      else {
        std::snprintf(buf, sizeof buf,
                      c <= 0xFF     ? "\\x%02x"
                      : c <= 0xFFFF ? "\\u%04x"
                                    : "\\U%08x",
                      static_cast<unsigned>(c));
        out += buf;
      }
    } else out += static_cast<char>(c);
  }
  return out + q;
}

std::string py_repr(const Value& v) {
  switch (v.t) {
    case T::Str: return str_repr(v.s);
    case T::List:
    case T::Tuple: {
      std::string out = v.t == T::List ? "[" : "(";
      for (size_t k = 0; k < v.l->size(); ++k) out += (k ? ", " : "") + py_repr((*v.l)[k]);
      if (v.t == T::Tuple && v.l->size() == 1) out += ",";
      return out + (v.t == T::List ? "]" : ")");
    }
    case T::Dict:
    case T::Ns: {
      std::string out = v.t == T::Ns ? "<Namespace {" : "{";
      for (size_t k = 0; k < v.d->kv.size(); ++k)
        out += (k ? ", " : "") + str_repr(v.d->kv[k].first) + ": " + py_repr(v.d->kv[k].second);
      return out + (v.t == T::Ns ? "}>" : "}");
    }
    case T::Fn: return "<function " + v.fn->name + ">";
    case T::Undef: return "Undefined";
    default: return py_str(v);
  }
}

bool truthy(const Value& v) {
  switch (v.t) {
    case T::Undef:
    case T::None: return false;
    case T::Bool: return v.b;
    case T::Int: return v.i != 0;
    case T::Float: return v.f != 0;
    case T::Str: return !v.s.empty();
    case T::List:
    case T::Tuple: return !v.l->empty();
    case T::Dict: return !v.d->kv.empty();
    default: return true;
  }
}

bool py_eq(const Value& a, const Value& b) {
  if (a.is_num() && b.is_num()) {
    if (a.t != T::Float && b.t != T::Float) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.t != b.t) return false;
  switch (a.t) {
    case T::Undef:
    case T::None: return true;
    case T::Str: return a.s == b.s;
    case T::List:
    case T::Tuple:
      if (a.l->size() != b.l->size()) return false;
      for (size_t k = 0; k < a.l->size(); ++k)
        if (!py_eq((*a.l)[k], (*b.l)[k])) return false;
      return true;
    case T::Dict:
      if (a.d->kv.size() != b.d->kv.size()) return false;
      for (auto& [k, v] : a.d->kv) {
        const Value* o = b.d->find(k);
        if (!o || !py_eq(v, *o)) return false;
      }
      return true;
    case T::Ns: return a.d == b.d;
    case T::Fn: return a.fn == b.fn;
    default: return false;
  }
}

// Python's <, for sorting and comparisons; TypeError where Python has one.
bool py_lt(const Value& a, const Value& b) {
  if (a.is_num() && b.is_num()) {
    if (a.t != T::Float && b.t != T::Float) return a.as_int() < b.as_int();
    return a.as_double() < b.as_double();
  }
  if (a.t == T::Str && b.t == T::Str) return a.s < b.s;  // UTF-8 byte order is code point order
  if (a.is_seq() && a.t == b.t) {
    for (size_t k = 0; k < a.l->size() && k < b.l->size(); ++k)
      if (!py_eq((*a.l)[k], (*b.l)[k])) return py_lt((*a.l)[k], (*b.l)[k]);
    return a.l->size() < b.l->size();
  }
  fail(std::string("'<' not supported between instances of '") + type_name(a) + "' and '" + type_name(b) + "'");
}

// --- JSON in and out ---------------------------------------------------------------------

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      auto u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::real(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::real(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::str(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List l;
      l.reserve(j.size());
      for (auto& x : j) l.push_back(from_json(x));
      return Value::list(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      auto d = std::make_shared<Dict>();
      for (auto& [k, x] : j.items()) d->kv.emplace_back(k, from_json(x));
      return Value::dict(std::move(d));
    }
    default: fail("unsupported JSON value");
  }
}

// Backslash escapes of control characters: JSON writes n t r b f; Python literals also read a v.
constexpr std::pair<char, char> kEscapes[] = {{'n', '\n'}, {'t', '\t'}, {'r', '\r'}, {'b', '\b'},
                                              {'f', '\f'}, {'a', '\a'}, {'v', '\v'}};
char escape_letter(char ctl, bool json) {
  for (auto [letter, c] : kEscapes)
    if (c == ctl && (!json || (letter != 'a' && letter != 'v'))) return letter;
  return 0;
}
char escaped_char(char letter) {
  for (auto [l, c] : kEscapes)
    if (l == letter) return c;
  return 0;
}

struct JsonStyle {
  bool ensure_ascii = false;
  bool indent_on = false;
  std::string indent, item_sep = ", ", key_sep = ": ";
  bool sort_keys = false;
};

void json_string(std::string_view s, bool ensure_ascii, std::string& out) {
  out += '"';
  char buf[16];
  auto esc = [&](uint32_t c) {
    std::snprintf(buf, sizeof buf, "\\u%04x", c);
    out += buf;
  };
  for (char32_t c : to_cps(s)) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (char e = c < 0x20 ? escape_letter(static_cast<char>(c), true) : 0) {
      out += '\\';
      out += e;
    } else if (c < 0x20) {
      esc(c);
    } else if (c >= 0x80 && ensure_ascii) {
      if (c >= 0x10000) esc(0xD800 + ((c - 0x10000) >> 10)), esc(0xDC00 + ((c - 0x10000) & 0x3FF));
      else esc(c);
    } else {
      out += cp_to_utf8(c);
    }
  }
  out += '"';
}

// Python's json.dumps, as transformers' tojson filter calls it.
void to_json(const Value& v, const JsonStyle& st, int level, std::string& out) {
  auto newline = [&](int lv) {
    if (!st.indent_on) return;
    out += '\n';
    for (int k = 0; k < lv; ++k) out += st.indent;
  };
  switch (v.t) {
    case T::None: out += "null"; return;
    case T::Bool: out += v.b ? "true" : "false"; return;
    case T::Int: out += std::to_string(v.i); return;
    case T::Float:
      out += std::isnan(v.f) ? "NaN" : std::isinf(v.f) ? (v.f > 0 ? "Infinity" : "-Infinity") : py_float(v.f);
      return;
    case T::Str: json_string(v.s, st.ensure_ascii, out); return;
    case T::List:
    case T::Tuple:
      if (v.l->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.l->size(); ++k) {
        if (k) out += st.item_sep;
        newline(level + 1);
        to_json((*v.l)[k], st, level + 1, out);
      }
      newline(level);
      out += ']';
      return;
    case T::Dict: {
      if (v.d->kv.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (auto& kv : v.d->kv) items.push_back(&kv);
      if (st.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += st.item_sep;
        newline(level + 1);
        json_string(items[k]->first, st.ensure_ascii, out);
        out += st.key_sep;
        to_json(items[k]->second, st, level + 1, out);
      }
      newline(level);
      out += '}';
      return;
    }
    default: fail(std::string("Object of type ") + type_name(v) + " is not JSON serializable");
  }
}

// ---------------------------------------------------------------------------------------
// Lexer: the template's text and tags, then each tag's tokens.

struct Tok {
  enum K : uint8_t { Name, Str, Int, Float, Op, Eof } k = Eof;
  std::string s;
  int64_t i = 0;
  double f = 0;
  int line = 0;
  bool is(K kind, std::string_view text) const { return k == kind && s == text; }
  bool op(std::string_view text) const { return is(Op, text); }
  bool name(std::string_view text) const { return is(Name, text); }
};

struct Item {
  enum K : uint8_t { Text, Var, Block } k;
  std::string text;
  std::vector<Tok> toks;
  int line;
};

struct SyntaxError {
  std::string msg;
  int line;
};

bool py_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Python's unicode-escape decoding of a string literal's body, as jinja2's lexer does it.
std::string unescape(std::string_view b, int line) {
  std::string out;
  for (size_t p = 0; p < b.size(); ++p) {
    if (b[p] != '\\' || p + 1 == b.size()) {
      out += b[p];
      continue;
    }
    char c = b[++p];
    auto hex = [&](size_t n) {
      if (p + n >= b.size()) throw SyntaxError{"truncated \\x/\\u escape in a string literal", line};
      uint32_t v = 0;
      for (size_t k = 1; k <= n; ++k) {
        char h = b[p + k];
        int d = std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                : (h >= 'a' && h <= 'f')                    ? h - 'a' + 10
                : (h >= 'A' && h <= 'F')                    ? h - 'A' + 10
                                                            : -1;
        if (d < 0) throw SyntaxError{"bad \\x/\\u escape in a string literal", line};
        v = v * 16 + static_cast<uint32_t>(d);
      }
      p += n;
      if (v > 0x10FFFF) throw SyntaxError{"\\U escape beyond U+10FFFF", line};
      out += cp_to_utf8(v);
    };
    if (char ctl = escaped_char(c)) {
      out += ctl;
      continue;
    }
    switch (c) {
      case '\\':
      case '\'':
      case '"': out += c; break;
      case '\n': break;
      case 'x': hex(2); break;
      case 'u': hex(4); break;
      case 'U': hex(8); break;
      default:
        if (c >= '0' && c <= '7') {
          uint32_t v = 0;
          size_t n = 0;
          while (n < 3 && p < b.size() && b[p] >= '0' && b[p] <= '7')
            v = v * 8 + static_cast<uint32_t>(b[p++] - '0'), ++n;
          --p;
          out += cp_to_utf8(v);
        } else out += '\\', out += c;
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view src) {
    // jinja2 normalizes newlines and drops one trailing newline (keep_trailing_newline off).
    src_.reserve(src.size());
    for (size_t p = 0; p < src.size(); ++p) {
      if (src[p] == '\r') {
        src_ += '\n';
        if (p + 1 < src.size() && src[p + 1] == '\n') ++p;
      } else src_ += src[p];
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Item> run() {
    std::vector<Item> items;
    size_t p = 0;
    bool line_starting = true, strip_next = false;
    while (p <= src_.size()) {
      size_t tag = find_tag(p);
      std::string text = src_.substr(p, (tag == std::string::npos ? src_.size() : tag) - p);
      if (strip_next) {
        size_t k = 0;
        while (k < text.size() && py_ws(text[k])) ++k;
        text.erase(0, k);
        strip_next = false;
      }
      if (tag == std::string::npos) {
        add_text(items, text);
        break;
      }
      char kind = src_[tag + 1], mod = tag + 2 < src_.size() ? src_[tag + 2] : 0;
      if (mod == '-') {
        while (!text.empty() && py_ws(text.back())) text.pop_back();
      } else if (kind != '{' && mod != '+') {  // lstrip_blocks: a block alone on its line
        size_t l = text.rfind('\n');
        size_t from = l == std::string::npos ? 0 : l + 1;
        if ((from > 0 || line_starting) && from < text.size() &&
            std::all_of(text.begin() + static_cast<std::ptrdiff_t>(from), text.end(), py_ws))
          text.erase(from);
      }
      add_text(items, text);
      line_ += count_nl(p, tag);
      p = tag + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
      size_t end_from = p;
      if (kind == '#') {
        size_t e = src_.find("#}", p);
        if (e == std::string::npos) throw SyntaxError{"unclosed comment {#", line_};
        char before = e > p ? src_[e - 1] : 0;
        p = e + 2;
        if (before == '-') strip_next = true;
        else if (before != '+' && p < src_.size() && src_[p] == '\n') ++p;  // trim_blocks
      } else {
        Item it{kind == '{' ? Item::Var : Item::Block, {}, {}, line_};
        char end_mod = 0;
        p = lex_tag(p, kind == '{', &it.toks, &end_mod);
        if (end_mod == '-') strip_next = true;
        else if (kind == '%' && end_mod != '+' && p < src_.size() && src_[p] == '\n') ++p;  // trim_blocks
        if (kind == '%' && it.toks.size() == 2 && it.toks[0].name("raw")) p = raw_block(p, items);
        else items.push_back(std::move(it));
      }
      line_ += count_nl(end_from, p);
      line_starting = p > 0 && src_[p - 1] == '\n';
    }
    return items;
  }

 private:
  std::string src_;
  int line_ = 1;

  int count_nl(size_t a, size_t b) const {
    return static_cast<int>(std::count(src_.begin() + static_cast<std::ptrdiff_t>(a),
                                       src_.begin() + static_cast<std::ptrdiff_t>(std::min(b, src_.size())), '\n'));
  }
  size_t find_tag(size_t p) const {
    for (size_t k = src_.find('{', p); k != std::string::npos; k = src_.find('{', k + 1))
      if (k + 1 < src_.size() && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
    return std::string::npos;
  }
  void add_text(std::vector<Item>& items, std::string& text) {
    if (!text.empty()) items.push_back({Item::Text, std::move(text), {}, line_});
  }

  // {% raw %}...{% endraw %}: the text between, verbatim.
  size_t raw_block(size_t p, std::vector<Item>& items) {
    for (size_t k = src_.find("{%", p); k != std::string::npos; k = src_.find("{%", k + 2)) {
      size_t q = k + 2;
      bool strip_before = q < src_.size() && src_[q] == '-';
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ++q;
      while (q < src_.size() && py_ws(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < src_.size() && py_ws(src_[q])) ++q;
      bool strip_after = q < src_.size() && src_[q] == '-';
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ++q;
      if (src_.compare(q, 2, "%}") != 0) continue;
      std::string text = src_.substr(p, k - p);
      if (strip_before)
        while (!text.empty() && py_ws(text.back())) text.pop_back();
      add_text(items, text);
      q += 2;
      if (strip_after)
        while (q < src_.size() && py_ws(src_[q])) ++q;
      else if (q < src_.size() && src_[q] == '\n') ++q;
      return q;
    }
    throw SyntaxError{"{% raw %} without {% endraw %}", line_};
  }

  // Tokens of one tag from p to its end; returns the position after the end. *end_mod: the
  // '-' or '+' before the end, else 0.
  size_t lex_tag(size_t p, bool var, std::vector<Tok>* toks, char* end_mod) {
    const std::string_view end = var ? "}}" : "%}";
    int line = line_;
    while (true) {
      while (p < src_.size() && py_ws(src_[p])) line += src_[p++] == '\n';
      if (p >= src_.size()) throw SyntaxError{std::string("unclosed tag: expected '") + std::string(end) + "'", line_};
      if ((src_[p] == '-' || (!var && src_[p] == '+')) && src_.compare(p + 1, 2, end) == 0) {
        *end_mod = src_[p];
        toks->push_back({Tok::Eof, "", 0, 0, line});
        return p + 3;
      }
      if (src_.compare(p, 2, end) == 0) {
        toks->push_back({Tok::Eof, "", 0, 0, line});
        return p + 2;
      }
      Tok t;
      t.line = line;
      char c = src_[p];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t q = p;
        while (q < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) ++q;
        t.k = Tok::Name;
        t.s = src_.substr(p, q - p);
        p = q;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        p = lex_number(p, !toks->empty() && toks->back().op("."), &t);
      } else if (c == '\'' || c == '"') {
        size_t q = p + 1;
        while (q < src_.size() && src_[q] != c) q += src_[q] == '\\' ? 2 : 1;
        if (q >= src_.size()) throw SyntaxError{"unterminated string literal", line};
        t.k = Tok::Str;
        t.s = unescape(std::string_view(src_).substr(p + 1, q - p - 1), line);
        line += count_nl(p, q);
        p = q + 1;
      } else {
        static const char* const ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                          ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|"};
        t.k = Tok::Op;
        for (const char* o : ops)
          if (src_.compare(p, std::strlen(o), o) == 0) {
            t.s = o;
            break;
          }
        if (t.s.empty()) throw SyntaxError{std::string("unexpected character '") + c + "' in a tag", line};
        p += t.s.size();
      }
      toks->push_back(std::move(t));
    }
  }

  size_t lex_number(size_t p, bool after_dot, Tok* t) {
    auto digits = [&](size_t q) {  // (\d+_)*\d+
      size_t s = q;
      while (q < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[q])) ||
                                 (src_[q] == '_' && q > s && q + 1 < src_.size() &&
                                  std::isdigit(static_cast<unsigned char>(src_[q + 1])))))
        ++q;
      return q;
    };
    size_t q = digits(p);
    bool is_float = false;
    if (!after_dot) {
      if (q + 1 < src_.size() && src_[q] == '.' && std::isdigit(static_cast<unsigned char>(src_[q + 1])))
        q = digits(q + 1), is_float = true;
      if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
        size_t r = q + 1;
        if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
        if (r < src_.size() && std::isdigit(static_cast<unsigned char>(src_[r]))) q = digits(r), is_float = true;
      }
    }
    std::string txt;
    for (size_t k = p; k < q; ++k)
      if (src_[k] != '_') txt += src_[k];
    if (is_float) {
      t->k = Tok::Float;
      t->f = std::strtod(txt.c_str(), nullptr);
    } else {
      t->k = Tok::Int;
      auto r = std::from_chars(txt.data(), txt.data() + txt.size(), t->i);
      if (r.ec != std::errc()) throw SyntaxError{"integer literal " + txt + " does not fit in 64 bits", line_};
    }
    return q;
  }
};

// ---------------------------------------------------------------------------------------
// AST

struct Expr;
using ExprP = std::unique_ptr<Expr>;
struct Expr {
  enum K : uint8_t {
    Lit,
    Name,
    Attr,
    Item,
    Slice,
    Call,
    Filter,
    Test,
    Neg,
    Pos,
    Not,
    Bin,
    And,
    Or,
    Cmp,
    Cond,
    ListE,
    TupleE,
    DictE
  } k;
  int line = 0;
  Value lit;
  std::string name;  // Name, Attr, Filter / Test name, Bin operator
  std::vector<ExprP> a;
  std::vector<std::pair<std::string, ExprP>> kw;
  std::vector<std::string> ops;  // Cmp
  bool negate = false;           // Test: `is not`
};

struct Stmt;
using StmtP = std::unique_ptr<Stmt>;
using Body = std::vector<StmtP>;
struct Stmt {
  enum K : uint8_t { Text, Out, If, For, Set, SetAttr, SetBlock, Macro, CallBlock, Break, Continue, Scope } k;
  int line = 0;
  bool reads_caller = false;       // Macro: its body reads `caller` (so it takes one, as in jinja2)
  std::string text;                // Text; SetAttr: variable; SetBlock / Macro: name
  std::string attr;                // SetAttr
  std::vector<std::string> names;  // Set / For targets, Macro / CallBlock (its caller's) parameters
  std::vector<ExprP> e;            // Out: value; If: one condition per branch (null: else);
                                   // For: iterable, filter; Set / SetAttr: value; Macro / CallBlock: defaults
  ExprP call;                      // CallBlock: the macro call its body is the caller of
  std::vector<Body> bodies;        // If: per branch; For: body, else; SetBlock / Macro / CallBlock / Scope
};

}  // namespace

struct JinjaTemplate::Program {
  Body body;
};

namespace {

constexpr int kMaxNesting = 128;  // expression and block nesting, so hostile input cannot overflow the stack

class Parser {
 public:
  explicit Parser(std::vector<Item> items) : items_(std::move(items)) {}

  Body parse_all() {
    std::string end;
    return body({}, &end);
  }

 private:
  std::vector<Item> items_;
  size_t at_ = 0;
  const std::vector<Tok>* toks_ = nullptr;
  size_t tp_ = 0;
  int depth_ = 0, loops_ = 0;
  int64_t caller_reads_ = 0;  // `caller` names parsed so far: a macro whose body adds any takes a caller

  struct Nest {
    int& d;
    Nest(int& depth, int line) : d(depth) {
      if (++d > kMaxNesting) throw SyntaxError{"nested too deeply", line};
    }
    ~Nest() { --d; }
  };

  const Tok& cur() const { return (*toks_)[tp_]; }
  const Tok& peek(size_t n = 1) const { return (*toks_)[std::min(tp_ + n, toks_->size() - 1)]; }
  Tok next() {
    Tok t = cur();
    if (t.k != Tok::Eof) ++tp_;
    return t;
  }
  [[noreturn]] void error(const std::string& msg) const { throw SyntaxError{msg, cur().line}; }
  std::string describe(const Tok& t) const {
    return t.k == Tok::Eof ? "end of tag" : t.k == Tok::Str ? "a string" : "'" + t.s + "'";
  }
  void expect_op(std::string_view o) {
    if (!cur().op(o)) error("expected '" + std::string(o) + "', got " + describe(cur()));
    next();
  }
  std::string expect_name() {
    if (cur().k != Tok::Name) error("expected a name, got " + describe(cur()));
    return next().s;
  }
  bool skip_op(std::string_view o) {
    if (!cur().op(o)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!cur().name(n)) return false;
    next();
    return true;
  }
  void end_of_tag() {
    if (cur().k != Tok::Eof) error("expected the end of the statement, got " + describe(cur()));
  }

  // Statements up to a block tag whose first word is in `ends` (left current, its name in *end).
  Body body(const std::vector<std::string_view>& ends, std::string* end) {
    Body out;
    for (; at_ < items_.size(); ++at_) {
      const Item& it = items_[at_];
      if (it.k == Item::Text) {
        auto s = std::make_unique<Stmt>();
        s->k = Stmt::Text;
        s->line = it.line;
        s->text = it.text;
        out.push_back(std::move(s));
        continue;
      }
      toks_ = &it.toks;
      tp_ = 0;
      if (it.k == Item::Var) {
        auto s = std::make_unique<Stmt>();
        s->k = Stmt::Out;
        s->line = it.line;
        if (cur().k == Tok::Eof) error("empty {{ }}");
        s->e.push_back(tuple(true));
        end_of_tag();
        out.push_back(std::move(s));
        continue;
      }
      if (cur().k != Tok::Name) error("expected a statement name, got " + describe(cur()));
      const std::string word = cur().s;
      if (std::find(ends.begin(), ends.end(), word) != ends.end()) {
        *end = word;
        return out;
      }
      out.push_back(statement(word, it.line));
    }
    if (!ends.empty()) {
      std::string want;
      for (auto e : ends) want += (want.empty() ? "" : " or ") + std::string(e);
      throw SyntaxError{"missing {% " + want + " %}", items_.empty() ? 1 : items_.back().line};
    }
    return out;
  }

  // Parses a block's nested body; on return, the closing tag is current.
  Body sub_body(const std::vector<std::string_view>& ends, std::string* end, int line) {
    Nest n(depth_, line);
    ++at_;
    Body b = body(ends, end);
    toks_ = &items_[at_].toks;
    tp_ = 0;
    next();  // the end word
    return b;
  }

  StmtP statement(const std::string& word, int line) {
    auto s = std::make_unique<Stmt>();
    s->line = line;
    next();
    std::string end;
    if (word == "if") {
      s->k = Stmt::If;
      s->e.push_back(tuple(false));
      end_of_tag();
      while (true) {
        s->bodies.push_back(sub_body({"elif", "else", "endif"}, &end, line));
        if (end == "elif") {
          s->e.push_back(tuple(false));
          end_of_tag();
        } else if (end == "else") {
          s->e.push_back(nullptr);
          end_of_tag();
          s->bodies.push_back(sub_body({"endif"}, &end, line));
          end_of_tag();
          break;
        } else {
          end_of_tag();
          break;
        }
      }
    } else if (word == "for") {
      s->k = Stmt::For;
      s->names = targets();
      if (!skip_name("in")) error("expected 'in' in a for loop, got " + describe(cur()));
      s->e.push_back(tuple(false));
      s->e.push_back(skip_name("if") ? expression(true) : nullptr);
      if (cur().name("recursive")) error("recursive for loops are not supported");
      end_of_tag();
      ++loops_;
      s->bodies.push_back(sub_body({"else", "endfor"}, &end, line));
      --loops_;
      if (end == "else") {
        end_of_tag();
        s->bodies.push_back(sub_body({"endfor"}, &end, line));
      }
      end_of_tag();
    } else if (word == "set") {
      std::string first = expect_name();
      if (skip_op(".")) {
        s->k = Stmt::SetAttr;
        s->text = first;
        s->attr = expect_name();
        expect_op("=");
        s->e.push_back(tuple(true));
      } else {
        s->names.push_back(first);
        while (skip_op(",")) {
          if (cur().k != Tok::Name) break;
          s->names.push_back(expect_name());
        }
        if (skip_op("=")) {
          s->k = Stmt::Set;
          s->e.push_back(tuple(true));
        } else {
          if (s->names.size() != 1) error("a block set takes one name");
          if (cur().op("|")) error("filtered block sets are not supported");
          end_of_tag();
          s->k = Stmt::SetBlock;
          s->text = first;
          int loops = loops_;
          s->bodies.push_back(sub_body({"endset"}, &end, line));
          loops_ = loops;
        }
      }
      end_of_tag();
    } else if (word == "macro" || word == "call") {
      // {% macro name(params) %}, or {% call[(params)] macro(args) %} whose body becomes the
      // macro's `caller`.
      const bool block = word == "call";
      s->k = block ? Stmt::CallBlock : Stmt::Macro;
      if (!block) s->text = expect_name();
      if (!block || cur().op("(")) {
        expect_op("(");
        while (!cur().op(")")) {
          s->names.push_back(expect_name());
          s->e.push_back(skip_op("=") ? expression(true) : nullptr);
          if (!skip_op(",")) break;
        }
        expect_op(")");
      }
      if (block) {
        s->call = expression(true);
        if (s->call->k != Expr::Call) error("{% call %} expects a macro call, e.g. {% call list(items) %}");
      }
      end_of_tag();
      int loops = loops_;
      loops_ = 0;
      const int64_t reads = caller_reads_;
      s->bodies.push_back(sub_body({block ? "endcall" : "endmacro"}, &end, line));
      s->reads_caller = caller_reads_ > reads;
      loops_ = loops;
      end_of_tag();
    } else if (word == "break" || word == "continue") {
      if (loops_ == 0) error("'" + word + "' outside a for loop");
      s->k = word == "break" ? Stmt::Break : Stmt::Continue;
      end_of_tag();
    } else if (word == "generation") {  // transformers' assistant-mask marker: renders its body
      s->k = Stmt::Scope;
      end_of_tag();
      s->bodies.push_back(sub_body({"endgeneration"}, &end, line));
      end_of_tag();
    } else {
      static const char* const known[] = {"include", "import",     "from", "extends", "block",
                                          "filter",  "autoescape", "with", "do",      "trans"};
      for (const char* k : known)
        if (word == k) error("{% " + word + " %} is not supported in chat templates here");
      error("unknown statement '" + word + "' (or a stray end tag)");
    }
    return s;
  }

  std::vector<std::string> targets() {
    bool paren = skip_op("(");
    std::vector<std::string> names{expect_name()};
    while (skip_op(",")) {
      if (cur().k != Tok::Name) break;
      names.push_back(expect_name());
    }
    if (paren) expect_op(")");
    return names;
  }

  ExprP node(Expr::K k, int line) {
    auto e = std::make_unique<Expr>();
    e->k = k;
    e->line = line;
    return e;
  }

  // A comma-separated list becomes a tuple; one expression without a comma stays itself.
  ExprP tuple(bool with_cond) {
    int line = cur().line;
    std::vector<ExprP> items;
    bool comma = false;
    while (true) {
      if (!items.empty() && !skip_op(",")) break;
      if (!items.empty()) comma = true;
      if (cur().k == Tok::Eof || cur().op(")") || cur().op("=") || cur().name("if") || cur().name("recursive")) {
        if (items.empty()) error("expected an expression, got " + describe(cur()));
        break;
      }
      items.push_back(expression(with_cond));
    }
    if (items.size() == 1 && !comma) return std::move(items[0]);
    auto t = node(Expr::TupleE, line);
    t->a = std::move(items);
    return t;
  }

  ExprP expression(bool with_cond) {
    Nest n(depth_, cur().line);
    ExprP e = or_expr();
    while (with_cond && cur().name("if")) {
      int line = next().line;
      auto c = node(Expr::Cond, line);
      c->a.push_back(std::move(e));
      c->a.push_back(or_expr());
      c->a.push_back(skip_name("else") ? expression(true) : nullptr);
      e = std::move(c);
    }
    return e;
  }
  // Left-associative `a word b word c` of operands parsed by `sub`.
  ExprP chain(Expr::K k, std::string_view word, ExprP (Parser::*sub)()) {
    ExprP e = (this->*sub)();
    while (cur().name(word)) {
      auto o = node(k, next().line);
      o->a.push_back(std::move(e));
      o->a.push_back((this->*sub)());
      e = std::move(o);
    }
    return e;
  }
  ExprP or_expr() { return chain(Expr::Or, "or", &Parser::and_expr); }
  ExprP and_expr() { return chain(Expr::And, "and", &Parser::not_expr); }
  ExprP not_expr() {
    if (cur().name("not")) {
      Nest n(depth_, cur().line);
      auto o = node(Expr::Not, next().line);
      o->a.push_back(not_expr());
      return o;
    }
    return compare();
  }
  ExprP compare() {
    int line = cur().line;
    ExprP first = math1();
    std::vector<ExprP> rest;
    std::vector<std::string> ops;
    while (true) {
      const Tok& t = cur();
      if (t.op("==") || t.op("!=") || t.op("<") || t.op("<=") || t.op(">") || t.op(">=")) ops.push_back(next().s);
      else if (t.name("in")) next(), ops.push_back("in");
      else if (t.name("not") && peek().name("in")) next(), next(), ops.push_back("notin");
      else break;
      rest.push_back(math1());
    }
    if (ops.empty()) return first;
    auto c = node(Expr::Cmp, line);
    c->a.push_back(std::move(first));
    for (auto& r : rest) c->a.push_back(std::move(r));
    c->ops = std::move(ops);
    return c;
  }
  ExprP binary(ExprP left, ExprP right, const std::string& op, int line) {
    auto b = node(Expr::Bin, line);
    b->name = op;
    b->a.push_back(std::move(left));
    b->a.push_back(std::move(right));
    return b;
  }
  ExprP math1() {
    ExprP e = concat();
    while (cur().op("+") || cur().op("-")) {
      Tok t = next();
      e = binary(std::move(e), concat(), t.s, t.line);
    }
    return e;
  }
  ExprP concat() {
    ExprP e = math2();
    while (cur().op("~")) {
      Tok t = next();
      e = binary(std::move(e), math2(), "~", t.line);
    }
    return e;
  }
  ExprP math2() {
    ExprP e = power();
    while (cur().op("*") || cur().op("/") || cur().op("//") || cur().op("%")) {
      Tok t = next();
      e = binary(std::move(e), power(), t.s, t.line);
    }
    return e;
  }
  ExprP power() {
    ExprP e = unary(true);
    while (cur().op("**")) {
      Tok t = next();
      e = binary(std::move(e), unary(true), "**", t.line);
    }
    return e;
  }
  ExprP unary(bool with_filter) {
    Nest n(depth_, cur().line);
    ExprP e;
    if (cur().op("-") || cur().op("+")) {
      Tok t = next();
      e = node(t.s == "-" ? Expr::Neg : Expr::Pos, t.line);
      e->a.push_back(unary(false));
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    if (with_filter) e = filters(std::move(e));
    return e;
  }
  ExprP primary() {
    const Tok& t = cur();
    int line = t.line;
    if (t.k == Tok::Name) {
      std::string n = next().s;
      auto lit = [&](Value v) {
        auto e = node(Expr::Lit, line);
        e->lit = std::move(v);
        return e;
      };
      if (n == "true" || n == "True") return lit(Value::boolean(true));
      if (n == "false" || n == "False") return lit(Value::boolean(false));
      if (n == "none" || n == "None") return lit(Value::none());
      auto e = node(Expr::Name, line);
      e->name = n;
      caller_reads_ += n == "caller";
      return e;
    }
    if (t.k == Tok::Str) {
      std::string s;
      while (cur().k == Tok::Str) s += next().s;
      auto e = node(Expr::Lit, line);
      e->lit = Value::str(std::move(s));
      return e;
    }
    if (t.k == Tok::Int || t.k == Tok::Float) {
      Tok n = next();
      auto e = node(Expr::Lit, line);
      e->lit = n.k == Tok::Int ? Value::integer(n.i) : Value::real(n.f);
      return e;
    }
    if (skip_op("(")) {
      if (skip_op(")")) return node(Expr::TupleE, line);
      ExprP e = tuple(true);
      expect_op(")");
      return e;
    }
    const bool list = cur().op("[");
    if (list || cur().op("{")) {  // [a, b] or {k: v, ...}: items flat, a dict's as key, value
      next();
      auto e = node(list ? Expr::ListE : Expr::DictE, line);
      const char* close = list ? "]" : "}";
      while (!cur().op(close)) {
        e->a.push_back(expression(true));
        if (!list) {
          expect_op(":");
          e->a.push_back(expression(true));
        }
        if (!skip_op(",")) break;
      }
      expect_op(close);
      return e;
    }
    error("unexpected " + describe(t));
  }
  void call_args(Expr* e) {
    expect_op("(");
    while (!cur().op(")")) {
      if (cur().op("*") || cur().op("**")) error("*args / **kwargs calls are not supported");
      if (cur().k == Tok::Name && peek().op("=")) {
        std::string k = next().s;
        next();
        e->kw.emplace_back(k, expression(true));
      } else {
        if (!e->kw.empty()) error("a positional argument follows a keyword argument");
        e->a.push_back(expression(true));
      }
      if (!skip_op(",")) break;
    }
    expect_op(")");
  }
  ExprP call(ExprP callee, int line) {
    auto c = node(Expr::Call, line);
    c->a.push_back(std::move(callee));
    call_args(c.get());
    return c;
  }
  ExprP postfix(ExprP e) {
    while (true) {
      int line = cur().line;
      if (skip_op(".")) {
        if (cur().k == Tok::Int) {
          auto it = node(Expr::Item, line);
          it->a.push_back(std::move(e));
          auto key = node(Expr::Lit, line);
          key->lit = Value::integer(next().i);
          it->a.push_back(std::move(key));
          e = std::move(it);
        } else {
          auto at = node(Expr::Attr, line);
          at->name = expect_name();
          at->a.push_back(std::move(e));
          e = std::move(at);
        }
      } else if (skip_op("[")) {
        e = subscript(std::move(e), line);
      } else if (cur().op("(")) {
        e = call(std::move(e), line);
      } else {
        return e;
      }
    }
  }
  ExprP subscript(ExprP obj, int line) {
    auto part = [&]() -> ExprP { return cur().op(":") || cur().op("]") ? nullptr : expression(true); };
    ExprP start = part();
    if (!cur().op(":")) {
      expect_op("]");
      if (!start) error("empty subscript");
      auto it = node(Expr::Item, line);
      it->a.push_back(std::move(obj));
      it->a.push_back(std::move(start));
      return it;
    }
    next();
    auto sl = node(Expr::Slice, line);
    sl->a.push_back(std::move(obj));
    sl->a.push_back(std::move(start));
    sl->a.push_back(part());
    sl->a.push_back(skip_op(":") ? part() : nullptr);
    expect_op("]");
    return sl;
  }
  ExprP filters(ExprP e) {
    while (true) {
      int line = cur().line;
      if (skip_op("|")) {
        auto f = node(Expr::Filter, line);
        f->name = expect_name();
        while (skip_op(".")) f->name.append(".").append(expect_name());
        f->a.push_back(std::move(e));
        if (cur().op("(")) call_args(f.get());
        e = std::move(f);
      } else if (cur().name("is")) {
        next();
        auto t = node(Expr::Test, line);
        t->negate = skip_name("not");
        t->name = expect_name();
        while (skip_op(".")) t->name.append(".").append(expect_name());
        t->a.push_back(std::move(e));
        const Tok& c = cur();
        if (c.op("(")) call_args(t.get());
        else if ((c.k == Tok::Name || c.k == Tok::Str || c.k == Tok::Int || c.k == Tok::Float || c.op("[") ||
                  c.op("{")) &&
                 !c.name("else") && !c.name("or") && !c.name("and")) {
          if (c.name("is")) error("tests cannot be chained with 'is'");
          t->a.push_back(postfix(primary()));
        }
        e = std::move(t);
      } else if (cur().op("(")) {
        e = call(std::move(e), line);
      } else {
        return e;
      }
    }
  }
};

// ---------------------------------------------------------------------------------------
// Interpreter

enum class Flow { Normal, Break, Continue };

// Binds a call's arguments to named parameters with defaults, as Python would.
List bind(const char* fname, Args& args, std::initializer_list<std::pair<const char*, Value>> params) {
  List out;
  for (auto& p : params) out.push_back(p.second);
  if (args.pos.size() > out.size())
    fail(std::string(fname) + "() takes at most " + std::to_string(out.size()) + " arguments (" +
         std::to_string(args.pos.size()) + " given)");
  for (size_t k = 0; k < args.pos.size(); ++k) out[k] = std::move(args.pos[k]);
  for (auto& [name, v] : args.kw) {
    size_t k = 0;
    for (auto& p : params) {
      if (name == p.first) break;
      ++k;
    }
    if (k == out.size()) fail(std::string(fname) + "() got an unexpected keyword argument '" + name + "'");
    out[k] = std::move(v);
  }
  return out;
}

int64_t need_int(const Value& v, const char* what) {
  if (!v.is_intlike()) fail(std::string(what) + " must be an integer, not " + type_name(v));
  return v.as_int();
}
const std::string& need_str(const Value& v, const char* what) {
  if (v.t != T::Str) fail(std::string(what) + " must be a string, not " + type_name(v));
  return v.s;
}

// Python's slice index arithmetic.
std::vector<int64_t> slice_indices(int64_t len, const Value& start, const Value& stop, const Value& step) {
  int64_t st = step.t == T::None || step.t == T::Undef ? 1 : need_int(step, "slice step");
  if (st == 0) fail("slice step cannot be zero");
  auto adj = [&](const Value& v, int64_t dflt) {
    if (v.t == T::None || v.t == T::Undef) return dflt;
    int64_t x = need_int(v, "slice index");
    if (x < 0) x = std::max<int64_t>(x + len, st < 0 ? -1 : 0);
    else x = std::min(x, st < 0 ? len - 1 : len);
    return x;
  };
  int64_t a = adj(start, st < 0 ? len - 1 : 0), b = adj(stop, st < 0 ? -1 : len);
  std::vector<int64_t> idx;
  for (int64_t k = a; st > 0 ? k < b : k > b; k += st) idx.push_back(k);
  return idx;
}

std::vector<std::string> py_split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep.t == T::None || sep.t == T::Undef) {  // runs of whitespace; no empty strings
    std::u32string c = to_cps(s);
    std::vector<std::pair<size_t, size_t>> words;
    for (size_t k = 0; k < c.size();) {
      while (k < c.size() && py_space(c[k])) ++k;
      size_t b = k;
      while (k < c.size() && !py_space(c[k])) ++k;
      if (k > b) words.emplace_back(b, k);
    }
    if (maxsplit >= 0 && static_cast<int64_t>(words.size()) > maxsplit + 1) {
      if (from_right) {
        size_t keep = words.size() - static_cast<size_t>(maxsplit);
        size_t b = 0;
        while (b < c.size() && py_space(c[b])) ++b;
        parts.push_back(from_cps(std::u32string_view(c).substr(b, words[keep - 1].second - b)));
        for (size_t k = keep; k < words.size(); ++k)
          parts.push_back(from_cps(std::u32string_view(c).substr(words[k].first, words[k].second - words[k].first)));
        return parts;
      }
      size_t m = static_cast<size_t>(maxsplit);
      for (size_t k = 0; k < m; ++k)
        parts.push_back(from_cps(std::u32string_view(c).substr(words[k].first, words[k].second - words[k].first)));
      size_t e = c.size();
      while (e > words[m].first && py_space(c[e - 1])) --e;
      parts.push_back(from_cps(std::u32string_view(c).substr(words[m].first, e - words[m].first)));
      return parts;
    }
    for (auto [b, e] : words) parts.push_back(from_cps(std::u32string_view(c).substr(b, e - b)));
    return parts;
  }
  const std::string& d = need_str(sep, "split separator");
  if (d.empty()) fail("empty separator");
  std::vector<size_t> cuts;
  for (size_t p = s.find(d); p != std::string::npos; p = s.find(d, p + d.size())) cuts.push_back(p);
  if (maxsplit >= 0 && static_cast<int64_t>(cuts.size()) > maxsplit) {
    if (from_right) {
      // rsplit scans from the right: re-find non-overlapping matches backwards.
      cuts.clear();
      for (size_t end = s.size(); static_cast<int64_t>(cuts.size()) < maxsplit;) {
        if (end < d.size()) break;
        size_t p = s.rfind(d, end - d.size());
        if (p == std::string::npos) break;
        cuts.insert(cuts.begin(), p);
        end = p;
      }
    } else {
      cuts.resize(static_cast<size_t>(maxsplit));
    }
  }
  size_t b = 0;
  for (size_t p : cuts) parts.push_back(s.substr(b, p - b)), b = p + d.size();
  parts.push_back(s.substr(b));
  return parts;
}

std::string py_strip(const std::string& s, const Value& chars, bool left, bool right) {
  std::u32string c = to_cps(s), set;
  bool ws = chars.t == T::None || chars.t == T::Undef;
  if (!ws) set = to_cps(need_str(chars, "strip characters"));
  auto strip = [&](char32_t x) { return ws ? py_space(x) : set.find(x) != std::u32string::npos; };
  size_t b = 0, e = c.size();
  if (left)
    while (b < e && strip(c[b])) ++b;
  if (right)
    while (e > b && strip(c[e - 1])) --e;
  return from_cps(std::u32string_view(c).substr(b, e - b));
}

std::vector<std::string> splitlines(const std::string& s) {
  std::u32string c = to_cps(s);
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t k = 0; k < c.size(); ++k) {
    char32_t x = c[k];
    bool br = x == '\n' || x == '\r' || x == 0x0B || x == 0x0C || (x >= 0x1C && x <= 0x1E) || x == 0x85 ||
              x == 0x2028 || x == 0x2029;
    if (!br) continue;
    out.push_back(from_cps(std::u32string_view(c).substr(b, k - b)));
    if (x == '\r' && k + 1 < c.size() && c[k + 1] == '\n') ++k;
    b = k + 1;
  }
  if (b < c.size()) out.push_back(from_cps(std::u32string_view(c).substr(b)));
  return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& nw, int64_t count) {
  if (old.empty()) {  // Python inserts `nw` between code points (and at both ends)
    std::u32string c = to_cps(s);
    std::string out;
    int64_t n = 0;
    for (size_t k = 0; k <= c.size(); ++k) {
      if (count < 0 || n < count) out += nw, ++n;
      if (k < c.size()) out += cp_to_utf8(c[k]);
    }
    return out;
  }
  std::string out;
  size_t b = 0;
  int64_t n = 0;
  for (size_t p = s.find(old); p != std::string::npos && (count < 0 || n < count); p = s.find(old, b), ++n) {
    out += s.substr(b, p - b) + nw;
    b = p + old.size();
  }
  return out + s.substr(b);
}

bool str_int(std::string_view s, int64_t base, int64_t* out) {
  std::string t = py_strip(std::string(s), Value::none(), true, true);
  std::string digits;
  size_t p = 0;
  bool neg = false;
  if (p < t.size() && (t[p] == '+' || t[p] == '-')) neg = t[p++] == '-';
  for (; p < t.size(); ++p) {
    if (t[p] == '_' && !digits.empty() && p + 1 < t.size() && t[p + 1] != '_') continue;
    digits += t[p];
  }
  if (digits.empty() || base < 2 || base > 36) return false;
  auto r = std::from_chars(digits.data(), digits.data() + digits.size(), *out, static_cast<int>(base));
  if (r.ec != std::errc() || r.ptr != digits.data() + digits.size()) return false;
  if (neg) *out = -*out;
  return true;
}
bool str_float(std::string_view s, double* out) {
  std::string t = py_strip(std::string(s), Value::none(), true, true);
  if (t.empty() || t.find_first_of("xXpP") != std::string::npos) return false;
  std::string u;
  for (char c : t)
    if (c != '_') u += c;
  char* end = nullptr;
  *out = std::strtod(u.c_str(), &end);
  return end == u.c_str() + u.size();
}

// printf-style `str % args` for %s %r %d %i %f %e %g %x %o %c %% with flags, width and
// precision; a tuple gives several arguments; %(name)s is refused.
std::string py_percent(const std::string& fmt, const Value& arg) {
  List args = arg.t == T::Tuple ? *arg.l : List{arg};
  // A mapping or a list taken whole swallows leftovers (CPython's PyMapping_Check rule).
  const bool lenient = arg.t == T::Dict || arg.t == T::List || arg.t == T::Undef;
  size_t next = 0;
  std::string out;
  for (size_t p = 0; p < fmt.size(); ++p) {
    if (fmt[p] != '%') {
      out += fmt[p];
      continue;
    }
    if (++p >= fmt.size()) fail("incomplete format");
    if (fmt[p] == '(') fail("%(name)s formatting is not supported here");
    std::string spec = "%";
    while (p < fmt.size() && std::strchr("-+ #0", fmt[p])) spec += fmt[p++];
    while (p < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[p]))) spec += fmt[p++];
    if (p < fmt.size() && fmt[p] == '.') {
      spec += fmt[p++];
      while (p < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[p]))) spec += fmt[p++];
    }
    if (p >= fmt.size()) fail("incomplete format");
    char c = fmt[p];
    if (c == '%') {
      out += '%';
      continue;
    }
    if (next >= args.size()) fail("not enough arguments for format string");
    const Value& v = args[next++];
    if (spec.size() > 24) fail("format spec too long");
    char buf[512];
    if (c == 's' || c == 'r' || c == 'a') {
      std::string sv = c == 's' ? py_str(v) : py_repr(v);
      std::snprintf(buf, sizeof buf, (spec + "s").c_str(), "");  // width and flags on an empty string
      size_t width = std::strlen(buf);
      size_t prec = spec.find('.') == std::string::npos ? sv.size()
                                                        : std::strtoul(spec.c_str() + spec.find('.') + 1, nullptr, 10);
      std::u32string cps = to_cps(sv);
      if (prec < cps.size()) cps.resize(prec), sv = from_cps(cps);
      size_t len = cps.size();
      std::string pad = width > len ? std::string(width - len, ' ') : "";
      out += spec.find('-') != std::string::npos ? sv + pad : pad + sv;
    } else if (std::strchr("diuxXoc", c)) {
      if (!v.is_num()) fail(std::string("%") + c + " format: a real number is required, not " + type_name(v));
      int64_t x = v.t == T::Float ? static_cast<int64_t>(v.f) : v.as_int();
      if (c == 'c') fail("%c formatting is not supported here");
      std::snprintf(buf, sizeof buf, (spec + "ll" + (c == 'i' || c == 'u' ? 'd' : c)).c_str(),
                    static_cast<long long>(x));
      out += buf;
    } else if (std::strchr("eEfFgG", c)) {
      if (!v.is_num()) fail(std::string("must be real number, not ") + type_name(v));
      std::snprintf(buf, sizeof buf, (spec + c).c_str(), v.as_double());
      out += buf;
    } else {
      fail(std::string("unsupported format character '") + c + "'");
    }
  }
  if (next < args.size() && !lenient) fail("not all arguments converted during string formatting");
  return out;
}

// str.format with plain fields: {}, {0}, {name}, !r / !s; a format spec is refused.
std::string py_format(const std::string& fmt, const Args& a) {
  std::string out;
  size_t next_auto = 0;
  for (size_t p = 0; p < fmt.size(); ++p) {
    char c = fmt[p];
    if (c == '}') {
      if (p + 1 < fmt.size() && fmt[p + 1] == '}') ++p;
      else fail("Single '}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (p + 1 < fmt.size() && fmt[p + 1] == '{') {
      out += '{';
      ++p;
      continue;
    }
    size_t q = fmt.find('}', p);
    if (q == std::string::npos) fail("Single '{' encountered in format string");
    std::string field = fmt.substr(p + 1, q - p - 1);
    p = q;
    if (field.find(':') != std::string::npos) fail("format specs in str.format are not supported here");
    char conv = 's';
    if (auto bang = field.find('!'); bang != std::string::npos) {
      conv = bang + 1 < field.size() ? field[bang + 1] : '?';
      if (conv != 'r' && conv != 's') fail("unsupported conversion in str.format");
      field.resize(bang);
    }
    const Value* v = nullptr;
    int64_t idx = 0;
    if (field.empty() ||
        std::all_of(field.begin(), field.end(), [](char d) { return std::isdigit(static_cast<unsigned char>(d)); })) {
      idx = field.empty() ? static_cast<int64_t>(next_auto++) : std::stoll(field.substr(0, 18));
      if (idx >= static_cast<int64_t>(a.pos.size())) fail("Replacement index " + std::to_string(idx) + " out of range");
      v = &a.pos[static_cast<size_t>(idx)];
    } else {
      for (auto& [k, x] : a.kw)
        if (k == field) v = &x;
      if (!v) fail("KeyError: '" + field + "'");
    }
    out += conv == 'r' ? py_repr(*v) : py_str(*v);
  }
  return out;
}

// markupsafe's escape: XML's five entities, quotes spelled as numbers.
std::string html_escape(const std::string& s) {
  return py_replace(py_replace(xml_escape(s), "&quot;", "&#34;", -1), "&apos;", "&#39;", -1);
}

struct Interp {
  const JinjaLimits& lim;
  std::string out;
  std::vector<std::unordered_map<std::string, Value>> frames;
  int line = 0;
  size_t floor = 0;  // a macro body sees its own frames and the template's globals (frame 0)
  int64_t steps = 0;
  int depth = 0;

  explicit Interp(const JinjaLimits& l) : lim(l) {}

  void step() {
    if (++steps > lim.max_steps)
      fail("the template ran more than " + std::to_string(lim.max_steps) + " loop steps and calls");
  }
  void emit(std::string_view s) {
    if (out.size() + s.size() > lim.max_output)
      fail("the template's output passed " + std::to_string(lim.max_output) + " bytes");
    out += s;
  }

  Value lookup(const std::string& n) const {
    for (size_t k = frames.size(); k-- > floor;) {
      auto it = frames[k].find(n);
      if (it != frames[k].end()) return it->second;
    }
    if (floor > 0) {
      auto it = frames[0].find(n);
      if (it != frames[0].end()) return it->second;
    }
    return Value::undef("'" + n + "' is undefined");
  }

  // ---- statements ----
  Flow exec(const Body& body) {
    for (auto& s : body) {
      Flow f = exec(*s);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec(const Stmt& s) {
    line = s.line;
    switch (s.k) {
      case Stmt::Text: emit(s.text); break;
      case Stmt::Out: {
        Value v = eval(*s.e[0]);
        if (v.t != T::Undef) emit(py_str(v));
        break;
      }
      case Stmt::If:
        for (size_t k = 0; k < s.bodies.size(); ++k)
          if (!s.e[k] || truthy(eval(*s.e[k]))) return exec(s.bodies[k]);
        break;
      case Stmt::For: return exec_for(s);
      case Stmt::Set: assign(s.names, eval(*s.e[0])); break;
      case Stmt::SetAttr: {
        Value ns = lookup(s.text);
        if (ns.t != T::Ns) fail("cannot assign attribute on non-namespace object '" + s.text + "'");
        if (!s.attr.empty() && s.attr[0] == '_') fail("namespace attributes cannot start with '_': " + s.attr);
        ns.d->set(s.attr, eval(*s.e[0]));
        break;
      }
      case Stmt::SetBlock: frames.back()[s.text] = Value::str(capture(s.bodies[0])); break;
      case Stmt::Macro: frames.back()[s.text] = function(s); break;
      case Stmt::CallBlock: {
        auto alive = std::make_shared<bool>(true);
        struct End {
          std::shared_ptr<bool> a;
          ~End() { *a = false; }
        } end{alive};
        Value caller = function(s, alive);
        Value v = eval_call(*s.call, &caller);
        if (v.t != T::Undef) emit(py_str(v));
        break;
      }
      case Stmt::Break: return Flow::Break;
      case Stmt::Continue: return Flow::Continue;
      case Stmt::Scope: return exec(s.bodies[0]);
    }
    return Flow::Normal;
  }

  std::string capture(const Body& b) {
    std::string saved;
    std::swap(saved, out);
    exec(b);
    std::swap(saved, out);
    if (out.size() + saved.size() > lim.max_output)
      fail("the template's output passed " + std::to_string(lim.max_output) + " bytes");
    return saved;
  }

  void assign(const std::vector<std::string>& names, Value v) {
    if (names.size() == 1) {
      frames.back()[names[0]] = std::move(v);
      return;
    }
    List items = iterate(v);
    if (items.size() != names.size())
      fail("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(names.size()) + " names");
    for (size_t k = 0; k < names.size(); ++k) frames.back()[names[k]] = std::move(items[k]);
  }

  Flow exec_for(const Stmt& s) {
    List all = iterate(eval(*s.e[0]));
    if (s.e[1]) {  // the inline filter sees each item bound, before loop.* exists
      List kept;
      for (auto& v : all) {
        step();
        frames.emplace_back();
        assign(s.names, v);
        bool keep = truthy(eval(*s.e[1]));
        frames.pop_back();
        if (keep) kept.push_back(std::move(v));
      }
      all = std::move(kept);
    }
    if (all.empty()) {
      if (s.bodies.size() > 1) exec(s.bodies[1]);
      return Flow::Normal;
    }
    const auto n = static_cast<int64_t>(all.size());
    for (int64_t k = 0; k < n; ++k) {
      step();
      frames.emplace_back();  // each iteration sees its own sets (jinja2 scoping)
      assign(s.names, all[static_cast<size_t>(k)]);
      auto loop = std::make_shared<Dict>();
      loop->kv = {{"index", Value::integer(k + 1)},    {"index0", Value::integer(k)},
                  {"revindex", Value::integer(n - k)}, {"revindex0", Value::integer(n - k - 1)},
                  {"first", Value::boolean(k == 0)},   {"last", Value::boolean(k == n - 1)},
                  {"length", Value::integer(n)},       {"depth", Value::integer(1)},
                  {"depth0", Value::integer(0)}};
      if (k > 0) loop->kv.emplace_back("previtem", all[static_cast<size_t>(k - 1)]);
      if (k + 1 < n) loop->kv.emplace_back("nextitem", all[static_cast<size_t>(k + 1)]);
      auto cyc = std::make_shared<Fn>();
      cyc->name = "cycle";
      cyc->call = [k](Interp&, Args& a) {
        if (a.pos.empty()) fail("loop.cycle() needs at least one value");
        return a.pos[static_cast<size_t>(k) % a.pos.size()];
      };
      Value c = Value::make(T::Fn);
      c.fn = std::move(cyc);
      loop->kv.emplace_back("cycle", std::move(c));
      frames.back()["loop"] = Value::dict(std::move(loop));
      Flow f = exec(s.bodies[0]);
      frames.pop_back();
      if (f == Flow::Break) break;
    }
    return Flow::Normal;
  }

  // A macro (def: Stmt::Macro) or a call block's caller (Stmt::CallBlock) as a function value.
  // A macro's body sees its arguments and the template's globals; a caller's sees its call
  // site's variables as well, so the frames pushed since (the macro's) are set aside while
  // it runs. A caller lives as long as its block: `alive` says whether it still does.
  Value function(const Stmt& def, std::shared_ptr<const bool> alive = nullptr) {
    auto fn = std::make_shared<Fn>();
    const bool caller = def.k == Stmt::CallBlock;
    fn->name = caller ? "caller" : def.text;
    const size_t site = frames.size(), site_floor = floor;
    fn->call = [d = &def, caller, site, site_floor, alive](Interp& in, Args& a) {
      in.step();
      if (caller && (!*alive || in.frames.size() < site))
        fail("caller() called after its {% call %} block ended; not supported here");
      if (in.depth >= in.lim.max_depth) fail("macros nested deeper than " + std::to_string(in.lim.max_depth));
      const std::string what = caller ? "caller" : "macro '" + d->text + "'";
      if (a.pos.size() > d->names.size()) fail(what + " takes " + std::to_string(d->names.size()) + " arguments");
      std::unordered_map<std::string, Value> frame;
      for (size_t k = 0; k < d->names.size(); ++k) {
        if (k < a.pos.size()) frame[d->names[k]] = a.pos[k];
      }
      for (auto& [k, v] : a.kw) {
        // jinja2 passes a call block's body as the keyword `caller`, to macros that read it.
        const bool known =
            std::find(d->names.begin(), d->names.end(), k) != d->names.end() || (k == "caller" && d->reads_caller);
        if (!known) fail(what + " got an unexpected keyword argument '" + k + "'");
        frame[k] = v;
      }
      if (d->reads_caller && !frame.count("caller")) frame["caller"] = Value::undef("No caller defined");
      struct Restore {
        Interp& in;
        size_t size, floor;
        int line;
        std::vector<std::unordered_map<std::string, Value>> aside;
        ~Restore() {
          in.frames.resize(size - aside.size());
          for (auto& f : aside) in.frames.push_back(std::move(f));
          in.floor = floor;
          --in.depth;
          in.line = line;
        }
      } restore{in, in.frames.size(), in.floor, in.line, {}};
      if (caller) {
        for (size_t k = site; k < in.frames.size(); ++k) restore.aside.push_back(std::move(in.frames[k]));
        in.frames.resize(site);
      }
      in.frames.push_back(std::move(frame));
      in.floor = caller ? site_floor : in.frames.size() - 1;
      ++in.depth;
      auto& top = in.frames.back();
      for (size_t k = 0; k < d->names.size(); ++k)
        if (!top.count(d->names[k]))
          top[d->names[k]] =
              d->e[k] ? in.eval(*d->e[k]) : Value::undef("parameter '" + d->names[k] + "' was not given");
      return Value::str(in.capture(d->bodies[0]));
    };
    Value v = Value::make(T::Fn);
    v.fn = std::move(fn);
    return v;
  }

  // ---- values ----
  List iterate(const Value& v) {
    switch (v.t) {
      case T::List:
      case T::Tuple: return *v.l;
      case T::Dict: {
        List keys;
        for (auto& kv : v.d->kv) keys.push_back(Value::str(kv.first));
        return keys;
      }
      case T::Str: {
        List chars;
        for (char32_t c : to_cps(v.s)) chars.push_back(Value::str(cp_to_utf8(c)));
        return chars;
      }
      case T::Undef: return {};
      default: fail(std::string("'") + type_name(v) + "' object is not iterable");
    }
  }

  int64_t length(const Value& v) {
    switch (v.t) {
      case T::Str: return static_cast<int64_t>(cp_len(v.s));
      case T::List:
      case T::Tuple: return static_cast<int64_t>(v.l->size());
      case T::Dict: return static_cast<int64_t>(v.d->kv.size());
      case T::Undef: return 0;
      default: fail(std::string("object of type '") + type_name(v) + "' has no len()");
    }
  }

  static Value bound(std::string name, std::function<Value(Interp&, Args&)> f) {
    auto fn = std::make_shared<Fn>();
    fn->name = std::move(name);
    fn->call = std::move(f);
    Value v = Value::make(T::Fn);
    v.fn = std::move(fn);
    return v;
  }

  static bool is_method(T t, const std::string& n) {
    static const char* const str_m[] = {
        "startswith", "endswith",   "split",   "rsplit",  "strip",   "lstrip", "rstrip", "upper",      "lower",
        "title",      "capitalize", "replace", "find",    "rfind",   "count",  "join",   "splitlines", "isdigit",
        "isalpha",    "isspace",    "isalnum", "isupper", "islower", "format", "index"};
    static const char* const dict_m[] = {"items", "keys", "values", "get"};
    static const char* const list_m[] = {"index", "count"};
    auto in = [&](auto& arr) {
      return std::any_of(std::begin(arr), std::end(arr), [&](const char* m) { return n == m; });
    };
    if (t == T::Str) return in(str_m);
    if (t == T::Dict) return in(dict_m);
    if (t == T::List || t == T::Tuple) return in(list_m);
    return false;
  }

  Value method(const Value& obj, const std::string& n) {
    return bound(n, [obj, n](Interp& in, Args& a) { return in.call_method(obj, n, a); });
  }

  Value get_attr(const Value& obj, const std::string& n) {
    if (obj.t == T::Undef) fail_undefined(obj);
    if (is_method(obj.t, n)) return method(obj, n);
    if (obj.t == T::Dict || obj.t == T::Ns) {
      if (const Value* v = obj.d->find(n)) return *v;
    }
    return Value::undef("'" + std::string(obj.t == T::Dict ? "dict object" : type_name(obj)) + "' has no attribute '" +
                        n + "'");
  }

  Value get_item(const Value& obj, const Value& key) {
    if (obj.t == T::Undef) fail_undefined(obj);
    if ((obj.t == T::Dict || obj.t == T::Ns) && key.t == T::Str) {
      if (const Value* v = obj.d->find(key.s)) return *v;
    }
    if ((obj.is_seq() || obj.t == T::Str) && key.is_intlike()) {
      int64_t len = length(obj), k = key.as_int();
      if (k < 0) k += len;
      if (k >= 0 && k < len) {
        if (obj.t != T::Str) return (*obj.l)[static_cast<size_t>(k)];
        if (ascii(obj.s)) return Value::str(obj.s.substr(static_cast<size_t>(k), 1));
        return Value::str(cp_to_utf8(to_cps(obj.s)[static_cast<size_t>(k)]));
      }
      return Value::undef(std::string(type_name(obj)) + " index " + std::to_string(key.as_int()) + " out of range");
    }
    if (key.t == T::Str && is_method(obj.t, key.s)) return method(obj, key.s);
    return Value::undef("'" + std::string(obj.t == T::Dict ? "dict object" : type_name(obj)) + "' has no attribute " +
                        py_repr(key));
  }

  Value call(const Value& f, Args& a) {
    if (f.t == T::Undef) fail_undefined(f);
    if (f.t != T::Fn) fail(std::string("'") + type_name(f) + "' object is not callable");
    return f.fn->call(*this, a);
  }

  // A call's, filter's or test's arguments: e.a[1:] positional (e.a[0] is the callee or
  // subject), then the keywords.
  Args eval_args(const Expr& e) {
    Args a;
    for (size_t k = 1; k < e.a.size(); ++k) a.pos.push_back(eval(*e.a[k]));
    for (auto& [k, x] : e.kw) a.kw.emplace_back(k, eval(*x));
    return a;
  }

  // `caller`: a call block's body, passed as the keyword jinja2 passes it as.
  Value eval_call(const Expr& e, const Value* caller = nullptr) {
    Args a = eval_args(e);
    if (caller) a.kw.emplace_back("caller", *caller);
    const Expr& callee = *e.a[0];
    if (callee.k == Expr::Attr) {
      Value obj = eval(*callee.a[0]);
      line = e.line;
      if (is_method(obj.t, callee.name)) return call_method(obj, callee.name, a);
      return call(get_attr(obj, callee.name), a);
    }
    Value f = eval(callee);
    line = e.line;
    return call(f, a);
  }

  Value eval(const Expr& e) {
    line = e.line;
    switch (e.k) {
      case Expr::Lit: return e.lit;
      case Expr::Name: return lookup(e.name);
      case Expr::Attr: {
        Value o = eval(*e.a[0]);
        line = e.line;
        return get_attr(o, e.name);
      }
      case Expr::Item: {
        Value o = eval(*e.a[0]), k = eval(*e.a[1]);
        line = e.line;
        return get_item(o, k);
      }
      case Expr::Slice: {
        Value o = eval(*e.a[0]);
        Value st = e.a[1] ? eval(*e.a[1]) : Value::none(), sp = e.a[2] ? eval(*e.a[2]) : Value::none(),
              sd = e.a[3] ? eval(*e.a[3]) : Value::none();
        line = e.line;
        if (o.t == T::Undef) fail_undefined(o);
        if (o.t == T::Str) {
          std::u32string c = to_cps(o.s), r;
          for (int64_t k : slice_indices(static_cast<int64_t>(c.size()), st, sp, sd)) r += c[static_cast<size_t>(k)];
          return Value::str(from_cps(r));
        }
        // Slices bypass jinja2's getitem: Python's own TypeError.
        if (o.t == T::Dict) fail("unhashable type: 'slice'");
        if (!o.is_seq()) fail(std::string("'") + type_name(o) + "' object is not subscriptable");
        List r;
        for (int64_t k : slice_indices(static_cast<int64_t>(o.l->size()), st, sp, sd))
          r.push_back((*o.l)[static_cast<size_t>(k)]);
        return Value::list(std::move(r), o.t);
      }
      case Expr::Call: return eval_call(e);
      case Expr::Filter:
      case Expr::Test: {
        Value subject = eval(*e.a[0]);
        Args a = eval_args(e);
        line = e.line;
        if (e.k == Expr::Filter) return filter(e.name, subject, a);
        return Value::boolean(test(e.name, subject, a) != e.negate);
      }
      case Expr::Neg:
      case Expr::Pos: {
        Value v = eval(*e.a[0]);
        line = e.line;
        if (!v.is_num())
          fail(std::string("bad operand type for unary ") + (e.k == Expr::Neg ? "-" : "+") + ": '" + type_name(v) +
               "'");
        if (e.k == Expr::Pos) return v.t == T::Bool ? Value::integer(v.as_int()) : v;
        if (v.t == T::Float) return Value::real(-v.f);
        if (v.as_int() == INT64_MIN) fail("integer overflow");
        return Value::integer(-v.as_int());
      }
      case Expr::Not: return Value::boolean(!truthy(eval(*e.a[0])));
      case Expr::And: {
        Value l = eval(*e.a[0]);
        return truthy(l) ? eval(*e.a[1]) : l;
      }
      case Expr::Or: {
        Value l = eval(*e.a[0]);
        return truthy(l) ? l : eval(*e.a[1]);
      }
      case Expr::Bin: {
        Value l = eval(*e.a[0]), r = eval(*e.a[1]);
        line = e.line;
        return binop(e.name, l, r);
      }
      case Expr::Cmp: {
        Value l = eval(*e.a[0]);
        for (size_t k = 0; k < e.ops.size(); ++k) {
          Value r = eval(*e.a[k + 1]);
          line = e.line;
          if (!compare(e.ops[k], l, r)) return Value::boolean(false);
          l = std::move(r);
        }
        return Value::boolean(true);
      }
      case Expr::Cond:
        if (truthy(eval(*e.a[1]))) return eval(*e.a[0]);
        return e.a[2] ? eval(*e.a[2]) : Value::undef("the conditional expression had no else");
      case Expr::ListE:
      case Expr::TupleE: {
        List l;
        for (auto& x : e.a) l.push_back(eval(*x));
        return Value::list(std::move(l), e.k == Expr::ListE ? T::List : T::Tuple);
      }
      case Expr::DictE: {
        auto d = std::make_shared<Dict>();
        for (size_t k = 0; k + 1 < e.a.size(); k += 2) {
          Value key = eval(*e.a[k]);
          if (key.t != T::Str) fail("dict keys must be strings here, not " + std::string(type_name(key)));
          d->set(key.s, eval(*e.a[k + 1]));
        }
        return Value::dict(std::move(d));
      }
    }
    fail("bad expression");
  }

  bool contains(const Value& hay, const Value& needle) {
    switch (hay.t) {
      case T::Str:
        if (needle.t != T::Str)
          fail(std::string("'in <string>' requires string as left operand, not ") + type_name(needle));
        return hay.s.find(needle.s) != std::string::npos;
      case T::List:
      case T::Tuple: return std::any_of(hay.l->begin(), hay.l->end(), [&](const Value& x) { return py_eq(x, needle); });
      case T::Dict:
        if (needle.is_seq() && needle.t == T::List) fail("unhashable type: 'list'");
        if (needle.t == T::Dict || needle.t == T::Ns) fail(std::string("unhashable type: '") + type_name(needle) + "'");
        return needle.t == T::Str && hay.d->find(needle.s) != nullptr;
      case T::Undef: return false;
      default: fail(std::string("argument of type '") + type_name(hay) + "' is not iterable");
    }
  }

  bool compare(const std::string& op, const Value& l, const Value& r) {
    if (op == "==") return py_eq(l, r);
    if (op == "!=") return !py_eq(l, r);
    if (op == "in") return contains(r, l);
    if (op == "notin") return !contains(r, l);
    if (l.t == T::Undef) fail_undefined(l);
    if (r.t == T::Undef) fail_undefined(r);
    if (op == "<") return py_lt(l, r);
    if (op == ">") return py_lt(r, l);
    if (op == "<=") return !py_lt(r, l);
    return !py_lt(l, r);  // >=
  }

  // Python's integers are unbounded; ours stop at 64 bits, loudly.
  template <class Op>
  static int64_t checked(Op op, int64_t a, int64_t b) {
    int64_t v = 0;
    if (op(a, b, &v)) fail("integer overflow (Python's integers are unbounded; this renderer's are 64-bit)");
    return v;
  }

  Value repeat(const Value& seq, int64_t n) {
    n = std::max<int64_t>(0, n);
    if (seq.t == T::Str) {
      if (static_cast<double>(seq.s.size()) * static_cast<double>(n) > static_cast<double>(lim.max_output))
        fail("string repetition larger than the output limit");
      std::string out;
      for (int64_t k = 0; k < n; ++k) out += seq.s;
      return Value::str(std::move(out));
    }
    if (static_cast<double>(seq.l->size()) * static_cast<double>(n) > 1e6) fail("list repetition too large");
    List out;
    for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.l->begin(), seq.l->end());
    return Value::list(std::move(out), seq.t);
  }

  Value binop(const std::string& op, const Value& l, const Value& r) {
    if (op == "~") {
      std::string s = py_str(l) + py_str(r);
      if (s.size() > lim.max_output) fail("string larger than the output limit");
      return Value::str(std::move(s));
    }
    if (op == "%" && l.t == T::Str) return Value::str(py_percent(l.s, r));  // str.__mod__ takes any right side
    if (l.t == T::Undef) fail_undefined(l);
    if (r.t == T::Undef) fail_undefined(r);
    auto unsupported = [&]() -> Value {
      fail("unsupported operand type(s) for " + op + ": '" + type_name(l) + "' and '" + type_name(r) + "'");
    };
    if (l.is_num() && r.is_num()) {
      bool ints = l.t != T::Float && r.t != T::Float;
      int64_t a = l.as_int(), b = r.as_int();
      auto add = [](int64_t p, int64_t q, int64_t* o) { return __builtin_add_overflow(p, q, o); };
      auto sub = [](int64_t p, int64_t q, int64_t* o) { return __builtin_sub_overflow(p, q, o); };
      auto mul = [](int64_t p, int64_t q, int64_t* o) { return __builtin_mul_overflow(p, q, o); };
      double x = l.as_double(), y = r.as_double();
      if (op == "+") return ints ? Value::integer(checked(add, a, b)) : Value::real(x + y);
      if (op == "-") return ints ? Value::integer(checked(sub, a, b)) : Value::real(x - y);
      if (op == "*") return ints ? Value::integer(checked(mul, a, b)) : Value::real(x * y);
      if (op == "/") {
        if (y == 0) fail("division by zero");
        return Value::real(x / y);
      }
      if (op == "//" || op == "%") {
        if (ints ? b == 0 : y == 0) fail(op == "//" ? "integer division or modulo by zero" : "modulo by zero");
        if (ints) {
          if (a == INT64_MIN && b == -1) fail("integer overflow");
          int64_t q = a / b, m = a % b;
          if (m != 0 && ((m < 0) != (b < 0))) --q, m += b;
          return Value::integer(op == "//" ? q : m);
        }
        // CPython's float divmod, so that // and % agree with it to the last bit.
        double m = std::fmod(x, y), div = (x - m) / y;
        if (m != 0) {
          if ((y < 0) != (m < 0)) m += y, div -= 1.0;
        } else {
          m = std::copysign(0.0, y);
        }
        if (op == "%") return Value::real(m);
        double fl = std::copysign(0.0, x / y);
        if (div != 0) {
          fl = std::floor(div);
          if (div - fl > 0.5) fl += 1.0;
        }
        return Value::real(fl);
      }
      if (op == "**") {
        if (ints && b >= 0) {  // by squaring, overflow-checked
          int64_t acc = 1, base = a;
          for (int64_t e = b; e > 0;) {
            if (e & 1) acc = checked(mul, acc, base);
            e >>= 1;
            if (e) base = checked(mul, base, base);
          }
          return Value::integer(acc);
        }
        if (x == 0 && y < 0) fail("zero to a negative power");
        if (x < 0 && y != std::floor(y))
          fail("a negative number to a fractional power is complex in Python; not supported");
        return Value::real(std::pow(x, y));
      }
      return unsupported();
    }
    if (op == "+") {
      if (l.t == T::Str && r.t == T::Str) {
        if (l.s.size() + r.s.size() > lim.max_output) fail("string larger than the output limit");
        return Value::str(l.s + r.s);
      }
      if (l.is_seq() && l.t == r.t) {
        if (l.l->size() + r.l->size() > 1000000) fail("list too large");
        List out = *l.l;
        out.insert(out.end(), r.l->begin(), r.l->end());
        return Value::list(std::move(out), l.t);
      }
      if (l.t == T::Str && r.t != T::Str)
        fail(std::string("can only concatenate str (not \"") + type_name(r) + "\") to str");
    }
    if (op == "*") {
      if ((l.t == T::Str || l.is_seq()) && r.is_intlike()) return repeat(l, r.as_int());
      if ((r.t == T::Str || r.is_seq()) && l.is_intlike()) return repeat(r, l.as_int());
    }
    return unsupported();
  }

  // ---- filters ----
  Value attr_path(const Value& v, const Value& path) {
    if (path.t == T::Int) return get_item(v, path);
    Value cur = v;
    for (auto& part : py_split(need_str(path, "attribute"), Value::str("."), -1, false)) {
      int64_t idx;
      bool num = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c));
      }) && str_int(part, 10, &idx);
      cur = get_item(cur, num ? Value::integer(idx) : Value::str(part));  // past an undefined part: an error
    }
    return cur;
  }

  Value sort_key(const Value& v, bool case_sensitive, const Value& attribute) {
    Value k = attribute.t == T::None ? v : attr_path(v, attribute);
    if (!case_sensitive && k.t == T::Str) return Value::str(map_case(k.s, 0));
    return k;
  }

  List select(const Value& seq, Args& a, bool by_attr, bool keep) {
    List items = iterate(seq);
    Value attr;
    size_t first = 0;
    if (by_attr) {
      if (a.pos.empty()) fail("selectattr / rejectattr need an attribute name");
      attr = a.pos[0];
      first = 1;
    }
    std::string tname;
    Args targs;
    if (a.pos.size() > first) {
      tname = need_str(a.pos[first], "test name");
      targs.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(first + 1), a.pos.end());
      targs.kw = a.kw;
    }
    List out;
    for (auto& v : items) {
      step();
      Value x = by_attr ? attr_path(v, attr) : v;
      Args copy = targs;
      bool ok = tname.empty() ? truthy(x) : test(tname, x, copy);
      if (ok == keep) out.push_back(v);
    }
    return out;
  }

  Value filter(const std::string& n, const Value& v, Args& a) {
    auto args = [&](std::initializer_list<std::pair<const char*, Value>> p) { return bind(n.c_str(), a, p); };
    auto text = [&]() { return py_str(v); };
    if (n == "length" || n == "count") return Value::integer(length(v));
    if (n == "tojson") {
      List p = args({{"ensure_ascii", Value::boolean(false)},
                     {"indent", Value::none()},
                     {"separators", Value::none()},
                     {"sort_keys", Value::boolean(false)}});
      JsonStyle st;
      st.ensure_ascii = truthy(p[0]);
      if (p[1].t != T::None) {
        st.indent_on = true;
        st.item_sep = ",";
        if (p[1].t == T::Str) st.indent = p[1].s;
        else
          st.indent = std::string(
              static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(need_int(p[1], "indent"), 1024))), ' ');
      }
      if (p[2].t != T::None) {
        List sep = iterate(p[2]);
        if (sep.size() != 2) fail("tojson separators must be a pair");
        st.item_sep = need_str(sep[0], "separator");
        st.key_sep = need_str(sep[1], "separator");
      }
      st.sort_keys = truthy(p[3]);
      std::string out;
      to_json(v, st, 0, out);
      if (out.size() > lim.max_output) fail("tojson output larger than the output limit");
      return Value::str(std::move(out));
    }
    if (n == "trim") {
      List p = args({{"chars", Value::none()}});
      return Value::str(py_strip(text(), p[0], true, true));
    }
    if (n == "upper" || n == "lower" || n == "capitalize" || n == "title") {
      args({});
      return Value::str(map_case(text(), n == "lower" ? 0 : n == "upper" ? 1 : n == "capitalize" ? 2 : 4));
    }
    if (n == "string") return Value::str(py_str(v));
    if (n == "safe") return v;
    if (n == "e" || n == "escape") return Value::str(html_escape(py_str(v)));
    if (n == "default" || n == "d") {
      List p = args({{"default_value", Value::str("")}, {"boolean", Value::boolean(false)}});
      if (v.t == T::Undef || (truthy(p[1]) && !truthy(v))) return p[0];
      return v;
    }
    if (n == "first" || n == "last") {
      List items = iterate(v);
      if (items.empty()) return Value::undef("no " + n + " item, the sequence was empty");
      return n == "first" ? items.front() : items.back();
    }
    if (n == "list") return Value::list(iterate(v));
    if (n == "reverse") {
      if (v.t == T::Str) {
        std::u32string c = to_cps(v.s);
        std::reverse(c.begin(), c.end());
        return Value::str(from_cps(c));
      }
      List items = iterate(v);
      std::reverse(items.begin(), items.end());
      return Value::list(std::move(items));
    }
    if (n == "join") {
      List p = args({{"d", Value::str("")}, {"attribute", Value::none()}});
      std::string out, sep = py_str(p[0]);
      List items = iterate(v);
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += sep;
        out += py_str(p[1].t == T::None ? items[k] : attr_path(items[k], p[1]));
        if (out.size() > lim.max_output) fail("join output larger than the output limit");
      }
      return Value::str(std::move(out));
    }
    if (n == "replace") {
      List p = args({{"old", Value::none()}, {"new", Value::none()}, {"count", Value::none()}});
      return Value::str(
          py_replace(text(), py_str(p[0]), py_str(p[1]), p[2].t == T::None ? -1 : need_int(p[2], "count")));
    }
    if (n == "int") {
      if (v.t == T::Undef) fail_undefined(v);  // Undefined refuses numeric conversion
      List p = args({{"default", Value::integer(0)}, {"base", Value::integer(10)}});
      if (v.is_intlike()) return Value::integer(v.as_int());
      if (v.t == T::Float) {
        if (!std::isfinite(v.f)) return p[0];  // Python: OverflowError / ValueError, so the default
        if (std::fabs(v.f) >= 9.2e18) fail("integer overflow: " + py_float(v.f) + " does not fit in 64 bits");
        return Value::integer(static_cast<int64_t>(v.f));
      }
      int64_t x;
      double d;
      if (v.t == T::Str && str_int(v.s, need_int(p[1], "base"), &x)) return Value::integer(x);
      if (v.t == T::Str && str_float(v.s, &d) && std::isfinite(d) && std::fabs(d) < 9.2e18)
        return Value::integer(static_cast<int64_t>(d));
      return p[0];
    }
    if (n == "float") {
      if (v.t == T::Undef) fail_undefined(v);  // Undefined refuses numeric conversion
      List p = args({{"default", Value::real(0.0)}});
      if (v.is_num()) return Value::real(v.as_double());
      double d;
      if (v.t == T::Str && str_float(v.s, &d)) return Value::real(d);
      return p[0];
    }
    if (n == "abs") {
      if (v.t == T::Undef) fail_undefined(v);  // Undefined refuses numeric conversion
      if (!v.is_num()) fail(std::string("bad operand type for abs(): '") + type_name(v) + "'");
      if (v.t == T::Float) return Value::real(std::fabs(v.f));
      if (v.as_int() == INT64_MIN) fail("integer overflow");
      return Value::integer(std::llabs(v.as_int()));
    }
    if (n == "round") {
      if (v.t == T::Undef) fail_undefined(v);  // Undefined refuses numeric conversion
      List p = args({{"precision", Value::integer(0)}, {"method", Value::str("common")}});
      if (!v.is_num()) fail(std::string("round() needs a number, not ") + type_name(v));
      int64_t prec = std::clamp<int64_t>(need_int(p[0], "precision"), -300, 300);
      const std::string& m = need_str(p[1], "method");
      if (m == "common") {
        if (v.t != T::Float) return Value::integer(v.as_int());  // Python: round(int, n) is that int for n >= 0
        if (!std::isfinite(v.f) || prec > 300) return v;
        char buf[512];
        if (prec >= 0) {
          std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(prec), v.f);  // exact, round half to even
          return Value::real(std::strtod(buf, nullptr));
        }
        double s = std::pow(10.0, static_cast<double>(-prec));
        return Value::real(std::nearbyint(v.f / s) * s);
      }
      if (m != "ceil" && m != "floor") fail("round method must be common, ceil or floor");
      double s = std::pow(10.0, static_cast<double>(prec));
      double x = v.as_double() * s;
      return Value::real((m == "ceil" ? std::ceil(x) : std::floor(x)) / s);
    }
    if (n == "items") {
      if (v.t == T::Undef) return Value::list({});
      if (v.t != T::Dict) fail("items filter needs a mapping, not " + std::string(type_name(v)));
      List out;
      for (auto& [k, x] : v.d->kv) out.push_back(Value::list({Value::str(k), x}, T::Tuple));
      return Value::list(std::move(out));
    }
    if (n == "dictsort") {
      List p = args(
          {{"case_sensitive", Value::boolean(false)}, {"by", Value::str("key")}, {"reverse", Value::boolean(false)}});
      if (v.t != T::Dict) fail("dictsort needs a mapping, not " + std::string(type_name(v)));
      bool by_value = need_str(p[1], "by") == "value";
      List out;
      for (auto& [k, x] : v.d->kv) out.push_back(Value::list({Value::str(k), x}, T::Tuple));
      bool cs = truthy(p[0]);
      std::stable_sort(out.begin(), out.end(), [&](const Value& a, const Value& b) {
        return py_lt(sort_key((*a.l)[by_value], cs, Value::none()), sort_key((*b.l)[by_value], cs, Value::none()));
      });
      if (truthy(p[2])) std::reverse(out.begin(), out.end());
      return Value::list(std::move(out));
    }
    if (n == "sort") {
      List p = args({{"reverse", Value::boolean(false)},
                     {"case_sensitive", Value::boolean(false)},
                     {"attribute", Value::none()}});
      List items = iterate(v);
      bool cs = truthy(p[1]), rev = truthy(p[0]);
      std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
        Value ka = sort_key(a, cs, p[2]), kb = sort_key(b, cs, p[2]);
        return rev ? py_lt(kb, ka) : py_lt(ka, kb);
      });
      return Value::list(std::move(items));
    }
    if (n == "unique") {
      List p = args({{"case_sensitive", Value::boolean(false)}, {"attribute", Value::none()}});
      List out, seen;
      for (auto& x : iterate(v)) {
        step();
        Value k = sort_key(x, truthy(p[0]), p[1]);
        if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return py_eq(s, k); }))
          seen.push_back(k), out.push_back(x);
      }
      return Value::list(std::move(out));
    }
    if (n == "min" || n == "max") {
      List p = args({{"case_sensitive", Value::boolean(false)}, {"attribute", Value::none()}});
      List items = iterate(v);
      if (items.empty()) return Value::undef("no " + n + " item, the sequence was empty");
      size_t best = 0;
      for (size_t k = 1; k < items.size(); ++k) {
        Value a = sort_key(items[k], truthy(p[0]), p[1]), b = sort_key(items[best], truthy(p[0]), p[1]);
        if (n == "min" ? py_lt(a, b) : py_lt(b, a)) best = k;
      }
      return items[best];
    }
    if (n == "sum") {
      List p = args({{"attribute", Value::none()}, {"start", Value::integer(0)}});
      Value acc = p[1];
      for (auto& x : iterate(v)) acc = binop("+", acc, p[0].t == T::None ? x : attr_path(x, p[0]));
      return acc;
    }
    if (n == "map") {
      List items = iterate(v), out;
      for (auto& [k, x] : a.kw)
        if (k == "attribute") {
          Value dflt = Value::undef("");
          bool has_default = false;
          for (auto& [k2, x2] : a.kw)
            if (k2 == "default") dflt = x2, has_default = true;
          for (auto& it : items) {
            Value r = attr_path(it, x);
            out.push_back(r.t == T::Undef && has_default ? dflt : r);
          }
          return Value::list(std::move(out));
        }
      if (a.pos.empty()) fail("map needs a filter name or attribute=");
      std::string fname = need_str(a.pos[0], "filter name");
      for (auto& it : items) {
        step();
        Args fa;
        fa.pos.assign(a.pos.begin() + 1, a.pos.end());
        fa.kw = a.kw;
        out.push_back(filter(fname, it, fa));
      }
      return Value::list(std::move(out));
    }
    if (n == "select" || n == "reject") return Value::list(select(v, a, false, n == "select"));
    if (n == "selectattr" || n == "rejectattr") return Value::list(select(v, a, true, n == "selectattr"));
    if (n == "attr") {
      List p = args({{"name", Value::none()}});
      const std::string& name = need_str(p[0], "attribute name");
      if (is_method(v.t, name)) return method(v, name);
      if (v.t == T::Ns) return get_attr(v, name);
      return Value::undef("'" + std::string(type_name(v)) + "' has no attribute '" + name + "'");
    }
    if (n == "indent") {
      List p = args({{"width", Value::integer(4)}, {"first", Value::boolean(false)}, {"blank", Value::boolean(false)}});
      std::string ind =
          p[0].t == T::Str
              ? p[0].s
              : std::string(static_cast<size_t>(std::clamp<int64_t>(need_int(p[0], "width"), 0, 1024)), ' ');
      auto lines = splitlines(text() + "\n");
      std::string rv;
      if (truthy(p[2])) {
        for (size_t k = 0; k < lines.size(); ++k) rv += (k ? "\n" + ind : "") + lines[k];
      } else {
        rv = lines.empty() ? "" : lines[0];
        for (size_t k = 1; k < lines.size(); ++k) rv += "\n" + (lines[k].empty() ? "" : ind) + lines[k];
      }
      if (truthy(p[1])) rv = ind + rv;
      if (rv.size() > lim.max_output) fail("indent output larger than the output limit");
      return Value::str(std::move(rv));
    }
    if (n == "center") {
      List p = args({{"width", Value::integer(80)}});
      std::string s = text();
      int64_t w = std::min<int64_t>(need_int(p[0], "width"), 1 << 20), len = static_cast<int64_t>(cp_len(s));
      if (w <= len) return Value::str(s);
      int64_t pad = w - len, left = pad / 2 + (pad & w & 1);
      return Value::str(std::string(static_cast<size_t>(left), ' ') + s +
                        std::string(static_cast<size_t>(pad - left), ' '));
    }
    if (n == "format") {  // jinja2's do_format: str(value) % (kwargs or args)
      if (!a.pos.empty() && !a.kw.empty()) fail("can't handle positional and keyword arguments at the same time");
      const std::string s = v.t == T::Undef ? "" : py_str(v);
      if (a.kw.empty()) return Value::str(py_percent(s, Value::list(a.pos, T::Tuple)));
      auto d = std::make_shared<Dict>();
      for (auto& [k, x] : a.kw) d->set(k, x);
      return Value::str(py_percent(s, Value::dict(std::move(d))));
    }
    if (n == "wordcount") {
      int64_t words = 0;
      bool in = false;
      for (char32_t c : to_cps(text())) {
        bool w = c == '_' || u_isalnum(static_cast<UChar32>(c));
        if (w && !in) ++words;
        in = w;
      }
      return Value::integer(words);
    }
    fail("unknown filter '" + n + "'");
  }

  // ---- tests ----
  bool test(const std::string& n, const Value& v, Args& a) {
    auto arg = [&]() -> Value {
      List p = bind(n.c_str(), a, {{"other", Value::undef("the test needs an argument")}});
      return p[0];
    };
    if (n == "defined") return v.t != T::Undef;
    if (n == "undefined") return v.t == T::Undef;
    if (n == "none") return v.t == T::None;
    if (n == "boolean") return v.t == T::Bool;
    if (n == "true") return v.t == T::Bool && v.b;
    if (n == "false") return v.t == T::Bool && !v.b;
    if (n == "integer") return v.t == T::Int;
    if (n == "float") return v.t == T::Float;
    if (n == "number") return v.is_num();
    if (n == "string") return v.t == T::Str;
    if (n == "mapping") return v.t == T::Dict;
    if (n == "iterable") return v.t == T::Str || v.is_seq() || v.t == T::Dict || v.t == T::Undef;
    if (n == "sequence") return v.t == T::Str || v.is_seq() || v.t == T::Dict || v.t == T::Undef;
    if (n == "callable") return v.t == T::Fn;
    if (n == "escaped") return false;
    // jinja2's: value % 2 == 1, value % 2 == 0, value % num == 0 (floats too).
    if (n == "odd") return py_eq(binop("%", v, Value::integer(2)), Value::integer(1));
    if (n == "even") return py_eq(binop("%", v, Value::integer(2)), Value::integer(0));
    if (n == "divisibleby") return py_eq(binop("%", v, arg()), Value::integer(0));
    if (n == "lower" || n == "upper") {
      std::string s = py_str(v);
      return s == map_case(s, n == "lower" ? 0 : 1) && s != map_case(s, n == "lower" ? 1 : 0);
    }
    if (n == "in") return contains(arg(), v);
    if (n == "sameas") {
      Value o = arg();
      if (v.t != o.t) return false;
      if (v.t == T::None || v.t == T::Undef) return true;
      if (v.t == T::Bool) return v.b == o.b;
      return (v.l && v.l == o.l) || (v.d && v.d == o.d) || (v.fn && v.fn == o.fn);
    }
    static const std::pair<const char*, const char*> cmp[] = {
        {"eq", "=="}, {"equalto", "=="},    {"==", "=="}, {"ne", "!="}, {"!=", "!="},
        {"lt", "<"},  {"lessthan", "<"},    {"<", "<"},   {"le", "<="}, {"<=", "<="},
        {"gt", ">"},  {"greaterthan", ">"}, {">", ">"},   {"ge", ">="}, {">=", ">="}};
    for (auto [name, op] : cmp)
      if (n == name) return compare(op, v, arg());
    fail("unknown test '" + n + "'");
  }

  // ---- methods of str, dict, list ----
  Value call_method(const Value& obj, const std::string& n, Args& a) {
    auto args = [&](std::initializer_list<std::pair<const char*, Value>> p) { return bind(n.c_str(), a, p); };
    if (obj.t == T::Dict) {
      if (n == "get") {
        List p = args({{"key", Value::none()}, {"default", Value::none()}});
        if (p[0].t == T::Str)
          if (const Value* x = obj.d->find(p[0].s)) return *x;
        return p[1];
      }
      args({});
      List out;
      for (auto& [k, x] : obj.d->kv) {
        if (n == "keys") out.push_back(Value::str(k));
        else if (n == "values") out.push_back(x);
        else out.push_back(Value::list({Value::str(k), x}, T::Tuple));
      }
      return Value::list(std::move(out));
    }
    if (obj.is_seq()) {
      List p = args({{"value", Value::none()}});
      int64_t count = 0;
      for (size_t k = 0; k < obj.l->size(); ++k)
        if (py_eq((*obj.l)[k], p[0])) {
          if (n == "index") return Value::integer(static_cast<int64_t>(k));
          ++count;
        }
      if (n == "index") fail(py_repr(p[0]) + " is not in list");
      return Value::integer(count);
    }
    const std::string& s = obj.s;
    if (n == "startswith" || n == "endswith") {
      List p = args({{"prefix", Value::none()}});
      List opts = p[0].t == T::Tuple ? *p[0].l : List{p[0]};
      for (auto& o : opts) {
        const std::string& x = need_str(o, n.c_str());
        bool hit = x.size() <= s.size() && (n == "startswith" ? s.compare(0, x.size(), x) == 0
                                                              : s.compare(s.size() - x.size(), x.size(), x) == 0);
        if (hit) return Value::boolean(true);
      }
      return Value::boolean(false);
    }
    if (n == "split" || n == "rsplit") {
      List p = args({{"sep", Value::none()}, {"maxsplit", Value::integer(-1)}});
      List out;
      for (auto& part : py_split(s, p[0], need_int(p[1], "maxsplit"), n == "rsplit")) out.push_back(Value::str(part));
      return Value::list(std::move(out));
    }
    if (n == "strip" || n == "lstrip" || n == "rstrip") {
      List p = args({{"chars", Value::none()}});
      return Value::str(py_strip(s, p[0], n != "rstrip", n != "lstrip"));
    }
    if (n == "upper" || n == "lower" || n == "title" || n == "capitalize") {
      args({});
      return Value::str(map_case(s, n == "lower" ? 0 : n == "upper" ? 1 : n == "capitalize" ? 2 : 3));
    }
    if (n == "replace") {
      List p = args({{"old", Value::none()}, {"new", Value::none()}, {"count", Value::integer(-1)}});
      return Value::str(py_replace(s, need_str(p[0], "old"), need_str(p[1], "new"), need_int(p[2], "count")));
    }
    if (n == "find" || n == "rfind" || n == "index" || n == "count") {
      List p = args({{"sub", Value::none()}});
      const std::string& sub = need_str(p[0], n.c_str());
      if (n == "count") {
        if (sub.empty()) return Value::integer(static_cast<int64_t>(cp_len(s)) + 1);
        int64_t c = 0;
        for (size_t q = s.find(sub); q != std::string::npos; q = s.find(sub, q + sub.size())) ++c;
        return Value::integer(c);
      }
      size_t q = n == "rfind" ? s.rfind(sub) : s.find(sub);
      if (q == std::string::npos) {
        if (n == "index") fail("substring not found");
        return Value::integer(-1);
      }
      return Value::integer(static_cast<int64_t>(cp_len(std::string_view(s).substr(0, q))));
    }
    if (n == "join") {
      List p = args({{"iterable", Value::none()}});
      std::string out;
      List items = iterate(p[0]);
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += s;
        out += need_str(items[k], "join item");
        if (out.size() > lim.max_output) fail("join output larger than the output limit");
      }
      return Value::str(std::move(out));
    }
    if (n == "splitlines") {
      args({});
      List out;
      for (auto& l : splitlines(s)) out.push_back(Value::str(l));
      return Value::list(std::move(out));
    }
    if (n == "format") return Value::str(py_format(s, a));
    args({});
    std::u32string c = to_cps(s);
    if (c.empty()) return Value::boolean(false);
    auto all = [&](auto pred) { return Value::boolean(std::all_of(c.begin(), c.end(), pred)); };
    if (n == "isdigit") return all([](char32_t x) { return u_isdigit(static_cast<UChar32>(x)) != 0; });
    if (n == "isalpha") return all([](char32_t x) { return u_isalpha(static_cast<UChar32>(x)) != 0; });
    if (n == "isalnum") return all([](char32_t x) { return u_isalnum(static_cast<UChar32>(x)) != 0; });
    if (n == "isspace") return all(py_space);
    bool lower = n == "islower";
    return Value::boolean(s == map_case(s, lower ? 0 : 1) && s != map_case(s, lower ? 1 : 0));
  }
};

// Globals every chat template sees (jinja2's and transformers').
void add_globals(std::unordered_map<std::string, Value>& g, const JinjaLimits& lim) {
  auto def = [&](const char* name, std::function<Value(Interp&, Args&)> f) {
    g[name] = Interp::bound(name, std::move(f));
  };
  def("range", [](Interp&, Args& a) {
    if (!a.kw.empty() || a.pos.empty() || a.pos.size() > 3) fail("range() takes 1 to 3 integer arguments");
    int64_t start = 0, stop, stepv = 1;
    if (a.pos.size() == 1) stop = need_int(a.pos[0], "range() argument");
    else start = need_int(a.pos[0], "range() argument"), stop = need_int(a.pos[1], "range() argument");
    if (a.pos.size() == 3) stepv = need_int(a.pos[2], "range() step");
    if (stepv == 0) fail("range() step must not be zero");
    double n = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(stepv));
    if (n > 100000) fail("range too big; the sandbox allows 100000 items");  // jinja2's MAX_RANGE
    List out;
    for (int64_t k = start; stepv > 0 ? k < stop : k > stop; k += stepv) out.push_back(Value::integer(k));
    return Value::list(std::move(out));
  });
  auto kwdict = [](Args& a, const char* what) {
    auto d = std::make_shared<Dict>();
    if (a.pos.size() > 1) fail(std::string(what) + "() takes at most one positional argument");
    if (!a.pos.empty()) {
      if (a.pos[0].t != T::Dict) fail(std::string(what) + "() positional argument must be a mapping");
      d->kv = a.pos[0].d->kv;
    }
    for (auto& [k, v] : a.kw) d->set(k, v);
    return d;
  };
  def("namespace", [kwdict](Interp&, Args& a) {
    auto d = kwdict(a, "namespace");
    for (auto& [k, v] : d->kv)
      if (!k.empty() && k[0] == '_') fail("namespace attributes cannot start with '_': " + k);
    return Value::dict(std::move(d), T::Ns);
  });
  def("dict", [kwdict](Interp&, Args& a) { return Value::dict(kwdict(a, "dict")); });
  def("raise_exception", [](Interp&, Args& a) -> Value {
    std::string msg = a.pos.empty() ? "" : py_str(a.pos[0]);
    throw TplError{"the template raised an exception: " + msg};
  });
  const int64_t now = lim.now_unix;
  def("strftime_now", [now](Interp&, Args& a) {
    if (a.pos.size() != 1) fail("strftime_now() takes one format string");
    const std::string& fmt = need_str(a.pos[0], "strftime_now format");
    std::time_t t = now >= 0 ? static_cast<std::time_t>(now) : std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    char buf[512];
    size_t n = fmt.empty() ? 0 : std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
    return Value::str(std::string(buf, n));
  });
}

}  // namespace

JinjaTemplate::JinjaTemplate(std::string_view source, std::string label) : label_(std::move(label)) {
  try {
    auto prog = std::make_shared<Program>();
    prog->body = Parser(Lexer(source).run()).parse_all();
    prog_ = std::move(prog);
  } catch (const SyntaxError& e) {
    throw UserError(label_ + ": line " + std::to_string(e.line) + ": template syntax error: " + e.msg,
                    "chat templates follow jinja2 as transformers renders them; see docs/chat-templates.md for the "
                    "supported subset");
  }
}

std::string JinjaTemplate::render(const nlohmann::ordered_json& vars, const JinjaLimits& limits) const {
  if (!vars.is_object()) throw UserError(label_ + ": template variables must be a JSON object");
  Interp in(limits);
  in.frames.emplace_back();
  add_globals(in.frames[0], limits);
  for (auto& [k, v] : vars.items()) in.frames[0][k] = from_json(v);
  try {
    in.exec(prog_->body);
  } catch (const TplError& e) {
    throw UserError(label_ + ": line " + std::to_string(in.line) + ": " + e.msg);
  }
  return std::move(in.out);
}

}  // namespace brl::tok
