// BPE model (see bpe.h).
#include "tokenizer/bpe.h"

#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>

#include "tokenizer/text.h"
#include "util/error.h"
#include "util/json_int.h"

namespace brl::tok {

using json = nlohmann::json;

namespace {
constexpr size_t kCacheMax = 1 << 18;  // entries
constexpr size_t kCacheWordMax = 256;  // longer words are not cached (HF does the same)
uint64_t key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
}  // namespace

std::optional<int32_t> token_id(const json& v) {
  if (!json_int_fits<int32_t>(v) || v.get<int32_t>() < 0 || v.get<int32_t>() > kMaxTokenId) return std::nullopt;
  return v.get<int32_t>();
}

void BpeModel::load(const json& m, const std::string& file) {
  file_ = file;
  auto bad = [&](const std::string& field, const std::string& what, const std::string& hint = "") {
    throw UserError(file + ": model." + field + " " + what, hint);
  };
  if (!m.contains("vocab") || !m["vocab"].is_object()) bad("vocab", "must be an object of token -> id");
  for (auto& [tok, v] : m["vocab"].items()) {
    auto id = token_id(v);
    if (!id) bad("vocab['" + tok + "']", "= " + v.dump() + " is not an id in [0, " + std::to_string(kMaxTokenId) + "]");
    vocab_[tok] = *id;
    max_id_ = std::max(max_id_, *id);
  }
  auto flag = [&](const char* f) {
    if (!m.contains(f) || m[f].is_null()) return false;
    if (!m[f].is_boolean()) bad(f, "must be true or false");
    return m[f].get<bool>();
  };
  byte_fallback_ = flag("byte_fallback");
  ignore_merges_ = flag("ignore_merges");
  fuse_unk_ = flag("fuse_unk");
  if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() != 0.0)
    bad("dropout", "is set; BPE dropout is not supported (supported: null)");
  for (const char* f : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(f) && !m[f].is_null() && !(m[f].is_string() && m[f].get<std::string>().empty()))
      bad(f, "is set; it is not supported (supported: null)");
  if (m.contains("unk_token") && !m["unk_token"].is_null()) {
    if (!m["unk_token"].is_string()) bad("unk_token", "must be a string or null");
    auto it = vocab_.find(m["unk_token"].get<std::string>());
    if (it == vocab_.end()) bad("unk_token", "'" + m["unk_token"].get<std::string>() + "' is not in model.vocab");
    unk_ = it->second;
  }
  const ByteMap& bm = ByteMap::get();
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(bm.enc[static_cast<size_t>(b)]);
    byte_level_id_[b] = it == vocab_.end() ? -1 : it->second;
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    it = vocab_.find(buf);
    byte_tok_[b] = it == vocab_.end() ? -1 : it->second;
  }
  if (!m.contains("merges")) return;
  if (!m["merges"].is_array()) bad("merges", "must be an array");
  const json& ms = m["merges"];
  merges_.reserve(ms.size());
  for (size_t r = 0; r < ms.size(); ++r) {
    const json& mg = ms[r];
    std::string a, b, where = "merges[" + std::to_string(r) + "]";
    if (mg.is_string()) {  // "a b" (tokenizers < 0.20)
      const std::string& s = mg.get_ref<const std::string&>();
      auto sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        bad(where, "'" + s + "' is not of the form \"a b\"");
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {  // ["a", "b"]
      a = mg[0].get<std::string>(), b = mg[1].get<std::string>();
    } else {
      bad(where, "must be \"a b\" or [\"a\", \"b\"]");
    }
    auto ia = vocab_.find(a), ib = vocab_.find(b), ic = vocab_.find(a + b);
    if (ia == vocab_.end() || ib == vocab_.end() || ic == vocab_.end())
      bad(where, "'" + a + " " + b + "' uses a token missing from model.vocab");
    // A repeated pair keeps its first (best) rank.
    merges_.emplace(key(ia->second, ib->second), std::make_pair(static_cast<int32_t>(r), ic->second));
  }
}

void BpeModel::merge_word(std::vector<int32_t>& syms) const {
  if (syms.size() < 2) return;
  struct Sym {
    int32_t id, prev, next;
    bool alive;
  };
  std::vector<Sym> s(syms.size());
  for (size_t i = 0; i < syms.size(); ++i)
    s[i] = {syms[i], static_cast<int32_t>(i) - 1, i + 1 < syms.size() ? static_cast<int32_t>(i + 1) : -1, true};
  struct Cand {
    int32_t rank, pos, new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> q;
  auto push = [&](int32_t pos) {
    int32_t nx = s[static_cast<size_t>(pos)].next;
    if (nx < 0) return;
    auto m = merges_.find(key(s[static_cast<size_t>(pos)].id, s[static_cast<size_t>(nx)].id));
    if (m != merges_.end()) q.push({m->second.first, pos, m->second.second});
  };
  for (size_t i = 0; i + 1 < s.size(); ++i) push(static_cast<int32_t>(i));
  while (!q.empty()) {
    Cand top = q.top();
    q.pop();
    Sym& cur = s[static_cast<size_t>(top.pos)];
    if (!cur.alive || cur.next < 0) continue;
    Sym& right = s[static_cast<size_t>(cur.next)];
    auto m = merges_.find(key(cur.id, right.id));
    if (m == merges_.end() || m->second.second != top.new_id) continue;  // stale entry
    cur.id = top.new_id;
    right.alive = false;
    cur.next = right.next;
    if (right.next >= 0) s[static_cast<size_t>(right.next)].prev = top.pos;
    if (cur.prev >= 0) push(cur.prev);
    push(top.pos);
  }
  syms.clear();
  for (int32_t i = 0; i >= 0; i = s[static_cast<size_t>(i)].next) syms.push_back(s[static_cast<size_t>(i)].id);
}

void BpeModel::encode_word(std::string_view word, bool byte_level, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  bool cacheable = word.size() <= kCacheWordMax;
  if (cacheable) {
    std::shared_lock lk(cache_mu_);
    auto c = cache_.find(std::string(word));
    if (c != cache_.end()) {
      out.insert(out.end(), c->second.begin(), c->second.end());
      return;
    }
  }
  const ByteMap& bm = ByteMap::get();
  std::vector<int32_t> syms;
  if (ignore_merges_) {  // Llama-3: a pre-token that is itself a token is taken whole
    std::string enc;
    if (byte_level)
      for (unsigned char c : word) enc += bm.enc[c];
    auto it = vocab_.find(byte_level ? enc : std::string(word));
    if (it != vocab_.end()) syms.push_back(it->second);
  }
  if (syms.empty()) {
    syms.reserve(word.size());
    bool last_unk = false;
    auto push_unk = [&](const std::string& ch) {
      if (!unk_)
        throw UserError(file_ + ": '" + ch +
                        "' is not in model.vocab and the model has neither byte_fallback nor unk_token");
      if (!(fuse_unk_ && last_unk)) syms.push_back(*unk_);
      last_unk = true;
    };
    if (byte_level) {
      for (unsigned char c : word) {
        if (byte_level_id_[c] >= 0) syms.push_back(byte_level_id_[c]), last_unk = false;
        else push_unk(bm.enc[c]);
      }
    } else {
      std::string ch;
      for (size_t i = 0; i < word.size();) {
        size_t n = std::min(utf8_len(static_cast<unsigned char>(word[i])), word.size() - i);
        ch.assign(word.substr(i, n));
        i += n;
        auto it = vocab_.find(ch);
        if (it != vocab_.end()) {
          syms.push_back(it->second), last_unk = false;
          continue;
        }
        bool all = byte_fallback_;
        for (unsigned char b : ch) all = all && byte_tok_[b] >= 0;
        if (all) {
          for (unsigned char b : ch) syms.push_back(byte_tok_[b]);
          last_unk = false;
        } else {
          push_unk(ch);
        }
      }
    }
    merge_word(syms);
  }
  out.insert(out.end(), syms.begin(), syms.end());
  if (cacheable) {
    std::unique_lock lk(cache_mu_);
    if (cache_.size() < kCacheMax) cache_.emplace(std::string(word), std::move(syms));
  }
}

}  // namespace brl::tok
