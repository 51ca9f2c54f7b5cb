// Batched generation loop.
#include "generate/generate.h"
#include "util/rng.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <random>

#include "model/llama.h"
#include "util/error.h"

namespace brl::gen {

void GenerateOptions::validate() const {
  auto bad = [](const std::string& m) { throw UserError("generate: " + m); };
  if (num_generations < 1) bad("num_generations (" + std::to_string(num_generations) + ") must be >= 1");
  if (max_new_tokens < 1) bad("max_new_tokens (" + std::to_string(max_new_tokens) + ") must be >= 1");
  if (!(temperature >= 0)) bad("temperature (" + std::to_string(temperature) + ") must be >= 0");
  if (top_k < 0) bad("top_k (" + std::to_string(top_k) + ") must be >= 0");
  if (!(top_p > 0 && top_p <= 1)) bad("top_p (" + std::to_string(top_p) + ") must be in (0, 1]");
}

const char* finish_reason_name(FinishReason r) { return r == FinishReason::kStop ? "stop" : "length"; }

namespace {
// Decorrelated per-completion seeds from (seed, prompt, sample).
uint64_t mix(uint64_t x) { return splitmix64(x); }
}  // namespace

std::vector<Completion> generate(const model::Model& model,
                                 const std::vector<std::vector<int32_t>>& prompts,
                                 const GenerateOptions& opts) {
  opts.validate();
  if (prompts.empty()) return {};
  c10::InferenceMode guard;
  const int64_t P = prompts.size(), G = opts.num_generations, V = model.config.vocab_size;
  int64_t Tp = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) throw UserError("generate: prompt " + std::to_string(i) + " is empty");
    for (auto t : prompts[i])
      if (t < 0 || t >= V)
        throw UserError("generate: prompt " + std::to_string(i) + " has token id " + std::to_string(t) +
                        " outside the vocabulary (" + std::to_string(V) + ")");
    Tp = std::max<int64_t>(Tp, prompts[i].size());
  }

  // Left-pad the prompts so they end together; pads are masked out of attention.
  auto ids = at::zeros({P, Tp}, at::kLong), mask = at::zeros({P, Tp}, at::kBool);
  {
    auto ia = ids.accessor<int64_t, 2>();
    auto ma = mask.accessor<bool, 2>();
    for (int64_t p = 0; p < P; ++p) {
      const int64_t n = prompts[p].size();
      for (int64_t i = 0; i < n; ++i) {
        ia[p][Tp - n + i] = prompts[p][i];
        ma[p][Tp - n + i] = true;
      }
    }
  }
  auto cache = model.new_cache(P, Tp + opts.max_new_tokens);
  auto pos = model::positions_from_mask(mask);                 // [P, Tp]
  auto hidden = model.forward(ids, pos, &cache, mask);         // [P, Tp, C]
  auto logits = model.lm_logits(hidden.select(1, Tp - 1));     // [P, V]
  auto next_pos = pos.select(1, Tp - 1) + 1;                   // [P]

  // Replicate each prompt's rows G times: row r = p * G + g.
  auto rep = at::arange(P, at::kLong).repeat_interleave(G);    // [P*G]
  if (G > 1) {
    cache.keep_rows(rep);
    logits = logits.index_select(0, rep);
    next_pos = next_pos.index_select(0, rep);
  }

  std::vector<Completion> out(P * G);
  std::vector<std::mt19937_64> rngs;
  std::vector<int64_t> active(P * G);  // completion index of each batch row
  for (int64_t r = 0; r < P * G; ++r) {
    out[r].prompt_index = r / G;
    out[r].sample_index = r % G;
    rngs.emplace_back(mix(mix(opts.seed) ^ mix(static_cast<uint64_t>(r / G) * 0x100000001b3ull) ^
                          static_cast<uint64_t>(r % G)));
    active[r] = r;
  }
  const SamplerConfig sc{opts.temperature, opts.top_k, opts.top_p};
  std::uniform_real_distribution<double> unif(0.0, 1.0);

  // Log-probs at the sampling temperature (1 when greedy), over the whole vocabulary: what the
  // trainer computes (grpo::completion_logprobs, TRL's definition), so an unmoved policy has ratio 1.
  const float inv_t = opts.temperature > 0 ? static_cast<float>(1.0 / opts.temperature) : 1.f;
  for (int64_t step = 0; step < opts.max_new_tokens && !active.empty(); ++step) {
    auto lf = logits.to(at::kFloat).contiguous();             // [B, V]
    auto lse = at::logsumexp(inv_t == 1.f ? lf : lf * inv_t, -1);  // [B]; no scaled copy at T = 1
    const int64_t B = active.size();
    const float* lp = lf.data_ptr<float>();
    const float* ls = lse.data_ptr<float>();
    std::vector<int64_t> next_tok, keep;
    for (int64_t b = 0; b < B; ++b) {
      auto& c = out[active[b]];
      const float* row = lp + b * V;
      const double u = unif(rngs[active[b]]);  // drawn even when greedy: streams stay aligned
      const int64_t tok = sample_row(row, V, sc, u);
      c.tokens.push_back(static_cast<int32_t>(tok));
      c.logprobs.push_back(row[tok] * inv_t - ls[b]);
      const bool stop = std::find(opts.stop_token_ids.begin(), opts.stop_token_ids.end(), tok) !=
                        opts.stop_token_ids.end();
      if (stop) {
        c.finish = FinishReason::kStop;
      } else if (static_cast<int64_t>(c.tokens.size()) >= opts.max_new_tokens) {
        c.finish = FinishReason::kLength;
      } else {
        keep.push_back(b);
        next_tok.push_back(tok);
      }
    }
    if (keep.empty()) break;
    if (static_cast<int64_t>(keep.size()) < B) {  // drop finished rows from the batch
      auto rows = at::tensor(at::ArrayRef<int64_t>(keep), at::kLong);
      cache.keep_rows(rows);
      next_pos = next_pos.index_select(0, rows);
      std::vector<int64_t> a;
      for (auto b : keep) a.push_back(active[b]);
      active.swap(a);
    }
    auto tok = at::tensor(at::ArrayRef<int64_t>(next_tok), at::kLong).unsqueeze(1);  // [B', 1]
    auto h = model.forward(tok, next_pos.unsqueeze(1), &cache);                       // [B', 1, C]
    logits = model.lm_logits(h.select(1, 0));                                         // [B', V]
    next_pos = next_pos + 1;
  }
  return out;
}

}  // namespace brl::gen
