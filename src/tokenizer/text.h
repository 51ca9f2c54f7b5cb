// Text helpers for the tokenizer: UTF-8 stepping, GPT-2's byte <-> unicode map, Unicode
// normalization (ICU) and a PCRE2 regex wrapper that splits text the way HF's
// tokenizers does (Oniguruma there; PCRE2 with UTF + UCP here, see adapt_pattern).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

struct pcre2_real_code_8;

namespace brl::tok {

// Length of the UTF-8 sequence led by byte b; 1 for a stray continuation or invalid byte.
inline size_t utf8_len(unsigned char b) {
  return b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
}
std::string cp_to_utf8(uint32_t cp);
bool is_valid_utf8(std::string_view s);
// Invalid sequences become U+FFFD (one per maximal invalid subpart), like Rust's from_utf8_lossy.
std::string utf8_lossy(std::string_view s);

// GPT-2's reversible map from the 256 byte values to printable code points.
struct ByteMap {
  std::array<std::string, 256> enc;  // byte -> UTF-8 of its stand-in code point
  std::array<int, 0x200> dec;        // stand-in code point -> byte, -1 if none
  ByteMap();
  static const ByteMap& get();
};

enum class NormForm { kNFC, kNFD, kNFKC, kNFKD };
// Unicode normalization; ASCII and invalid UTF-8 come back unchanged.
std::string unicode_normalize(std::string_view s, NormForm form);

// Rewrites an Oniguruma pattern (as HF writes them) for PCRE2: Oniguruma's \s also matches
// U+0085 (NEL), PCRE2 10.42's \s under UCP does not.
std::string adapt_pattern(const std::string& pattern);

class Regex {
 public:
  // where: names the file and field for the error if the pattern does not compile.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Appends the [begin, end) byte ranges of the successive non-empty matches in s.
  void find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  pcre2_real_code_8* code_ = nullptr;
};

}  // namespace brl::tok
