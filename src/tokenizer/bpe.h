// The BPE model of a tokenizer.json: vocab, ranked merges, byte fallback, and a per-word
// cache. Merging follows HF's Word::merge_all exactly: a min-heap of (rank, position) over a
// linked list of symbols, stale entries skipped, so ties and overlapping pairs resolve as HF.
#pragma once

#include <cstdint>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace brl::tok {

// Token ids index dense tables (vocab_size = max id + 1), so a file's largest id decides an
// allocation: ids above this are refused rather than allocated (2^31 - 1 asked for 64 GB and
// overflowed max id + 1). The largest published vocabularies have ~2.6e5 tokens.
constexpr int64_t kMaxTokenId = (1 << 22) - 1;

// v as a token id: an integer in [0, kMaxTokenId], else nullopt. Every id a file names goes
// through here (a float out of range into get<int32_t>() is undefined; found by the fuzzer).
std::optional<int32_t> token_id(const nlohmann::json& v);

class BpeModel {
 public:
  // m: the "model" object of tokenizer.json; file: its path, for error messages.
  void load(const nlohmann::json& m, const std::string& file);

  // Appends the ids for one pre-token. byte_level: `word` holds raw bytes that the ByteLevel
  // pre-tokenizer maps to GPT-2's stand-in characters (each byte is one symbol).
  void encode_word(std::string_view word, bool byte_level, std::vector<int32_t>& out) const;

  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }
  int32_t max_id() const { return max_id_; }

 private:
  void merge_word(std::vector<int32_t>& syms) const;
  std::optional<int32_t> byte_token(unsigned char b) const {
    return byte_tok_[b] >= 0 ? std::optional<int32_t>(byte_tok_[b]) : std::nullopt;
  }

  std::string file_;
  std::unordered_map<std::string, int32_t> vocab_;
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  int32_t max_id_ = -1;
  bool byte_fallback_ = false, ignore_merges_ = false, fuse_unk_ = false;
  std::optional<int32_t> unk_;
  int32_t byte_level_id_[256];  // id of GPT-2's stand-in character for each byte, -1 if absent
  int32_t byte_tok_[256];       // id of <0xNN>, -1 if absent

  // Word cache: pre-tokens repeat a lot in text. Bounded; reads under a shared lock.
  mutable std::shared_mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace brl::tok
