// The tokenizer.json stages around the BPE model, parsed once: normalizer, pre-tokenizer,
// decoder and post-processor, each applied the way HF's tokenizers applies it. Anything
// outside the supported set is a UserError naming the file and the field.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/text.h"

namespace brl::tok {

struct NormStep {
  enum Kind { kNorm, kPrepend, kReplace, kStrip, kLowercaseAscii } kind;
  NormForm form = NormForm::kNFC;
  std::string a{}, b{};               // Prepend: a; Replace: a (literal) -> b
  std::shared_ptr<const Regex> re{};  // Replace with a regex pattern
  bool left = false, right = false;   // Strip
};

// A piece of text between added tokens as it moves through the pre-tokenizer.
struct Piece {
  std::string text;
  bool at_start;  // begins at offset 0 of the input (Metaspace prepend_scheme "first")
};

struct PreStep {
  enum Kind { kSplit, kByteLevel, kMetaspace } kind;
  enum Behavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous } behavior = kIsolated;
  std::shared_ptr<const Regex> re{};
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel
  std::string replacement{};      // Metaspace
  enum Prepend { kAlways, kFirst, kNever } prepend = kAlways;
  bool split = true;  // Metaspace
};

struct DecStep {
  enum Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
  std::string a{}, b{};
  size_t start = 0, stop = 0;  // Strip: characters to strip from each token
  PreStep::Prepend prepend = PreStep::kAlways;
};

struct Pipeline {
  std::string file;
  std::vector<NormStep> norm;
  std::vector<PreStep> pre;
  bool byte_level = false;  // the last pre-tokenizer step is ByteLevel (mapping done by BPE)
  std::vector<DecStep> dec;
  std::vector<int32_t> prefix_ids, suffix_ids;  // post-processor additions (add_special_tokens)

  void parse(const nlohmann::json& tokenizer_json);
  std::string normalize(std::string s) const;
  // Splits one normalized piece into pre-tokens (appended to out).
  void pre_tokenize(Piece p, std::vector<std::string>& out) const;
  // Tokens -> text, per HF's decoder chain (tokens are the vocabulary strings).
  std::string decode(std::vector<std::string> tokens) const;
};

}  // namespace brl::tok
