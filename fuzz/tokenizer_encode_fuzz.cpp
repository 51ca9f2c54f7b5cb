// Fuzzes encode and decode of arbitrary text (tokenizer/tokenizer.h) on fixed tokenizers:
// the test data's byte-level BPE, sentencepiece-style BPE and rules files, and the demo
// model's byte-level tokenizer (every byte a token, corpus/tokenizer_json/byte_level.json).
// The first input byte picks the tokenizer and add_special_tokens; the rest is the text.
// Ids must be in the vocabulary; on the byte-level tokenizer decode(encode(text)) must give
// the text back exactly when it is valid UTF-8 (byte-level BPE is lossless).
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/text.h"
#include "tokenizer/tokenizer.h"

using brl::tok::Tokenizer;

namespace {
const char* kFiles[] = {
    BRL_SOURCE_DIR "/fuzz/corpus/tokenizer_json/byte_level.json",  // lossless: checked
    BRL_SOURCE_DIR "/tests/tokenizer/data/tiny_bpe.json",
    BRL_SOURCE_DIR "/tests/tokenizer/data/tiny_spm.json",
    BRL_SOURCE_DIR "/tests/tokenizer/data/tiny_rules.json",
};
constexpr size_t kNum = sizeof kFiles / sizeof kFiles[0];
std::vector<Tokenizer>* tokenizers;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tokenizers = new std::vector<Tokenizer>;
  for (const char* f : kFiles) tokenizers->push_back(Tokenizer::from_file(f));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t which = data[0] % kNum;
  const bool special = (data[0] / kNum) & 1;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const Tokenizer& t = (*tokenizers)[which];
  std::vector<int32_t> ids;
  try {
    ids = t.encode(text, special);
  } catch (const std::exception&) {    // a character with neither a token nor unk
    if (which == 0) __builtin_trap();  // every byte is a token there
    return 0;
  }
  for (int32_t id : ids)
    if (id < 0 || id >= t.vocab_size()) __builtin_trap();
  const std::string back = t.decode(ids);
  (void)t.decode(ids, /*skip_special_tokens=*/true);
  if (which == 0 && !special && brl::tok::is_valid_utf8(text) && back != text) __builtin_trap();
  return 0;
}
