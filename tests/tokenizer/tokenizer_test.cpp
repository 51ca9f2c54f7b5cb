// Tokenizer on hand-made tokenizer.json files; expected ids derived by hand from the merge
// ranks (the golden tests against HF's own tokenizer are the *_oracle_test files).
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "util/error.h"

using brl::tok::Tokenizer;
using Ids = std::vector<int32_t>;

namespace {
std::string data(const std::string& f) { return std::string(BRL_SOURCE_DIR) + "/tests/tokenizer/data/" + f; }
// The UserError of loading tokenizer.json text, or "no error".
std::string load_error(const std::string& text) {
  try {
    Tokenizer::from_json(text, "t.json");
  } catch (const brl::UserError& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST(Tokenizer, ByteLevelBpeMergeOrder) {
  auto t = Tokenizer::from_file(data("tiny_bpe.json"));
  // "abc": a b c -> (a b, rank 0) ab c -> (ab c, rank 1) abc
  EXPECT_EQ(t.encode("abc"), (Ids{5}));
  // " ab": the GPT-2 regex keeps the space with the word: Ġ a b. "a b" (rank 0) beats
  // "Ġ a" (rank 2), and no "Ġ ab" merge exists, so it ends as Ġ | ab.
  EXPECT_EQ(t.encode("abc ab"), (Ids{5, 3, 4}));
  EXPECT_EQ(t.encode(" a"), (Ids{6}));  // Ġ a -> Ġa
  // "bc": only "b c" (rank 5) applies.
  EXPECT_EQ(t.encode("bc"), (Ids{11}));
  // digits are their own pre-token: "12" merges, "ab12" splits into ab | 12.
  EXPECT_EQ(t.encode("ab12"), (Ids{4, 10}));
  // Added tokens are split out before BPE; the post-processor prepends <|end|>.
  EXPECT_EQ(t.encode("ab<|end|>c"), (Ids{4, 12, 2}));
  EXPECT_EQ(t.encode("ab", true), (Ids{12, 4}));
  EXPECT_EQ(t.decode({5, 7}), "abc ab");
  EXPECT_EQ(t.decode({5, 3, 4}), "abc ab");
  EXPECT_EQ(t.decode({4, 12, 2}), "ab<|end|>c");
  EXPECT_EQ(t.decode({4, 12, 2}, true), "abc");
  EXPECT_EQ(t.vocab_size(), 13);
  EXPECT_EQ(t.token_to_id("Ġab"), 7);
  EXPECT_THROW(t.encode("x"), brl::UserError);  // not in the vocabulary, no fallback
}

TEST(Tokenizer, SentencepieceStyleByteFallback) {
  auto t = Tokenizer::from_file(data("tiny_spm.json"));
  // Prepend ▁ and replace spaces: "hi" -> ▁hi; "é" (C3 A9) is not in the vocab -> bytes.
  EXPECT_EQ(t.encode("hi"), (Ids{9}));
  EXPECT_EQ(t.encode("hi é"), (Ids{9, 5, 3, 4}));
  EXPECT_EQ(t.encode("hi", true), (Ids{1, 9}));
  EXPECT_EQ(t.decode({9, 5, 3, 4}), "hi é");
  EXPECT_EQ(t.decode({1, 9}, true), "hi");
}

TEST(Tokenizer, ErrorsNameFileAndField) {
  char tmpl[] = "/tmp/brl_tok_XXXXXX";
  std::string dir = mkdtemp(tmpl);
  auto write = [&](const std::string& s) {
    std::ofstream(dir + "/tokenizer.json") << s;
    return dir + "/tokenizer.json";
  };
  auto msg = [&](const std::string& s) {
    try {
      Tokenizer::from_file(write(s));
    } catch (const brl::UserError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(
      msg("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}").find("model.type 'WordPiece' is not supported"),
      std::string::npos);
  EXPECT_NE(
      msg("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}").find("model.merges[0]"),
      std::string::npos);
  EXPECT_NE(msg("{not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(msg("{\"model\": {\"type\": \"BPE\", \"vocab\": {}}, \"pre_tokenizer\": {\"type\": \"Digits\"}}")
                .find("pre_tokenizer.type 'Digits'"),
            std::string::npos);
  EXPECT_THROW(Tokenizer::from_dir("/nonexistent"), brl::UserError);
  std::filesystem::remove_all(dir);
}

// Fields a step needs but the file lacks are UserErrors naming the field; they were reads
// past the end of nlohmann's object map (fuzz/tokenizer_json_fuzz, regression input
// fuzz/corpus/tokenizer_json/replace_without_pattern.json).
TEST(Tokenizer, MissingStepFieldsAreUserErrors) {
  auto msg = [](const std::string& step) {
    return load_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}}, )" + step + "}");
  };
  EXPECT_NE(msg(R"("normalizer": {"type": "Replace", "content": "x"})").find("normalizer.pattern must be"),
            std::string::npos);
  EXPECT_NE(msg(R"("pre_tokenizer": {"type": "Split", "behavior": "Removed"})").find("pre_tokenizer.pattern must be"),
            std::string::npos);
  EXPECT_NE(msg(R"("decoder": {"type": "Replace", "content": " "})").find("decoder.pattern must be"),
            std::string::npos);
  EXPECT_NE(msg(R"("post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 0]})")
                .find("post_processor.cls must be [token, id]"),
            std::string::npos);
  EXPECT_NE(msg(R"("post_processor": {"type": "BertProcessing", "cls": ["<s>", 0]})")
                .find("post_processor.sep must be [token, id]"),
            std::string::npos);
  // Strip: an empty content spun the decoder 1e18 times; a float count was a float -> int
  // cast out of range (regression inputs fuzz/corpus/tokenizer_json/strip_*.json).
  EXPECT_NE(msg(R"("decoder": {"type": "Strip", "content": "", "start": 1000000000000000000})")
                .find("decoder.content '' must be one character"),
            std::string::npos);
  EXPECT_NE(msg(R"("decoder": {"type": "Strip", "content": "ab", "start": 1})").find("must be one character"),
            std::string::npos);
  EXPECT_NE(msg(R"("decoder": {"type": "Strip", "content": " ", "start": 1e18})")
                .find("decoder.start and .stop must be non-negative integers"),
            std::string::npos);
  EXPECT_NE(msg(R"("decoder": {"type": "Strip", "content": " ", "stop": -1})").find("decoder.start and .stop"),
            std::string::npos);
  EXPECT_EQ(msg(R"("decoder": {"type": "Strip", "content": "▁", "start": 1})"), "no error");
}

// Ids size dense tables: a vocab id of 2^31 - 1 overflowed max id + 1 (UBSan), an added
// token id of 2^32 - 1 wrapped to -1 and indexed the table at SIZE_MAX, 2e9 asked for 64 GB.
// Regression inputs fuzz/corpus/tokenizer_json/{vocab_id_int32_max,added_id_wraps}.json.
TEST(Tokenizer, IdsOutsideTheTableLimitAreUserErrors) {
  EXPECT_NE(load_error(R"({"model": {"type": "BPE", "vocab": {"a": 2147483647}}})")
                .find("vocab['a'] = 2147483647 is not an id in [0, 4194303]"),
            std::string::npos);
  const std::string model = R"("model": {"type": "BPE", "vocab": {"a": 0}})";
  for (const char* id : {"4294967295", "2000000000", "4194304", "-1", "1.5"})
    EXPECT_NE(load_error(R"({"added_tokens": [{"id": )" + std::string(id) + R"(, "content": "<x>"}], )" + model + "}")
                  .find("added_tokens[0] needs a non-empty \"content\" and an \"id\" in [0, 4194303]"),
              std::string::npos)
        << id;
  auto t = Tokenizer::from_json(R"({"added_tokens": [{"id": 1000, "content": "<x>"}], )" + model + "}", "t.json");
  EXPECT_EQ(t.vocab_size(), 1001);  // sparse ids are fine below the limit
  EXPECT_EQ(t.encode("a<x>"), (Ids{0, 1000}));
}

// Post-processor ids go through the same check: 1e300 in special_tokens.ids was a float ->
// int cast out of range (UBSan in CI's fuzz run), 2^32 + 1 wrapped to 1 and was accepted.
// Regression input fuzz/corpus/tokenizer_json/post_ids_1e300.json.
TEST(Tokenizer, PostProcessorIdsOutsideTheLimitAreUserErrors) {
  auto template_with = [](const std::string& ids) {
    return load_error(
        R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}}, "post_processor": {"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}], "special_tokens": {"<s>": {"ids": )" +
        ids + "}}}}");
  };
  for (const char* ids : {"[1e300]", "[4294967297]", "[-1]", "[1.0]", "[\"1\"]"})
    EXPECT_NE(template_with(ids).find("post_processor.special_tokens['<s>'].ids has"), std::string::npos)
        << ids << ": " << template_with(ids);
  EXPECT_EQ(template_with("[1]"), "no error");
  EXPECT_NE(
      load_error(
          R"({"model": {"type": "BPE", "vocab": {"a": 0}}, "post_processor": {"type": "BertProcessing", "cls": ["<s>", 1e300], "sep": ["</s>", 0]}})")
          .find("post_processor.cls must be [token, id] with an id in [0, 4194303]"),
      std::string::npos);
}

// No token at all (fuzz/corpus/tokenizer_json/empty_vocab.json) loaded as a tokenizer of size 0.
TEST(Tokenizer, NoTokensIsAUserError) {
  EXPECT_NE(load_error(R"({"model": {"type": "BPE", "vocab": {}}})").find("t.json: no tokens"), std::string::npos);
  EXPECT_EQ(load_error(R"({"model": {"type": "BPE", "vocab": {}}, "added_tokens": [{"id": 0, "content": "<s>"}]})"),
            "no error");
}

TEST(Tokenizer, FromDirReadsSpecialTokens) {
  char tmpl[] = "/tmp/brl_tok_XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::filesystem::copy_file(data("tiny_spm.json"), dir + "/tokenizer.json");
  std::ofstream(dir + "/tokenizer_config.json")
      << R"({"bos_token": "<s>", "eos_token": {"content": "</s>"}, "pad_token": null})";
  std::ofstream(dir + "/generation_config.json") << R"({"eos_token_id": [2, 0]})";
  auto t = Tokenizer::from_dir(dir);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_ids(), (Ids{2, 0}));
  EXPECT_FALSE(t.pad_id().has_value());
  std::filesystem::remove_all(dir);
}
