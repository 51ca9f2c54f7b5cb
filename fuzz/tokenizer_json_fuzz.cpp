// Fuzzes tokenizer.json loading (tokenizer/tokenizer.h): the input is the file's text. A
// file the loader refuses must give an exception, never a crash, hang or leak; one it
// accepts then encodes a few fixed texts and decodes every id and the results.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string_view>

#include "tokenizer/tokenizer.h"

using brl::tok::Tokenizer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Tokenizer t;
  try {
    t = Tokenizer::from_json(text, "fuzz");
  } catch (const std::exception&) {  // UserError, and JSON type errors of odd fields
    return 0;
  }
  const int32_t n = t.vocab_size();
  if (n <= 0) __builtin_trap();
  std::vector<int32_t> all;
  for (int32_t id = 0; id < n && id < 4096; ++id) all.push_back(id);
  for (bool skip : {false, true}) (void)t.decode(all, skip);
  for (std::string_view s :
       {"", "hello world", "  a  b\n\n c", "caf\xC3\xA9 \xE2\x96\x81x", "\xFF\xC3", "<s>x</s><|end|>"}) {
    for (bool special : {false, true}) {
      std::vector<int32_t> ids;
      try {
        ids = t.encode(s, special);
      } catch (const std::exception&) {  // e.g. a character with neither a token nor unk
        continue;
      }
      for (int32_t id : ids)
        if (id < 0 || id >= n) __builtin_trap();
      (void)t.decode(ids);
    }
  }
  return 0;
}
