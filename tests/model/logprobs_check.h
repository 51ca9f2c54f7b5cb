// chunked_token_logprobs (model/logprobs.h) on any device: over a bf16 h against an f64
// log-softmax (the CPU and the GPU keep the bf16 softmax by different ops: f32 then one cast;
// exp and scatter straight into bf16), and the entropy's gradient against autograd. Shared by
// llama_test and cuda_test.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include "model/logprobs.h"

namespace brl::test {

// Over a bf16 h the kept softmax is S = softmax - onehot(target) in bf16 and backward scales
// each product's result; the recompute path takes the f32 route. Both against an f64 log-softmax
// of the logits as the device's bf16 product rounds them (the rounding passed straight through
// for the gradient): log-probs to f32 rounding, entropies to 1e-4, gradients within 2 % of
// their largest entry, at T 1 and 0.7, with and without entropies.
inline void expect_bf16_token_logprobs_match_f64(at::Device dev) {
  using model::chunked_token_logprobs;
  at::manual_seed(4);
  auto h16 = at::randn({2, 300, 16}).to(at::kBFloat16), w16 = (0.5 * at::randn({40, 16})).to(at::kBFloat16);
  auto t = at::randint(0, 40, {2, 300}, at::kLong);
  // A few near-certain rows (p_t ~ 0.9998, which bf16 rounds to 1): S_t = p_t - 1 must not
  // round to 0, or their gradient would be wrong by as much as it is large.
  t.select(0, 0).narrow(0, 0, 4).fill_(7);
  w16.select(0, 7).fill_(0.9);
  h16.select(0, 0).narrow(0, 0, 4).fill_(1.0);
  auto up = at::randn({2, 300}, at::kDouble);
  const auto rounded = at::linear(h16.to(dev), w16.to(dev)).cpu().to(at::kDouble);  // [2, 300, 40]
  for (double temp : {1.0, 0.7}) {
    auto h = h16.to(at::kDouble).requires_grad_(), w = w16.to(at::kDouble).requires_grad_();
    auto exact = h.matmul(w.t());
    auto logits = (exact + (rounded - exact).detach()) / temp;
    auto want = at::log_softmax(logits, -1).gather(-1, t.unsqueeze(-1)).squeeze(-1);
    auto g_want = torch::autograd::grad({want}, {h, w}, {up});
    auto p = at::softmax(logits.detach(), -1);
    auto ent_want = -(p * p.log()).sum(-1);
    const double lp_c = want.select(0, 0).narrow(0, 0, 4).max().item<double>();
    EXPECT_TRUE(lp_c < -1e-7 && lp_c > -2e-3) << "near-certain rows' log p " << lp_c;
    for (int64_t keep : {int64_t{0}, model::kKeepSoftmaxBytes}) {
      for (bool with_entropy : {false, true}) {
        auto hb = h16.to(dev).requires_grad_(), wb = w16.to(dev).requires_grad_();
        at::Tensor ent;
        auto got =
            chunked_token_logprobs(hb, wb, t.to(dev), temp, /*chunk_tokens=*/3, keep, with_entropy ? &ent : nullptr);
        EXPECT_LT((got.cpu().to(at::kDouble) - want).abs().max().item<double>(), 2e-5) << keep;
        if (with_entropy) {
          EXPECT_LT((ent.cpu().to(at::kDouble) - ent_want).abs().max().item<double>(), 1e-4) << keep;
        }
        auto g = torch::autograd::grad({got}, {hb, wb}, {up.to(got.scalar_type()).to(dev)});
        for (int i : {0, 1}) {
          const double rel = (g[i].cpu().to(at::kDouble) - g_want[i]).abs().max().item<double>() /
                             g_want[i].abs().max().item<double>();
          EXPECT_LT(rel, 2e-2) << "keep " << keep << " T " << temp << (i ? " dW" : " dh");
        }
        // (At T 0.7 their 1 - p_t is ~1e-6, near f32's own resolution of p_t: not a bf16 matter.)
        if (temp != 1.0) continue;
        auto gc = g[0].cpu().select(0, 0).narrow(0, 0, 4).to(at::kDouble),
             gc_want = g_want[0].select(0, 0).narrow(0, 0, 4);
        EXPECT_LT((gc - gc_want).abs().max().item<double>(), 2e-2 * gc_want.abs().max().item<double>())
            << "near-certain rows, keep " << keep << " T " << temp;
      }
    }
  }
}

// entropy_grad: the entropy carries its gradient (TRL's entropy bonus), equal to autograd's
// through softmax and log on the whole [N, V] (f64, on the CPU), for both outputs' upstream
// gradients together and for the entropy's alone, with the softmax kept and recomputed.
inline void expect_entropy_grad_matches_autograd(at::Device dev) {
  using model::chunked_token_logprobs;
  using model::kKeepSoftmaxBytes;
  at::manual_seed(4);
  auto h = at::randn({2, 50, 16}, at::kDouble).requires_grad_(true);
  auto w = at::randn({40, 16}, at::kDouble).requires_grad_(true);
  auto t = at::randint(0, 40, {2, 50}, at::kLong);
  auto g_lp = at::randn({2, 50}, at::kDouble), g_ent = at::randn({2, 50}, at::kDouble);
  for (double temp : {1.0, 0.7}) {
    auto ls = at::log_softmax(h.matmul(w.t()) / temp, -1);
    auto lp_want = ls.gather(-1, t.unsqueeze(-1)).squeeze(-1);
    auto ent_want = -(ls.exp() * ls).sum(-1);
    auto e_only = torch::autograd::grad({ent_want}, {h}, {g_ent}, /*retain_graph=*/true)[0];
    auto want = torch::autograd::grad({lp_want, ent_want}, {h, w}, {g_lp, g_ent});
    for (int64_t keep : {int64_t{0}, kKeepSoftmaxBytes}) {  // backward recomputes / reuses the softmax
      at::Tensor ent;
      auto hd = h.to(dev), wd = w.to(dev);  // differentiable copies: gradients reach h and w
      auto got = chunked_token_logprobs(hd, wd, t.to(dev), temp, /*chunk_tokens=*/7, keep, &ent, /*entropy_grad=*/true);
      ASSERT_TRUE(ent.requires_grad());
      EXPECT_LT((got.cpu() - lp_want).abs().max().item<double>(), 1e-12);
      EXPECT_LT((ent.cpu() - ent_want).abs().max().item<double>(), 1e-12);
      auto g = torch::autograd::grad({got, ent}, {h, w}, {g_lp.to(dev), g_ent.to(dev)});
      EXPECT_LT((g[0] - want[0]).abs().max().item<double>(), 1e-10) << temp << " " << keep;
      EXPECT_LT((g[1] - want[1]).abs().max().item<double>(), 1e-10) << temp << " " << keep;
      // The entropy's gradient alone (the log-prob unused) is the bonus's.
      at::Tensor ent2;
      chunked_token_logprobs(h.to(dev), w.to(dev), t.to(dev), temp, 7, keep, &ent2, true);
      EXPECT_LT((torch::autograd::grad({ent2}, {h}, {g_ent.to(dev)})[0] - e_only).abs().max().item<double>(), 1e-10)
          << keep;
    }
  }
}

}  // namespace brl::test
