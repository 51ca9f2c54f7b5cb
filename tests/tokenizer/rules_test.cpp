// BPE and pipeline rules on a hand-made tokenizer.json (data/tiny_rules.json), expected ids
// derived by hand from HF's algorithm: the lowest-ranked pair merges first, ties go to the
// leftmost pair, merged symbols form new pairs; added-token lstrip/rstrip/single_word;
// unk fusing; Roberta post-processor; and the rarer stages (Metaspace, byte fallback
// decoding, ignore_merges) on inline variants.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

using brl::tok::Tokenizer;
using Ids = std::vector<int32_t>;
using json = nlohmann::json;

namespace {
std::string data(const std::string& f) { return std::string(BRL_SOURCE_DIR) + "/tests/tokenizer/data/" + f; }
json load(const std::string& f) {
  std::ifstream in(data(f));
  return json::parse(in);
}
struct TmpDir {
  std::string path;
  TmpDir() {
    char t[] = "/tmp/brl_tok_rules_XXXXXX";
    path = mkdtemp(t);
  }
  ~TmpDir() { std::filesystem::remove_all(path); }
  std::string write(const std::string& name, const std::string& s) const {
    std::ofstream(path + "/" + name) << s;
    return path + "/" + name;
  }
};
Tokenizer from_json(const TmpDir& d, const json& j) {
  return Tokenizer::from_file(d.write("tokenizer.json", j.dump()));
}
std::string error_of(const TmpDir& d, const json& j) {
  try {
    from_json(d, j);
  } catch (const brl::UserError& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST(TokenizerRules, MergeOrder) {
  auto t = Tokenizer::from_file(data("tiny_rules.json"));
  // aaa: "a a" (rank 0) at positions 0 and 1 tie -> leftmost: aa | a; no "aa a" merge.
  EXPECT_EQ(t.encode("aaa"), (Ids{3, 0}));
  // aaaa: aa a a -> the remaining "a a" (rank 0) -> aa aa -> "aa aa" (rank 3) -> aaaa.
  EXPECT_EQ(t.encode("aaaa"), (Ids{6}));
  // abc: "b c" (rank 1) beats "a b" (rank 2): a | bc; "a bc" is no merge, so "abc" (in the
  // vocabulary) is never reached.
  EXPECT_EQ(t.encode("abc"), (Ids{0, 4}));
  // aab: "a a" (0) first -> aa b; "aa b" is no merge.
  EXPECT_EQ(t.encode("aab"), (Ids{3, 1}));
  // The space-Removed split makes words; unknown characters become "?" and consecutive
  // ones fuse (fuse_unk).
  EXPECT_EQ(t.encode("x zzq x"), (Ids{8, 7, 8}));
  EXPECT_EQ(t.encode("xzx"), (Ids{8, 7, 8}));
  // RobertaProcessing: <s> ... </s>.
  EXPECT_EQ(t.encode("aa", true), (Ids{18, 3, 19}));
  EXPECT_EQ(t.decode({18, 3, 19}), "<s>aa</s>");
  EXPECT_EQ(t.decode({18, 3, 19}, true), "aa");  // <s>, </s> are special added tokens
  EXPECT_EQ(t.encode("aa</s>"), (Ids{3, 19}));
  EXPECT_EQ(t.vocab_size(), 23);
}

TEST(TokenizerRules, AddedTokenFlags) {
  auto t = Tokenizer::from_file(data("tiny_rules.json"));
  // <L> lstrip: swallows the spaces before it, not after.
  EXPECT_EQ(t.encode("a  <L> b"), (Ids{0, 20, 1}));
  // <R> rstrip: swallows the spaces after it ("a " stays: the split drops the space anyway).
  EXPECT_EQ(t.encode("a<R>   b"), (Ids{0, 21, 1}));
  // single_word "ab": only where not inside a word; inside "cab" it is plain BPE ("a b").
  EXPECT_EQ(t.encode("c ab"), (Ids{2, 22}));
  EXPECT_EQ(t.encode("cab"), (Ids{2, 5}));
  EXPECT_EQ(t.encode("abc"), (Ids{0, 4}));
}

TEST(TokenizerRules, IgnoreMerges) {
  TmpDir d;
  auto j = load("tiny_rules.json");
  j["model"]["ignore_merges"] = true;
  auto t = from_json(d, j);
  EXPECT_EQ(t.encode("abc"), (Ids{9}));     // the whole word is a token: merges are skipped
  EXPECT_EQ(t.encode("aaa"), (Ids{3, 0}));  // not a token: merges as before
}

TEST(TokenizerRules, MetaspaceFirstAndByteFallbackDecoding) {
  TmpDir d;
  json j = {
      {"added_tokens", json::array({{{"id", 1}, {"content", "<s>"}, {"special", true}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", true}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}}}}}},
      {"model",
       {{"type", "BPE"},
        {"byte_fallback", true},
        {"unk_token", nullptr},
        {"vocab",
         {{"<unk>", 0},
          {"<s>", 1},
          {"▁", 2},
          {"h", 3},
          {"i", 4},
          {"▁h", 5},
          {"▁hi", 6},
          {"<0xC3>", 7},
          {"<0xA9>", 8},
          {"hi", 9}}},
        {"merges", {"▁ h", "▁h i", "h i"}}}}};
  auto t = from_json(d, j);
  // "hi hi" -> ▁hi▁hi -> split before each ▁ -> ▁hi | ▁hi.
  EXPECT_EQ(t.encode("hi hi"), (Ids{6, 6}));
  // "first": only the piece at the start of the input gets the ▁; after <s> it does not.
  EXPECT_EQ(t.encode("<s>hi"), (Ids{1, 9}));
  EXPECT_EQ(t.encode("hi<s>hi"), (Ids{6, 1, 9}));
  // é is not in the vocab -> its UTF-8 bytes C3 A9.
  EXPECT_EQ(t.encode("é"), (Ids{2, 7, 8}));
  EXPECT_EQ(t.decode({2, 7, 8}), "é");            // first token's ▁ dropped, bytes fused into é
  EXPECT_EQ(t.decode({6, 7}), "hi\xEF\xBF\xBD");  // a lone C3 is invalid UTF-8 -> U+FFFD
  EXPECT_EQ(t.decode({6, 6}), "hi hi");
}

TEST(TokenizerRules, ErrorsNameFileAndField) {
  TmpDir d;
  auto base = load("tiny_rules.json");
  auto expect_error = [&](json j, const std::string& needle) {
    std::string m = error_of(d, j);
    EXPECT_NE(m.find("tokenizer.json"), std::string::npos) << m;
    EXPECT_NE(m.find(needle), std::string::npos) << "wanted [" << needle << "] in: " << m;
  };
  json j = base;
  j["model"]["merges"].push_back("c x");  // "cx" is not in the vocabulary
  expect_error(j, "model.merges[4] 'c x' uses a token missing from model.vocab");
  j = base, j["model"]["merges"].push_back(json{1, 2});
  expect_error(j, "model.merges[4] must be");
  j = base, j["normalizer"] = {{"type", "Lowercase"}};
  expect_error(j, "normalizer.type 'Lowercase' is not supported");
  j = base, j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Digits"}}}}};
  expect_error(j, "pre_tokenizer.pretokenizers[0].type 'Digits' is not supported");
  j = base, j["decoder"] = {{"type", "WordPiece"}};
  expect_error(j, "decoder.type 'WordPiece' is not supported");
  j = base, j["post_processor"] = {{"type", "Bogus"}};
  expect_error(j, "post_processor.type 'Bogus' is not supported");
  j = base, j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  expect_error(j, "pre_tokenizer.pattern: regex /(unclosed/ does not compile");
  j = base, j["model"]["type"] = "Unigram";
  expect_error(j, "model.type 'Unigram' is not supported (supported: BPE)");
  j = base, j["model"]["dropout"] = 0.1;
  expect_error(j, "model.dropout");
  j = base, j["added_tokens"].push_back({{"content", ""}, {"id", 30}});
  expect_error(j, "added_tokens[5]");
  j = base, j["model"]["unk_token"] = "<nope>";
  expect_error(j, "model.unk_token '<nope>' is not in model.vocab");
}

TEST(TokenizerRules, FromDirSpecialTokenSources) {
  TmpDir d;
  std::filesystem::copy_file(data("tiny_rules.json"), d.path + "/tokenizer.json");
  d.write("config.json", R"({"bos_token_id": 18, "eos_token_id": 19, "pad_token_id": null})");
  d.write("generation_config.json", R"({"eos_token_id": [21, 19]})");
  d.write("tokenizer_config.json", R"({"eos_token": {"content": "<L>"}, "pad_token": "x"})");
  auto t = Tokenizer::from_dir(d.path);
  EXPECT_EQ(t.bos_id(), 18);
  EXPECT_EQ(t.eos_ids(), (Ids{21, 19, 20}));  // generation_config first, then config, then tokenizer_config
  EXPECT_EQ(t.pad_id(), 8);
  d.write("generation_config.json", R"({"eos_token_id": 999})");
  try {
    Tokenizer::from_dir(d.path);
    ADD_FAILURE() << "no error for an eos id outside the vocabulary";
  } catch (const brl::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("generation_config.json: eos_token_id: id 999 is outside the vocabulary"),
              std::string::npos)
        << e.what();
  }
}
