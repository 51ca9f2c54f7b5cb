// UTF-8, byte map, ICU normalization and PCRE2 splitting for the tokenizer (see text.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/text.h"

#include <pcre2.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <stdexcept>

#include "util/error.h"

namespace brl::tok {

std::string cp_to_utf8(uint32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

namespace {
// Length of the valid UTF-8 sequence at s[i], or 0 if invalid (overlongs, surrogates and
// code points above U+10FFFF included).
size_t valid_seq(std::string_view s, size_t i) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n = utf8_len(c);
  if (n == 1 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  uint32_t cp = n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (b(i + k) & 0x3F);
  if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000)) return 0;
  if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
  return n;
}
}  // namespace

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t n = valid_seq(s, i);
    if (!n) return false;
    i += n;
  }
  return true;
}

std::string utf8_lossy(std::string_view s) {
  if (is_valid_utf8(s)) return std::string(s);
  std::string out;
  for (size_t i = 0; i < s.size();) {
    size_t n = valid_seq(s, i);
    if (n) {
      out.append(s.substr(i, n));
      i += n;
      continue;
    }
    // A maximal invalid subpart: a lead byte followed by the continuation bytes that are still
    // a valid prefix counts once (Unicode's "substitution of maximal subparts").
    size_t want = utf8_len(static_cast<unsigned char>(s[i])), k = 1;
    if (want > 1)
      while (k < want && i + k < s.size() && (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80) {
        // Reject second bytes that can never continue this lead (overlong/surrogate ranges).
        unsigned char c0 = static_cast<unsigned char>(s[i]), c1 = static_cast<unsigned char>(s[i + 1]);
        if (k == 1 && ((c0 == 0xE0 && c1 < 0xA0) || (c0 == 0xED && c1 > 0x9F) || (c0 == 0xF0 && c1 < 0x90) ||
                       (c0 == 0xF4 && c1 > 0x8F) || c0 == 0xC0 || c0 == 0xC1 || c0 > 0xF4))
          break;
        ++k;
      }
    out += "\xEF\xBF\xBD";
    i += k;
  }
  return out;
}

ByteMap::ByteMap() {
  dec.fill(-1);
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    int cp = printable ? b : 256 + n++;
    enc[static_cast<size_t>(b)] = cp_to_utf8(static_cast<uint32_t>(cp));
    dec[static_cast<size_t>(cp)] = b;
  }
}
const ByteMap& ByteMap::get() {
  static const ByteMap m;
  return m;
}

std::string unicode_normalize(std::string_view s, NormForm form) {
  bool ascii = true;
  for (unsigned char c : s) ascii &= c < 0x80;
  if (ascii || !is_valid_utf8(s)) return std::string(s);
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* n = form == NormForm::kNFC    ? unorm2_getNFCInstance(&err)
                          : form == NormForm::kNFD  ? unorm2_getNFDInstance(&err)
                          : form == NormForm::kNFKC ? unorm2_getNFKCInstance(&err)
                                                    : unorm2_getNFKDInstance(&err);
  if (U_FAILURE(err)) throw std::runtime_error("ICU normalizer unavailable: " + std::string(u_errorName(err)));
  std::u16string u16(s.size() + 1, u'\0');
  int32_t len = 0;
  u_strFromUTF8(reinterpret_cast<UChar*>(u16.data()), static_cast<int32_t>(u16.size()), &len, s.data(),
                static_cast<int32_t>(s.size()), &err);
  if (U_FAILURE(err)) return std::string(s);
  u16.resize(static_cast<size_t>(len));
  if (unorm2_isNormalized(n, reinterpret_cast<const UChar*>(u16.data()), len, &err) && U_SUCCESS(err))
    return std::string(s);
  err = U_ZERO_ERROR;
  std::u16string norm(u16.size() * 4 + 16, u'\0');  // NFKD can expand up to 18x; retried below
  int32_t nlen = unorm2_normalize(n, reinterpret_cast<const UChar*>(u16.data()), len,
                                  reinterpret_cast<UChar*>(norm.data()), static_cast<int32_t>(norm.size()), &err);
  if (err == U_BUFFER_OVERFLOW_ERROR) {
    err = U_ZERO_ERROR;
    norm.assign(static_cast<size_t>(nlen) + 1, u'\0');
    nlen = unorm2_normalize(n, reinterpret_cast<const UChar*>(u16.data()), len, reinterpret_cast<UChar*>(norm.data()),
                            static_cast<int32_t>(norm.size()), &err);
  }
  if (U_FAILURE(err)) throw std::runtime_error("ICU normalization failed: " + std::string(u_errorName(err)));
  std::string out(static_cast<size_t>(nlen) * 3 + 1, '\0');
  int32_t olen = 0;
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &olen, reinterpret_cast<const UChar*>(norm.data()), nlen,
              &err);
  if (U_FAILURE(err)) throw std::runtime_error("ICU UTF-8 conversion failed: " + std::string(u_errorName(err)));
  out.resize(static_cast<size_t>(olen));
  return out;
}

std::string adapt_pattern(const std::string& p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char e = p[++i];
      if (e == 's') out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      else if (e == 'S' && !in_class) out += "[^\\s\\x{85}]";
      else out += c, out += e;  // \S inside a class is left alone (HF's patterns never do it)
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a literal ] first in a class
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

Regex::Regex(const std::string& pattern, const std::string& where) {
  int err = 0;
  PCRE2_SIZE off = 0;
  std::string pat = adapt_pattern(pattern);
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, nullptr);
  if (!code_) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw UserError(where + ": regex /" + pattern + "/ does not compile (PCRE2 at offset " + std::to_string(off) +
                    ": " + reinterpret_cast<char*>(msg) + ")");
  }
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
}

Regex::~Regex() { pcre2_code_free(code_); }

void Regex::find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
  // One match block per thread: creating one per call costs more than a short match.
  struct Md {
    pcre2_match_data* md = pcre2_match_data_create(32, nullptr);
    ~Md() { pcre2_match_data_free(md); }
  };
  thread_local Md md;
  auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t pos = 0;
  while (pos < s.size()) {
    int rc = pcre2_match(code_, subject, s.size(), pos, 0, md.md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0 && rc != 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw std::runtime_error(std::string("regex match failed: ") + reinterpret_cast<char*>(msg));
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.md);
    size_t b = ov[0], e = ov[1];
    if (e == b) {  // empty match: HF drops it; step over one character
      pos = b + (b < s.size() ? utf8_len(static_cast<unsigned char>(s[b])) : 1);
      continue;
    }
    out.emplace_back(b, e);
    pos = e;
  }
}

}  // namespace brl::tok
