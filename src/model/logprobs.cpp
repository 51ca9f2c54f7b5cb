// Chunked chosen-token log-probabilities with a recomputing backward.
#include "model/logprobs.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

namespace brl::model {

namespace {
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Softmax statistics in f32 at least (f64 for f64 inputs: gradient checks).
at::ScalarType acc_type(const torch::Tensor& h) {
  return h.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

struct ChunkedLogprobs : public torch::autograd::Function<ChunkedLogprobs> {
  // h [N, C], w [V, C], t [N] -> [N]
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& h, const torch::Tensor& w,
                               const torch::Tensor& t, double temperature, int64_t chunk) {
    const int64_t N = h.size(0);
    const auto acc = acc_type(h);
    auto out = at::empty({N}, h.options().dtype(acc));
    auto lse = at::empty({N}, h.options().dtype(acc));
    for (int64_t s = 0; s < N; s += chunk) {
      const int64_t n = std::min(chunk, N - s);
      auto logits = at::linear(h.narrow(0, s, n), w).to(acc);  // [n, V]
      if (temperature != 1.0) logits.div_(temperature);
      auto l = at::logsumexp(logits, -1);                                 // [n]
      auto chosen = logits.gather(1, t.narrow(0, s, n).unsqueeze(1)).squeeze(1);
      out.narrow(0, s, n).copy_(chosen - l);
      lse.narrow(0, s, n).copy_(l);
    }
    ctx->save_for_backward({h, w, t, lse});
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["chunk"] = chunk;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto h = saved[0], w = saved[1], t = saved[2], lse = saved[3];
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
      auto logits = at::linear(hc, w).to(acc);  // [n, V]
      if (temperature != 1.0) logits.div_(temperature);
      // d logp[t] / d logits = onehot(t) - softmax(logits)
      auto gc = g.narrow(0, s, n).unsqueeze(1);          // [n, 1]
      auto d = logits.sub_(lse.narrow(0, s, n).unsqueeze(1)).exp_().mul_(-gc);  // [n, V]
      d.scatter_add_(1, t.narrow(0, s, n).unsqueeze(1), gc);
      if (temperature != 1.0) d.div_(temperature);
      auto dd = d.to(h.scalar_type());
      if (need_h) gh.narrow(0, s, n).copy_(at::matmul(dd, w));                // [n, C]
      if (need_w) gw.add_(at::matmul(dd.t(), hc).to(acc));                  // [V, C]
    }
    return {gh, need_w ? gw.to(w.scalar_type()) : torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};
}  // namespace

torch::Tensor chunked_token_logprobs(const torch::Tensor& hidden, const torch::Tensor& weight,
                                     const torch::Tensor& targets, double temperature,
                                     int64_t chunk_tokens) {
  TORCH_CHECK(hidden.size(-1) == weight.size(1), "hidden size ", hidden.size(-1),
              " != LM head input ", weight.size(1));
  TORCH_CHECK(targets.sizes() == hidden.sizes().slice(0, hidden.dim() - 1),
              "targets must have the shape of hidden without its last dim");
  auto h = hidden.reshape({-1, hidden.size(-1)});  // [N, C]
  auto t = targets.reshape({-1}).to(at::kLong);    // [N]
  auto out = ChunkedLogprobs::apply(h, weight, t, temperature, std::max<int64_t>(1, chunk_tokens));
  return out.view(targets.sizes());
}

}  // namespace brl::model
