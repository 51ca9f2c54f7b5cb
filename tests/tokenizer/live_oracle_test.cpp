// Live comparison with HF's own tokenizer (Rust `tokenizers`, PyPI binding, tools/tokenizer/
// encode.py) on a few thousand strings: seeded tricky strings (scripts, emoji, combining
// marks, odd whitespace, contractions, special tokens glued in), the project's own source
// and docs as real text, with and without add_special_tokens. Ids must match id for id and
// decode must match HF's decode (with and without skip_special_tokens); decode(encode(s))
// must give s back wherever HF's does. Variants of the tokenizer.json files cover the
// Metaspace pre-tokenizer/decoder and the lstrip/rstrip/single_word added-token flags.
#include <gtest/gtest.h>

#include "oracle_util.h"
#include "tokenizer/text.h"
#include "tokenizer/tokenizer.h"

using brl::tok::Tokenizer;
using namespace tok_oracle;

namespace {

std::vector<std::string> inputs(uint32_t seed, const std::vector<std::string>& specials, size_t n_tricky,
                                size_t n_lines) {
  auto v = tricky_strings(seed, n_tricky, specials);
  for (auto& l : corpus_lines(n_lines))
    if (brl::tok::is_valid_utf8(l)) v.push_back(l);
  for (auto& g : read_golden(golden("qwen2"))) v.push_back(g.text);
  return v;
}

void compare_live(const std::string& tokenizer_json, const std::vector<std::string>& texts) {
  auto t = Tokenizer::from_file(tokenizer_json);
  for (bool special : {false, true}) {
    auto hf = run_hf(tokenizer_json, texts, special);
    ASSERT_EQ(hf.size(), texts.size()) << "HF oracle answered " << hf.size() << " of " << texts.size() << " lines";
    size_t bad_ids = 0, bad_dec = 0, hf_round = 0, our_round = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      auto ids = t.encode(texts[i], special);
      if (ids != hf[i].ids && ++bad_ids <= 10)
        ADD_FAILURE() << "ids differ (add_special=" << special << ") for [" << texts[i]
                      << "]\n  ours: " << ::testing::PrintToString(ids)
                      << "\n  HF:   " << ::testing::PrintToString(hf[i].ids);
      std::string d = t.decode(hf[i].ids), ds = t.decode(hf[i].ids, true);
      if ((d != hf[i].decoded || ds != hf[i].decoded_skip) && ++bad_dec <= 10)
        ADD_FAILURE() << "decode differs for ids of [" << texts[i] << "]\n  ours: [" << d << "] / [" << ds
                      << "]\n  HF:   [" << hf[i].decoded << "] / [" << hf[i].decoded_skip << "]";
      if (!special && hf[i].decoded == texts[i]) {
        ++hf_round;
        our_round += t.decode(ids) == texts[i];
      }
    }
    EXPECT_EQ(bad_ids, 0u) << "of " << texts.size() << " strings";
    EXPECT_EQ(bad_dec, 0u) << "of " << texts.size() << " strings";
    EXPECT_EQ(our_round, hf_round) << "round trips";
    if (!special) {
      EXPECT_GT(hf_round, texts.size() / 2) << "HF itself round-trips too few strings: the inputs are off";
    }
  }
}

std::string write_variant(const std::string& name, const nlohmann::json& j) {
  std::string dir = src("build-tokenizer-variants");
  const char* bd = BRL_BINARY_DIR;
  if (bd && *bd) dir = std::string(bd) + "/tokenizer_variants";
  std::filesystem::create_directories(dir);
  std::string p = dir + "/" + name + ".json";
  std::ofstream(p) << j.dump();
  return p;
}

nlohmann::json load(const std::string& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

}  // namespace

TEST(TokenizerLive, Qwen3) {
  ASSERT_TRUE(have(qwen3_json()));
  compare_live(
      qwen3_json(),
      inputs(1, {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>"}, 3000, 3000));
}

TEST(TokenizerLive, Llama3) {
  ASSERT_TRUE(have(llama3_json()));
  compare_live(llama3_json(),
               inputs(2, {"<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|reserved_special_token_7|>"},
                      3000, 3000));
}

TEST(TokenizerLive, Gpt2) {
  ASSERT_TRUE(have(gpt2_json()));
  compare_live(gpt2_json(), inputs(3, {"<|endoftext|>"}, 3000, 3000));
}

TEST(TokenizerLive, MistralSentencepieceStyle) {
  ASSERT_TRUE(have(mistral_json()));
  compare_live(mistral_json(), inputs(4, {"<s>", "</s>", "<unk>"}, 3000, 3000));
}

// Mistral's vocabulary with the newer sentencepiece layout (TinyLlama/Llama-2 files written
// by recent transformers): no normalizer, Metaspace pre-tokenizer (prepend_scheme "first",
// split) and the Metaspace decoder; and one with prepend_scheme "always" and no split.
TEST(TokenizerLive, MetaspaceVariants) {
  ASSERT_TRUE(have(mistral_json()));
  auto j = load(mistral_json());
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", true}};
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", true}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}}}}};
  compare_live(write_variant("metaspace_first", j), inputs(5, {"<s>", "</s>"}, 1500, 500));
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}, {"split", false}};
  compare_live(write_variant("metaspace_always", j), inputs(6, {"<s>", "</s>"}, 1500, 0));
}

// (HF gives an added token whose content is already in the vocabulary that vocabulary id,
// whatever the file says; the contents here are all new so the file's ids hold.)
// Added-token flags on GPT-2: lstrip/rstrip swallow neighbouring whitespace, single_word
// only matches outside words, normalized tokens (with an NFC normalizer so there is a
// normalization pass) are matched after normalizing.
TEST(TokenizerLive, AddedTokenFlags) {
  ASSERT_TRUE(have(gpt2_json()));
  auto j = load(gpt2_json());
  auto add = [&](int id, const std::string& c, bool special, bool lstrip, bool rstrip, bool single, bool norm) {
    j["added_tokens"].push_back({{"id", id},
                                 {"content", c},
                                 {"single_word", single},
                                 {"lstrip", lstrip},
                                 {"rstrip", rstrip},
                                 {"normalized", norm},
                                 {"special", special}});
  };
  add(50257, "<mask>", true, true, false, false, false);
  add(50258, "[R]", true, false, true, false, false);
  add(50259, "zork", false, false, false, true, true);
  add(50260, "<Å>", false, false, false, false, true);  // normalized: matches "<A\u030a>" too after NFC
  add(50261, "<both>", false, true, true, false, false);
  j["normalizer"] = {{"type", "NFC"}};
  auto texts = inputs(
      7, {"<mask>", "[R]", "zork", " zork ", "<Å>", "<A\u030a>", "<both>", "  <mask>  ", "mezork", "zorks", "_zork"},
      3000, 0);
  compare_live(write_variant("gpt2_flags", j), texts);
}
