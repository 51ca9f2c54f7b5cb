// Shared by the tokenizer *_oracle_test files: the real tokenizer files and llama.cpp's golden
// .inp/.out files (../shared/testdata/tokenizers, see its README), HF's own tokenizer run live
// through tools/tokenizer/encode.py (PyPI `tokenizers` in .venv), and a seeded generator of
// tricky strings. A missing oracle is a test failure, not a skip.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace tok_oracle {

inline std::string src(const std::string& rel) { return std::string(BRL_SOURCE_DIR) + "/" + rel; }
inline std::string data(const std::string& rel) { return std::string(BRL_TESTDATA_DIR) + "/tokenizers/" + rel; }
inline std::string qwen3_json() { return data("qwen3/tokenizer.json"); }
inline std::string llama3_json() { return data("llama3/tokenizer.json"); }
inline std::string mistral_json() { return data("mistral/tokenizer.json"); }  // Mistral-7B's sentencepiece-style BPE
inline std::string gpt2_json() { return data("gpt2/tokenizer.json"); }
inline std::string golden(const std::string& name) { return data("llama.cpp-vocab/ggml-vocab-" + name + ".gguf"); }

inline ::testing::AssertionResult have(const std::string& path) {
  if (std::filesystem::exists(path)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "test data missing: " << path
                                       << "\n  the shared test data lives beside the checkout (../shared/testdata); "
                                          "point -DBRL_TESTDATA_DIR at it";
}

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

// llama.cpp's test-tokenizer-0 files: strings joined by "\n__ggml_vocab_test__\n"; one line
// of ids per string in .out.
inline std::vector<Case> read_golden(const std::string& base) {
  std::ifstream fi(base + ".inp", std::ios::binary), fo(base + ".out");
  std::stringstream ss;
  ss << fi.rdbuf();
  std::string all = ss.str();
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<Case> cases;
  for (size_t p = 0, q; (q = all.find(sep, p)) != std::string::npos; p = q + sep.size())
    cases.push_back({all.substr(p, q - p), {}});
  std::string line;
  for (auto& c : cases) {
    if (!std::getline(fo, line)) break;
    std::istringstream ls(line);
    for (int32_t id; ls >> id;) c.ids.push_back(id);
  }
  return cases;
}

struct HfReply {
  std::vector<int32_t> ids;
  std::string decoded, decoded_skip;
};

// Runs HF's tokenizer on each text (encode with/without special tokens, then decode).
inline std::vector<HfReply> run_hf(const std::string& tokenizer_json, const std::vector<std::string>& texts,
                                   bool add_special) {
  char tmpl[] = "/tmp/brl_tok_oracle_XXXXXX";
  std::string dir = mkdtemp(tmpl);
  {
    std::ofstream in(dir + "/in.jsonl");
    for (auto& t : texts)
      in << nlohmann::json{{"text", t}, {"add_special", add_special}}.dump(-1, ' ', false,
                                                                           nlohmann::json::error_handler_t::replace)
         << "\n";
  }
  std::string cmd = "'" BRL_PYTHON "' '" + src("tools/tokenizer/encode.py") + "' '" + tokenizer_json + "' < '" + dir +
                    "/in.jsonl' > '" + dir + "/out.jsonl'";
  int rc = std::system(cmd.c_str());
  std::vector<HfReply> out;
  std::ifstream f(dir + "/out.jsonl");
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line);
    out.push_back(
        {j["ids"].get<std::vector<int32_t>>(), j["decoded"].get<std::string>(), j["decoded_skip"].get<std::string>()});
  }
  std::filesystem::remove_all(dir);
  EXPECT_EQ(rc, 0) << cmd << "\n  (HF's tokenizers missing? run scripts/setup.sh --test)";
  return out;
}

// Seeded tricky strings: words, contractions, digit runs, whitespace runs, many scripts,
// combining marks, emoji sequences, odd spaces, and the given special tokens glued in.
inline std::vector<std::string> tricky_strings(uint32_t seed, size_t n, const std::vector<std::string>& specials) {
  // One row per kind of piece.
  // clang-format off
  static const std::vector<std::string> pieces = {
      "hello", "Hello", "WORLD", "the", " the", "don't", "I'LL", "we've", "'s", "'re", "'M", "'d", "it's", "x'y",
      "1", "12", "123", "1234", "1234567", "3.14", "1,000", "2024-01-01", "0x1F", "v2",
      " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "   \t", "\n \n", "\r", "\f", "\v",
      "!", "...", "?!", "``", "--", "()", "{}", "#", "@", "$", "%", "&&", "||", "=>", "::", ";", "\"", "'", "''", "_", "__init__",
      "é", "e\u0301", "n\u0303", "ñ", "Å", "A\u030a", "ﬁ", "日本語", "中文字", "한국어", "Привет", "мир", "مرحبا", "שלום", "हिन्दी",
      "ไทย", "Ελληνικά", "ǅ", "ß", "ſ", "İ", "ı", "Ⅻ", "½", "²", "٣", "१२", "①",
      "😀", "👍🏽", "👨‍👩‍👧", "🇺🇸", "❤️", "🤖", "🫠",
      "\u00a0", "\u3000", "\u0085", "\u200b", "\ufeff", "\u2028", "\u1680", "\u202f",
      "<0x41>", "▁", "▁▁", "Ġ", "Ċ", "<", ">", "<|", "|>", "<s", "s>", "</", "<think>", "\\n", "\xef\xbf\xbd"};
  // clang-format on
  std::mt19937 rng(seed);
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) {
    std::string s;
    size_t k = 1 + rng() % 12;
    for (size_t j = 0; j < k; ++j) {
      if (!specials.empty() && rng() % 10 == 0) s += specials[rng() % specials.size()];
      else s += pieces[rng() % pieces.size()];
    }
    out.push_back(s);
  }
  return out;
}

// Lines of the project's own text files: real prose and code for bulk comparisons.
inline std::vector<std::string> corpus_lines(size_t max_lines) {
  std::vector<std::string> out;
  for (const char* d : {"src", "tests", "scripts"}) {
    if (!std::filesystem::exists(src(d))) continue;
    for (auto& e : std::filesystem::recursive_directory_iterator(src(d))) {
      if (!e.is_regular_file() || e.file_size() > 200000) continue;
      auto ext = e.path().extension().string();
      if (ext != ".cpp" && ext != ".h" && ext != ".md" && ext != ".sh") continue;
      std::ifstream f(e.path());
      for (std::string line; std::getline(f, line) && out.size() < max_lines;) out.push_back(line);
    }
  }
  for (const char* f : {"README.md", "../shared/DESIGN.md", "../shared/STYLE.md"}) {
    std::ifstream in(src(f));
    std::stringstream ss;
    ss << in.rdbuf();
    if (!ss.str().empty()) out.push_back(ss.str());  // whole documents: long inputs, many newlines
  }
  return out;
}

}  // namespace tok_oracle
