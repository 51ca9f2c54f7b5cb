// Chunked chosen-token log-probabilities; backward reuses the kept softmax or recomputes it.
#include "model/logprobs.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

namespace brl::model {

namespace {
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Softmax statistics in f32 at least (f64 for f64 inputs: gradient checks).
at::ScalarType acc_type(const torch::Tensor& h) { return h.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

// d [n, V]: the gradient w.r.t. a chunk's logits (temperature applied): into gh's rows [n, C]
// and gw [V, C].
void add_chunk_grads(const torch::Tensor& d, const torch::Tensor& hc, const torch::Tensor& w, torch::Tensor& gh,
                     int64_t s, torch::Tensor& gw) {
  auto dd = d.to(hc.scalar_type());
  if (gh.defined()) gh.narrow(0, s, d.size(0)).copy_(at::matmul(dd, w));   // [n, C]
  if (gw.defined()) gw.add_(at::matmul(dd.t(), hc).to(gw.scalar_type()));  // [V, C]
}

struct ChunkedLogprobs : public torch::autograd::Function<ChunkedLogprobs> {
  // h [N, C], w [V, C], t [N] -> [N]
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& h, const torch::Tensor& w,
                               const torch::Tensor& t, double temperature, int64_t chunk, int64_t keep_bytes,
                               torch::Tensor* entropy) {
    const int64_t N = h.size(0), V = w.size(0);
    const auto acc = acc_type(h);
    auto out = at::empty({N}, h.options().dtype(acc));
    auto lse = at::empty({N}, h.options().dtype(acc));
    // Softmax kept for backward when it fits the budget: backward then skips the recompute
    // (a third of the LM head's products). Over a low-precision h it is kept in h's dtype as
    // S = softmax - onehot(t), the gradient w.r.t. the logits but for each row's scale: backward
    // is then one product per chunk and a scale of its [n, C] result, where the f32 softmax took
    // a scale, a scatter and a cast over [n, V] first (and twice the memory).
    const bool low = h.scalar_type() != acc;
    const auto kept_type = low ? h.scalar_type() : acc;
    const bool keep = N * V * static_cast<int64_t>(at::elementSize(kept_type)) <= keep_bytes;
    // With the softmax kept, memory is budgeted for [N, V] already: chunks of 512 rows run the
    // LM head's products ~20 % faster than 128 (measured at 152k x 512).
    if (keep) chunk = std::max<int64_t>(chunk, 512);
    torch::Tensor probs = keep ? at::empty({N, V}, h.options().dtype(kept_type)) : torch::Tensor();
    if (entropy) *entropy = at::empty({N}, h.options().dtype(acc));
    for (int64_t s = 0; s < N; s += chunk) {
      const int64_t n = std::min(chunk, N - s);
      auto logits = at::linear(h.narrow(0, s, n), w).to(acc);  // [n, V]
      if (temperature != 1.0) logits.div_(temperature);
      // The fused log-softmax kernel: ATen's logsumexp is a chain of passes, ~4x slower.
      auto ls = at::log_softmax(logits, -1);  // [n, V]
      auto tc = t.narrow(0, s, n).unsqueeze(1);
      auto lp = ls.gather(1, tc).squeeze(1);
      out.narrow(0, s, n).copy_(lp);
      lse.narrow(0, s, n).copy_(logits.gather(1, tc).squeeze(1) - lp);  // logit - log p = log-sum-exp
      // Low precision: S_t = p_t - 1 from the f32 log-prob (rounding p_t first would make it 0
      // for p_t near 1), written before the softmax is rounded to the kept dtype.
      auto kept = keep ? probs.narrow(0, s, n) : torch::Tensor();
      auto st = low && keep ? (lp.exp() - 1).unsqueeze(1) : torch::Tensor();  // [n, 1]
      if (entropy) {
        // H = -sum p log p, from the f32 softmax.
        auto p = keep && !low ? kept : at::empty_like(ls);
        at::exp_out(p, ls);
        entropy->narrow(0, s, n).copy_(-(p * ls).sum(-1));
        if (keep && low) kept.copy_(p.scatter_(1, tc, st));
      } else if (keep && low && !ls.is_cuda()) {
        // The CPU's exp into another dtype and scatter into bf16 take scalar or whole-tensor
        // cast paths (~4x and ~3x): all in f32, then one cast.
        kept.copy_(ls.exp_().scatter_(1, tc, st));
      } else if (keep) {
        at::exp_out(kept, ls);  // on a GPU rounded to the kept dtype in the same pass
        if (low) kept.scatter_(1, tc, st.to(kept_type));
      }
    }
    ctx->save_for_backward({h, w, t, lse, probs});
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["chunk"] = chunk;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto h = saved[0], w = saved[1], t = saved[2], lse = saved[3], probs = saved[4];
    const double temperature = ctx->saved_data["temperature"].toDouble();
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const auto acc = acc_type(h);
    auto g = grads[0].to(acc);  // [N]
    const int64_t N = h.size(0);
    const bool need_h = ctx->needs_input_grad(0), need_w = ctx->needs_input_grad(1);
    torch::Tensor gh = need_h ? at::empty_like(h) : torch::Tensor();
    torch::Tensor gw = need_w ? at::zeros(w.sizes(), w.options().dtype(acc)) : torch::Tensor();
    for (int64_t s = 0; s < N; s += chunk) {
      const int64_t n = std::min(chunk, N - s);
      auto hc = h.narrow(0, s, n);
      auto gc = g.narrow(0, s, n).unsqueeze(1);  // [n, 1]
      // d logp[t] / d logits = onehot(t) - softmax(logits)
      if (probs.defined() && probs.scalar_type() != acc) {
        // d logits = -(g / T) S row by row, so each product takes S as kept and the scale
        // goes on its [n, C] result (or on hc: the rows of S^T hc).
        auto scale = gc.neg().div_(temperature);  // [n, 1]
        auto S = probs.narrow(0, s, n);           // [n, V]
        if (need_h) gh.narrow(0, s, n).copy_(at::matmul(S, w).to(acc).mul_(scale));
        if (need_w) gw.add_(at::matmul(S.t(), hc.mul(scale.to(hc.scalar_type()))).to(acc));
        continue;
      }
      torch::Tensor d;
      if (probs.defined()) {
        d = probs.narrow(0, s, n).mul(-gc);  // [n, V]
      } else {
        auto logits = at::linear(hc, w).to(acc);  // [n, V]
        if (temperature != 1.0) logits.div_(temperature);
        d = logits.sub_(lse.narrow(0, s, n).unsqueeze(1)).exp_().mul_(-gc);
      }
      d.scatter_add_(1, t.narrow(0, s, n).unsqueeze(1), gc);
      if (temperature != 1.0) d.div_(temperature);
      add_chunk_grads(d, hc, w, gh, s, gw);
    }
    return {gh,
            need_w ? gw.to(w.scalar_type()) : torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

// The same log-probs, and the entropy H = -sum p log p as a second output with its gradient
// (TRL's entropy bonus): dH / dz = -p (log p + H) per row. The softmax [N, V] is kept (in f32)
// when it fits keep_bytes, else backward recomputes each chunk's logits; on any device.
struct ChunkedLogprobsEntropy : public torch::autograd::Function<ChunkedLogprobsEntropy> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& h, const torch::Tensor& w,
                               const torch::Tensor& t, double temperature, int64_t chunk, int64_t keep_bytes) {
    const int64_t N = h.size(0), V = w.size(0);
    const auto acc = acc_type(h);
    auto out = at::empty({N}, h.options().dtype(acc)), lse = at::empty_like(out), ent = at::empty_like(out);
    const bool keep = N * V * static_cast<int64_t>(at::elementSize(acc)) <= keep_bytes;
    if (keep) chunk = std::max<int64_t>(chunk, 512);  // as ChunkedLogprobs
    torch::Tensor probs = keep ? at::empty({N, V}, h.options().dtype(acc)) : torch::Tensor();
    for (int64_t s = 0; s < N; s += chunk) {
      const int64_t n = std::min(chunk, N - s);
      auto logits = at::linear(h.narrow(0, s, n), w).to(acc);  // [n, V]
      if (temperature != 1.0) logits.div_(temperature);
      auto ls = at::log_softmax(logits, -1);
      auto tc = t.narrow(0, s, n).unsqueeze(1);
      auto lp = ls.gather(1, tc).squeeze(1);
      out.narrow(0, s, n).copy_(lp);
      lse.narrow(0, s, n).copy_(logits.gather(1, tc).squeeze(1) - lp);
      auto p = keep ? probs.narrow(0, s, n) : at::empty_like(ls);
      at::exp_out(p, ls);
      ent.narrow(0, s, n).copy_(-(p * ls).sum(-1));
    }
    ctx->save_for_backward({h, w, t, lse, ent, probs});
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["chunk"] = chunk;
    return {out, ent};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto h = saved[0], w = saved[1], t = saved[2], lse = saved[3], ent = saved[4], probs = saved[5];
    const double temperature = ctx->saved_data["temperature"].toDouble();
    const int64_t chunk = ctx->saved_data["chunk"].toInt(), N = h.size(0);
    const auto acc = acc_type(h);
    auto g_lp = grads[0].defined() ? grads[0].to(acc) : at::zeros({N}, lse.options());
    auto g_h = grads[1].defined() ? grads[1].to(acc) : at::zeros({N}, lse.options());
    torch::Tensor gh = ctx->needs_input_grad(0) ? at::empty_like(h) : torch::Tensor();
    torch::Tensor gw = ctx->needs_input_grad(1) ? at::zeros(w.sizes(), w.options().dtype(acc)) : torch::Tensor();
    for (int64_t s = 0; s < N; s += chunk) {
      const int64_t n = std::min(chunk, N - s);
      auto hc = h.narrow(0, s, n);
      auto gl = g_lp.narrow(0, s, n).unsqueeze(1), ge = g_h.narrow(0, s, n).unsqueeze(1);  // [n, 1]
      auto H = ent.narrow(0, s, n).unsqueeze(1);
      // d = g_lp (onehot - p) - g_H p (log p + H)
      torch::Tensor d;
      if (probs.defined()) {
        auto p = probs.narrow(0, s, n);
        // p log p as xlogy: 0 where the kept p underflowed to 0 (its log would be -inf).
        d = at::special_xlogy(p, p).mul_(ge).add_(p.mul(H.mul(ge).add_(gl))).neg_();
      } else {
        auto logits = at::linear(hc, w).to(acc);
        if (temperature != 1.0) logits.div_(temperature);
        auto ls = logits.sub_(lse.narrow(0, s, n).unsqueeze(1));  // log p
        d = ls.exp().mul_(ls.add(H).mul_(ge).add_(gl)).neg_();
      }
      d.scatter_add_(1, t.narrow(0, s, n).unsqueeze(1), gl);
      if (temperature != 1.0) d.div_(temperature);
      add_chunk_grads(d, hc, w, gh, s, gw);
    }
    return {gh,
            gw.defined() ? gw.to(w.scalar_type()) : torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};
}  // namespace

torch::Tensor chunked_token_logprobs(const torch::Tensor& hidden, const torch::Tensor& weight,
                                     const torch::Tensor& targets, double temperature, int64_t chunk_tokens,
                                     int64_t keep_bytes, torch::Tensor* entropy, bool entropy_grad) {
  TORCH_CHECK(hidden.size(-1) == weight.size(1), "hidden size ", hidden.size(-1), " != LM head input ", weight.size(1));
  TORCH_CHECK(targets.sizes() == hidden.sizes().slice(0, hidden.dim() - 1),
              "targets must have the shape of hidden without its last dim");
  auto h = hidden.reshape({-1, hidden.size(-1)});  // [N, C]
  auto t = targets.reshape({-1}).to(at::kLong);    // [N]
  // Only when a gradient will be asked for (forward runs in no-grad mode: decide here).
  const bool grad = at::GradMode::is_enabled() && (hidden.requires_grad() || weight.requires_grad());
  if (entropy && entropy_grad && grad) {
    auto both =
        ChunkedLogprobsEntropy::apply(h, weight, t, temperature, std::max<int64_t>(1, chunk_tokens), keep_bytes);
    *entropy = both[1].view(targets.sizes());
    return both[0].view(targets.sizes());
  }
  torch::Tensor ent;
  auto out = ChunkedLogprobs::apply(h, weight, t, temperature, std::max<int64_t>(1, chunk_tokens),
                                    grad ? keep_bytes : -1, entropy ? &ent : nullptr);
  if (entropy) *entropy = ent.view(targets.sizes());
  return out.view(targets.sizes());
}

}  // namespace brl::model
