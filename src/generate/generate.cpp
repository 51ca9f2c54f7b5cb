// Batched generation loop.
#include "generate/generate.h"
#include "util/rng.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/core/InferenceMode.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "generate/sample_rows.h"
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
  if (!(min_p >= 0 && min_p <= 1)) bad("min_p (" + std::to_string(min_p) + ") must be in [0, 1]");
  if (!(repetition_penalty > 0 && std::isfinite(repetition_penalty)))
    bad("repetition_penalty (" + std::to_string(repetition_penalty) + ") must be a number > 0");
  if (first_prompt_index < 0) bad("first_prompt_index (" + std::to_string(first_prompt_index) + ") must be >= 0");
}

const char* finish_reason_name(FinishReason r) { return r == FinishReason::kStop ? "stop" : "length"; }

namespace {
// Decorrelated per-completion seeds from (seed, prompt, sample).
uint64_t mix(uint64_t x) { return splitmix64(x); }

std::mt19937_64 completion_rng(uint64_t seed, int64_t prompt, int64_t sample) {
  return std::mt19937_64(
      mix(mix(seed) ^ mix(static_cast<uint64_t>(prompt) * 0x100000001b3ull) ^ static_cast<uint64_t>(sample)));
}

bool is_stop(const GenerateOptions& opts, int64_t tok) {
  return std::find(opts.stop_token_ids.begin(), opts.stop_token_ids.end(), tok) != opts.stop_token_ids.end();
}

// Left-padded prompt ids and mask [P, Tp] on the model's device, after checking the ids.
std::pair<at::Tensor, at::Tensor> pad_prompts(const model::Model& model,
                                              const std::vector<std::vector<int32_t>>& prompts) {
  const int64_t P = prompts.size(), V = model.config.vocab_size;
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
  return {ids.to(model.device()), mask.to(model.device())};
}

SamplerConfig sampler_config(const GenerateOptions& o) {
  return {o.temperature, o.top_k, o.top_p, o.min_p, o.repetition_penalty};
}

// Static decoding: B = P*G rows decode max_new_tokens steps each over a cache of fixed shape;
// a step samples from the logits buffer, records the token, and runs the model on it. Every
// tensor a step touches exists before the first step, so that steps replay as one CUDA graph.
std::vector<Completion> generate_static(const model::Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                        const GenerateOptions& opts) {
  const int64_t P = prompts.size(), G = opts.num_generations, B = P * G, N = opts.max_new_tokens;
  auto [ids, mask] = pad_prompts(model, prompts);
  const int64_t Tp = ids.size(1);
  const auto dev = at::TensorOptions().device(model.device());
  // The group's prompt is prefilled once (fused attention on the GPU), then its cache rows
  // are replicated G times: row r = p * G + g.
  auto cache = model.new_cache(P, Tp + N);
  auto pos = model::positions_from_mask(mask);
  auto hidden = model.forward(ids, pos, &cache, mask);
  auto rep = at::arange(P, dev.dtype(at::kLong)).repeat_interleave(G);
  auto logits = model.lm_logits(hidden.select(1, Tp - 1)).to(at::kFloat).index_select(0, rep).contiguous();  // [B, V]
  auto next_pos = (pos.select(1, Tp - 1) + 1).index_select(0, rep).unsqueeze(1).contiguous();                // [B, 1]
  cache.keep_rows(rep);

  // Each completion's uniforms, one per step, from its own stream: the dynamic path's draws.
  std::vector<double> uh(static_cast<size_t>(N * B));
  std::uniform_real_distribution<double> unif(0.0, 1.0);
  for (int64_t r = 0; r < B; ++r) {
    auto rng = completion_rng(opts.seed, opts.first_prompt_index + r / G, r % G);
    for (int64_t s = 0; s < N; ++s) uh[s * B + r] = unif(rng);
  }
  auto uniforms = at::from_blob(uh.data(), {N, B}, at::kDouble).to(model.device());
  auto out_tok = at::zeros({B, N}, dev.dtype(at::kLong));
  auto out_lp = at::zeros({B, N}, dev.dtype(at::kFloat));
  auto step = at::zeros({1}, dev.dtype(at::kLong));
  auto slot = at::full({1}, Tp, dev.dtype(at::kLong));
  const SamplerConfig sc = sampler_config(opts);
  at::Tensor seen;  // [B, V] the tokens the repetition penalty applies to, row by row
  if (sc.repetition_penalty != 1.0) {
    const int64_t V = logits.size(1);
    auto host = at::zeros({P, V}, at::kBool);
    auto ha = host.accessor<bool, 2>();
    for (int64_t p = 0; p < P; ++p)
      for (int32_t t : prompts[p]) ha[p][t] = true;
    seen = host.to(model.device()).index_select(0, rep).contiguous();
  }
  auto body = [&] {
    auto [tok, lp] = sample_rows(logits, uniforms.index_select(0, step).squeeze(0), sc, seen);
    if (seen.defined()) seen.scatter_(1, tok.unsqueeze(1), true);
    out_tok.index_copy_(1, step, tok.unsqueeze(1));
    out_lp.index_copy_(1, step, lp.unsqueeze(1));
    auto h = model.forward_static(tok.unsqueeze(1), next_pos, cache, slot);
    logits.copy_(model.lm_logits(h.select(1, 0)));
    next_pos.add_(1);
    slot.add_(1);
    step.add_(1);
  };
  at::Tensor stops;
  if (!opts.stop_token_ids.empty())
    stops = at::tensor(at::ArrayRef<int64_t>(opts.stop_token_ids), at::kLong).to(model.device());
  auto all_stopped = [&](int64_t steps) {
    return stops.defined() && at::isin(out_tok.narrow(1, 0, steps), stops).any(1).all().item<bool>();
  };

  int64_t done = 0;
  const bool graphs = opts.cuda_graphs && model.device().is_cuda() && N > 1;
  std::optional<c10::cuda::CUDAStreamGuard> side;
  std::optional<at::cuda::CUDAGraph> graph;
  if (graphs) {
    // Capture on a side stream (CUDA cannot capture the legacy default stream); the eager
    // first step there also warms up the libraries' lazy set-up (cuBLAS workspaces).
    c10::cuda::device_synchronize();
    side.emplace(c10::cuda::getStreamFromPool());
  }
  body();
  ++done;
  if (graphs) {
    graph.emplace();
    graph->capture_begin();
    body();  // recorded, not run
    graph->capture_end();
  }
  // Finished rows keep decoding (fixed shapes); every 16 steps, stop early once all have stopped.
  for (; done < N; ++done) {
    if (done % 16 == 0 && all_stopped(done)) break;
    if (graph) graph->replay();
    else body();
  }
  auto toks = out_tok.narrow(1, 0, done).cpu().contiguous();
  auto lps = out_lp.narrow(1, 0, done).cpu().contiguous();
  side.reset();
  auto ta = toks.accessor<int64_t, 2>();
  auto la = lps.accessor<float, 2>();
  std::vector<Completion> out(B);
  for (int64_t r = 0; r < B; ++r) {
    auto& c = out[r];
    c.prompt_index = opts.first_prompt_index + r / G;
    c.sample_index = r % G;
    for (int64_t s = 0; s < done; ++s) {
      c.tokens.push_back(static_cast<int32_t>(ta[r][s]));
      c.logprobs.push_back(la[r][s]);
      if (is_stop(opts, ta[r][s])) {
        c.finish = FinishReason::kStop;
        break;
      }
    }
  }
  return out;
}
}  // namespace

std::vector<Completion> generate(const model::Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                 const GenerateOptions& opts) {
  opts.validate();
  if (prompts.empty()) return {};
  c10::InferenceMode guard;
  using D = GenerateOptions::Decode;
  if (opts.decode == D::kStatic || (opts.decode == D::kAuto && model.device().is_cuda()))
    return generate_static(model, prompts, opts);
  const int64_t P = prompts.size(), G = opts.num_generations, V = model.config.vocab_size;
  auto [ids, mask] = pad_prompts(model, prompts);
  const int64_t Tp = ids.size(1);
  auto cache = model.new_cache(P, Tp + opts.max_new_tokens);
  auto pos = model::positions_from_mask(mask);              // [P, Tp]
  auto hidden = model.forward(ids, pos, &cache, mask);      // [P, Tp, C]
  auto logits = model.lm_logits(hidden.select(1, Tp - 1));  // [P, V]
  auto next_pos = pos.select(1, Tp - 1) + 1;                // [P]

  // Replicate each prompt's rows G times: row r = p * G + g.
  const auto dev = at::TensorOptions().dtype(at::kLong).device(model.device());
  auto rep = at::arange(P, dev).repeat_interleave(G);  // [P*G]
  if (G > 1) {
    cache.keep_rows(rep);
    logits = logits.index_select(0, rep);
    next_pos = next_pos.index_select(0, rep);
  }

  std::vector<Completion> out(P * G);
  std::vector<std::mt19937_64> rngs;
  std::vector<int64_t> active(P * G);  // completion index of each batch row
  for (int64_t r = 0; r < P * G; ++r) {
    out[r].prompt_index = opts.first_prompt_index + r / G;
    out[r].sample_index = r % G;
    rngs.push_back(completion_rng(opts.seed, opts.first_prompt_index + r / G, r % G));
    active[r] = r;
  }
  const SamplerConfig sc = sampler_config(opts);
  std::uniform_real_distribution<double> unif(0.0, 1.0);
  // The repetition penalty's tokens per completion: distinct ids (list) and membership (bitmap),
  // its prompt's first, then each token it samples.
  const bool penalty = sc.repetition_penalty != 1.0;
  std::vector<std::vector<int32_t>> seen;
  std::vector<std::vector<uint8_t>> is_seen;
  auto mark = [&](int64_t r, int32_t t) {
    if (!is_seen[r][t]) is_seen[r][t] = 1, seen[r].push_back(t);
  };
  if (penalty) {
    seen.resize(P * G);
    is_seen.assign(P * G, std::vector<uint8_t>(V, 0));
    for (int64_t r = 0; r < P * G; ++r)
      for (int32_t t : prompts[r / G]) mark(r, t);
  }
  std::vector<float> penalised;

  // Log-probs at the sampling temperature (1 when greedy), over the whole vocabulary: what the
  // trainer computes (grpo::completion_logprobs, TRL's definition), so an unmoved policy has ratio 1.
  const float inv_t = opts.temperature > 0 ? static_cast<float>(1.0 / opts.temperature) : 1.f;
  for (int64_t step = 0; step < opts.max_new_tokens && !active.empty(); ++step) {
    auto lf = logits.to(at::kFloat).cpu().contiguous();            // [B, V]
    auto lse = at::logsumexp(inv_t == 1.f ? lf : lf * inv_t, -1);  // [B]; no scaled copy at T = 1
    const int64_t B = active.size();
    const float* lp = lf.data_ptr<float>();
    const float* ls = lse.data_ptr<float>();
    std::vector<int64_t> next_tok, keep;
    for (int64_t b = 0; b < B; ++b) {
      auto& c = out[active[b]];
      const float* row = lp + b * V;
      const double u = unif(rngs[active[b]]);  // drawn even when greedy: streams stay aligned
      const float* sample_from = row;
      if (penalty) {
        penalised.assign(row, row + V);
        apply_repetition_penalty(penalised.data(), seen[active[b]], sc.repetition_penalty);
        sample_from = penalised.data();
      }
      const int64_t tok = sample_row(sample_from, V, sc, u);
      if (penalty) mark(active[b], static_cast<int32_t>(tok));
      c.tokens.push_back(static_cast<int32_t>(tok));
      c.logprobs.push_back(row[tok] * inv_t - ls[b]);
      if (is_stop(opts, tok)) {
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
      auto rows = at::tensor(at::ArrayRef<int64_t>(keep), at::kLong).to(model.device());
      cache.keep_rows(rows);
      next_pos = next_pos.index_select(0, rows);
      std::vector<int64_t> a;
      for (auto b : keep) a.push_back(active[b]);
      active.swap(a);
    }
    auto tok = at::tensor(at::ArrayRef<int64_t>(next_tok), at::kLong).to(model.device()).unsqueeze(1);  // [B', 1]
    auto h = model.forward(tok, next_pos.unsqueeze(1), &cache);                                         // [B', 1, C]
    logits = model.lm_logits(h.select(1, 0));                                                           // [B', V]
    next_pos = next_pos + 1;
  }
  return out;
}

}  // namespace brl::gen
