// The decoder against a naive reference written here from the HF modeling code's equations
// (per-head loops, explicit K/V head sharing, rotation pairs in double), plus KV-cache and
// left-padding consistency, chunked log-probs and their gradients, LoRA slots, autograd, the
// float32 LM head (cast_lm_head_to_fp32).
#include "model/llama.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>

#include "util/error.h"
#include "model/loader.h"
#include "model/logprobs.h"
#include "logprobs_check.h"
#include "test_util.h"

using namespace brl::model;
using brl::test::tiny_config;

namespace {
const int kThreads = brl::test::init_threads();

// int64 ids from a flat list, reshaped to `shape`.
at::Tensor ids_of(std::vector<int64_t> v, std::vector<int64_t> shape = {}) {
  auto t = at::tensor(at::ArrayRef<int64_t>(v), at::kLong);
  return shape.empty() ? t : t.view(shape);
}

at::Tensor ref_rms(const at::Tensor& x, const at::Tensor& w, double eps) {
  return x / (x * x).mean(-1, true).add(eps).sqrt() * w;
}

// Rotate the first n_rot dims of v [D] at position p: pairs (i, i + n_rot/2).
at::Tensor ref_rope(at::Tensor v, int64_t p, int64_t n_rot, double theta) {
  auto out = v.clone();
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    double f = static_cast<float>(1.0 / std::pow(theta, 2.0 * i / n_rot));
    double a = p * f;
    double x1 = v[i].item<double>(), x2 = v[i + n_rot / 2].item<double>();
    out[i] = x1 * std::cos(a) - x2 * std::sin(a);
    out[i + n_rot / 2] = x2 * std::cos(a) + x1 * std::sin(a);
  }
  return out;
}

at::Tensor ref_lin(const Linear& l, const at::Tensor& x) {
  auto y = x.matmul(l.weight.t());
  return l.bias.defined() ? y + l.bias : y;
}

// Logits [T, V] of one sequence, positions 0..T-1, in double.
at::Tensor reference_logits(const Model& m, const at::Tensor& ids) {
  const auto& c = m.config;
  const int64_t T = ids.size(0), H = c.num_attention_heads, D = c.head_dim;
  auto h = m.embed_tokens.index_select(0, ids);  // [T, C]
  for (auto& L : m.layers) {
    auto x = ref_rms(h, L.input_layernorm, c.rms_norm_eps);
    auto q = ref_lin(L.self_attn.q_proj, x), k = ref_lin(L.self_attn.k_proj, x), v = ref_lin(L.self_attn.v_proj, x);
    auto out = at::zeros({T, H * D}, at::kDouble);
    for (int64_t hd = 0; hd < H; ++hd) {
      const int64_t kvh = hd / c.n_groups();  // HF repeat_kv: head h reads kv head h / groups
      std::vector<at::Tensor> qs, ks;
      for (int64_t t = 0; t < T; ++t) {
        auto qv = q[t].narrow(0, hd * D, D), kv = k[t].narrow(0, kvh * D, D);
        if (c.qk_norm) {
          qv = ref_rms(qv, L.self_attn.q_norm, c.rms_norm_eps);
          kv = ref_rms(kv, L.self_attn.k_norm, c.rms_norm_eps);
        }
        qs.push_back(ref_rope(qv, t, c.n_rot(), c.rope_theta));
        ks.push_back(ref_rope(kv, t, c.n_rot(), c.rope_theta));
      }
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> s(i + 1);
        double mx = -1e300, z = 0;
        for (int64_t j = 0; j <= i; ++j) {
          s[j] = (qs[i] * ks[j]).sum().item<double>() / std::sqrt(double(D));
          mx = std::max(mx, s[j]);
        }
        for (auto& e : s) z += (e = std::exp(e - mx));
        auto acc = at::zeros({D}, at::kDouble);
        for (int64_t j = 0; j <= i; ++j) acc += (s[j] / z) * v[j].narrow(0, kvh * D, D);
        out[i].narrow(0, hd * D, D).copy_(acc);
      }
    }
    h = h + ref_lin(L.self_attn.o_proj, out);
    auto x2 = ref_rms(h, L.post_attention_layernorm, c.rms_norm_eps);
    auto g = ref_lin(L.mlp.gate_proj, x2);
    h = h + ref_lin(L.mlp.down_proj, g / (1 + (-g).exp()) * ref_lin(L.mlp.up_proj, x2));
  }
  return ref_rms(h, m.norm, c.rms_norm_eps).matmul(m.output_weight().t());
}
}  // namespace

class Families : public ::testing::TestWithParam<std::string> {};

TEST_P(Families, MatchesNaiveReference) {
  auto cfg = tiny_config(GetParam());
  if (GetParam() == "llama") cfg.partial_rotary_factor = 0.5;  // exercise pass-through dims
  auto m32 = random_model(cfg, 7, 0.2);
  auto ids = ids_of({5, 17, 3, 96, 0, 42, 8});
  auto got = m32.logits(ids)[0];  // [T, V]
  auto m64 = m32;                 // same struct, converted copy of the weights
  m64.to(at::kDouble);
  auto want = reference_logits(m64, ids);
  const double scale = want.abs().max().item<double>();
  EXPECT_GT(scale, 0.5) << "logits too small to test anything";
  EXPECT_LT((got.to(at::kDouble) - want).abs().max().item<double>() / scale, 1e-5);
}

// Prefill in two pieces, then token by token: logits equal the full uncached pass.
TEST_P(Families, CacheMatchesFullForward) {
  auto cfg = tiny_config(GetParam());
  auto m = random_model(cfg, 11, 0.2);
  auto ids = ids_of({4, 9, 33, 2, 71, 15, 60, 1, 8, 12, 12, 5, 90, 3, 44, 7, 19, 2}, {2, 9});
  const int64_t B = 2, T = ids.size(1);
  auto full = m.logits(ids);  // [B, T, V]
  auto cache = m.new_cache(B, T + 3);
  auto pos = at::arange(T, at::kLong).unsqueeze(0).expand({B, T}).contiguous();
  std::vector<at::Tensor> parts;
  parts.push_back(m.lm_logits(m.forward(ids.narrow(1, 0, 4), pos.narrow(1, 0, 4), &cache)));
  for (int64_t t = 4; t < T; ++t)
    parts.push_back(m.lm_logits(m.forward(ids.narrow(1, t, 1), pos.narrow(1, t, 1), &cache)));
  EXPECT_EQ(cache.len, T);
  auto cached = at::cat(parts, 1);
  EXPECT_LT((cached - full).abs().max().item<double>(), 1e-5);
}

// A left-padded batch gives each row the logits it gets alone, at prefill and during decode.
TEST_P(Families, LeftPaddingMatchesUnpadded) {
  auto cfg = tiny_config(GetParam());
  auto m = random_model(cfg, 13, 0.2);
  std::vector<std::vector<int64_t>> seqs = {{7, 8, 9}, {1, 2, 3, 4, 5, 6}};
  const int64_t T = 6;
  auto ids = at::zeros({2, T}, at::kLong), mask = at::zeros({2, T}, at::kBool);
  for (int b = 0; b < 2; ++b)
    for (size_t i = 0; i < seqs[b].size(); ++i) {
      ids[b][T - seqs[b].size() + i] = seqs[b][i];
      mask[b][T - seqs[b].size() + i] = true;
    }
  auto cache = m.new_cache(2, T + 2);
  auto pos = positions_from_mask(mask);
  auto pre = m.lm_logits(m.forward(ids, pos, &cache, mask));  // [2, T, V]
  auto next = ids_of({11, 22}, {2, 1});
  auto npos = pos.narrow(1, T - 1, 1) + 1;
  auto dec = m.lm_logits(m.forward(next, npos, &cache));  // [2, 1, V]
  for (int b = 0; b < 2; ++b) {
    auto s = seqs[b];
    const int64_t n = s.size();
    auto alone = m.logits(ids_of(s))[0];  // [n, V]
    EXPECT_LT((pre[b].narrow(0, T - n, n) - alone).abs().max().item<double>(), 1e-5) << b;
    s.push_back(next[b][0].item<int64_t>());
    auto alone2 = m.logits(ids_of(s))[0][n];
    EXPECT_LT((dec[b][0] - alone2).abs().max().item<double>(), 1e-5) << b;
    EXPECT_FALSE(pre.isnan().any().item<bool>());
  }
}

INSTANTIATE_TEST_SUITE_P(Model, Families, ::testing::Values("llama", "qwen2", "qwen3", "mistral"));

// Within Mistral's sliding window its mask hides nothing; beyond it transformers hides the oldest
// slots, which our attention does not: refused by name, whole or through a cache, not run.
TEST(Model, SequenceLongerThanSlidingWindowRefused) {
  auto cfg = tiny_config("mistral");
  cfg.sliding_window = 8;
  auto m = random_model(cfg, 3);
  std::vector<int64_t> ids = {5, 9, 2, 7, 1, 3, 8, 4, 6};
  EXPECT_NO_THROW(m.logits(ids_of({ids.begin(), ids.begin() + 8})));
  try {
    m.logits(ids_of(ids));
    ADD_FAILURE() << "9 positions ran past a window of 8";
  } catch (const brl::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("longer than the model's sliding_window (8)"), std::string::npos) << e.what();
  }
  auto cache = m.new_cache(1, 16);
  auto pos = at::arange(8, at::kLong).view({1, 8});
  at::NoGradGuard ng;
  m.forward(ids_of({ids.begin(), ids.begin() + 8}, {1, 8}), pos, &cache);
  EXPECT_THROW(m.forward(ids_of({ids[8]}, {1, 1}), at::full({1, 1}, 8, at::kLong), &cache), brl::UserError);
}

TEST(TokenLogprobs, MatchesFullLogSoftmaxWithGradientsAndEntropies) {
  at::manual_seed(3);
  // 600 rows: chunks of 3 when backward recomputes, of 512 + 88 when it reuses the softmax.
  auto h = at::randn({2, 300, 16}, at::kDouble).requires_grad_(true);
  auto w = at::randn({40, 16}, at::kDouble).requires_grad_(true);
  auto t = at::randint(0, 40, {2, 300}, at::kLong);
  auto gw = at::randn({2, 300}, at::kDouble);  // arbitrary upstream gradient
  for (double temp : {1.0, 0.7}) {
    auto want = at::log_softmax(h.matmul(w.t()) / temp, -1).gather(-1, t.unsqueeze(-1)).squeeze(-1);
    auto [gh_want, gw_want] = [&] {
      auto g = torch::autograd::grad({want}, {h, w}, {gw});
      return std::make_pair(g[0], g[1]);
    }();
    auto p = at::softmax(h.matmul(w.t()) / temp, -1);
    auto ent_want = -(p * p.log()).sum(-1);                 // [2, 300]
    for (int64_t keep : {int64_t{0}, kKeepSoftmaxBytes}) {  // backward recomputes / reuses the softmax
      for (bool with_entropy : {false, true}) {             // asking for entropies changes no gradient
        at::Tensor ent;
        auto got = chunked_token_logprobs(h, w, t, temp, /*chunk_tokens=*/3, keep, with_entropy ? &ent : nullptr);
        EXPECT_LT((got.to(at::kDouble) - want).abs().max().item<double>(), 1e-6);
        auto g = torch::autograd::grad({got}, {h, w}, {gw.to(got.scalar_type())});
        EXPECT_LT((g[0] - gh_want).abs().max().item<double>(), 1e-6) << keep;
        EXPECT_LT((g[1] - gw_want).abs().max().item<double>(), 1e-6) << keep;
        if (!with_entropy) continue;
        ASSERT_EQ(ent.sizes(), ent_want.sizes());
        EXPECT_FALSE(ent.requires_grad());
        EXPECT_LT((ent - ent_want).abs().max().item<double>(), 1e-9) << keep;
      }
    }
  }
}

// The entropy with its gradient (TRL's entropy bonus) against autograd (logprobs_check.h; the
// GPU's in cuda_test).
TEST(TokenLogprobs, EntropyGradientMatchesAutograd) { brl::test::expect_entropy_grad_matches_autograd(at::kCPU); }

// The bf16 kept-softmax path on the CPU (logprobs_check.h; the GPU's in cuda_test).
TEST(TokenLogprobs, Bf16KeptSoftmaxMatchesF64) { brl::test::expect_bf16_token_logprobs_match_f64(at::kCPU); }

TEST(Linear, LoraSlotAndSwitch) {
  at::manual_seed(5);
  Linear l;
  l.weight = at::randn({3, 4});
  l.bias = at::randn({3});
  auto x = at::randn({2, 4});
  auto base = x.matmul(l.weight.t()) + l.bias;
  EXPECT_TRUE(at::allclose(l.forward(x, true, false), base, 1e-5, 1e-6));
  l.lora = LoraSlot{at::randn({2, 4}), at::randn({3, 2}), 0.5, 0.0};
  auto want = base + 0.5 * x.matmul(l.lora->A.t()).matmul(l.lora->B.t());
  EXPECT_TRUE(at::allclose(l.forward(x, true, false), want, 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(l.forward(x, false, false), base, 1e-5, 1e-6));  // adapters off
  // Dropout acts in training only.
  l.lora->dropout = 0.5;
  EXPECT_TRUE(at::allclose(l.forward(x, true, false), want, 1e-5, 1e-6));
  EXPECT_FALSE(at::allclose(l.forward(x, true, true), want, 1e-5, 1e-6));
}

// Projections of one bf16 input share its f32 cast for their f32 adapters (q, k, v; gate, up):
// the cast is made once and reused, and outputs and gradients equal separate casts (the
// gradient to x summed in f32 before its one rounding, so within a bf16 ulp).
TEST(Linear, SharedAdapterInputCast) {
  at::manual_seed(6);
  auto make = [](int64_t out) {
    Linear l;
    l.weight = at::randn({out, 8}).to(at::kBFloat16);
    l.lora = LoraSlot{at::randn({2, 8}), at::randn({out, 2}), 0.5, 0.0};
    return l;
  };
  Linear a = make(5), b = make(3);
  auto x0 = at::randn({4, 8}).to(at::kBFloat16);
  auto run = [&](bool shared, at::Tensor* xl_out) {
    auto x = x0.clone().requires_grad_();
    at::Tensor xl;
    auto ya = a.forward(x, true, true, shared ? &xl : nullptr), yb = b.forward(x, true, true, shared ? &xl : nullptr);
    if (xl_out) *xl_out = xl;
    (ya.to(at::kFloat).sum() + 2 * yb.to(at::kFloat).sum()).backward();
    return std::tuple(ya, yb, x.grad());
  };
  at::Tensor xl;
  auto [ya, yb, gx] = run(true, &xl);
  auto [ya0, yb0, gx0] = run(false, nullptr);
  ASSERT_TRUE(xl.defined());
  EXPECT_EQ(xl.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(ya, ya0));
  EXPECT_TRUE(at::equal(yb, yb0));
  EXPECT_LT((gx.to(at::kFloat) - gx0.to(at::kFloat)).abs().max().item<double>(),
            1e-2 * gx0.to(at::kFloat).abs().max().item<double>());
  // A defined lora_x is taken as x's cast (zeros: only the base's output remains), unless it is
  // of another dtype than the adapter's.
  at::Tensor zeros = at::zeros({4, 8});
  EXPECT_TRUE(at::equal(a.forward(x0, true, false, &zeros), a.forward(x0, false, false)));
  at::Tensor other = at::zeros({4, 8}, at::kDouble);
  EXPECT_TRUE(at::equal(a.forward(x0, true, false, &other), ya0));
}

// Autograd through the whole model: d loss / d weight agrees with a central difference.
TEST(Model, GradientMatchesFiniteDifference) {
  auto m = random_model(tiny_config("qwen3"), 17, 0.2, at::kDouble);
  m.set_requires_grad(true);
  auto ids = ids_of({3, 1, 4, 1, 5}, {1, 5});
  auto pos = at::arange(5, at::kLong).unsqueeze(0);
  auto targets = ids_of({1, 4, 1, 5, 9}, {1, 5});
  auto loss_of = [&] { return -m.token_logprobs(m.forward(ids, pos), targets).sum(); };
  auto loss = loss_of();
  loss.backward();
  struct Probe {
    at::Tensor* t;
    int64_t flat;
  };
  std::vector<Probe> probes = {{&m.layers[0].self_attn.k_proj.weight, 5},
                               {&m.layers[1].self_attn.q_norm, 2},
                               {&m.layers[1].mlp.down_proj.weight, 33},
                               {&m.embed_tokens, 4 * 48 + 7}};
  at::NoGradGuard ng;
  for (auto& p : probes) {
    auto flat = p.t->view({-1});
    const double g = p.t->grad().view({-1})[p.flat].item<double>(), eps = 1e-6;
    const double v0 = flat[p.flat].item<double>();
    flat[p.flat] = v0 + eps;
    const double lp = loss_of().item<double>();
    flat[p.flat] = v0 - eps;
    const double lm = loss_of().item<double>();
    flat[p.flat] = v0;
    EXPECT_NEAR(g, (lp - lm) / (2 * eps), 1e-6 + 1e-5 * std::abs(g));
  }
}

// cast_lm_head_to_fp32 over a bf16 model: logits and log-probs are those of float32 hidden states
// times the float32 head (computed here with the plain ops, in f64), not the bf16 head's (whose
// logits round to bf16: off by more); the gradient reaches the bf16 hidden states; tied and
// untied heads; moved with the model; a no-op over an f32 model.
TEST(Model, CastLmHeadToFp32) {
  for (const char* family : {"llama", "qwen2"}) {
    SCOPED_TRACE(family);
    auto c = tiny_config(family);
    auto m = random_model(c, 23, 0.2);
    m.to(at::kBFloat16);
    auto ids = ids_of({3, 1, 4, 1, 5, 9}, {2, 3});
    auto pos = at::arange(3, at::kLong).unsqueeze(0).expand({2, 3}).contiguous();
    auto targets = ids_of({1, 4, 1, 5, 9, 2}, {2, 3});
    at::Tensor h = m.forward(ids, pos).detach();  // bf16
    const at::Tensor expect_logits = at::matmul(h.to(at::kDouble), m.output_weight().to(at::kDouble).t());
    const at::Tensor expect_lp = at::log_softmax(expect_logits / 0.7, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1);
    const double plain_err = (m.lm_logits(h).to(at::kDouble) - expect_logits).abs().max().item<double>();
    m.cast_lm_head_to_fp32();
    ASSERT_TRUE(m.lm_head_f32.defined());
    EXPECT_EQ(m.lm_head_f32.scalar_type(), at::kFloat);
    EXPECT_EQ(m.output_weight().scalar_type(), at::kBFloat16) << "the model's own head stays";
    const at::Tensor logits = m.lm_logits(h);
    EXPECT_EQ(logits.scalar_type(), at::kFloat);
    const double err = (logits.to(at::kDouble) - expect_logits).abs().max().item<double>();
    EXPECT_LT(err, 1e-5);
    EXPECT_GT(plain_err, 10 * err) << "the bf16 head's logits are rounded to bf16";
    at::Tensor hg = h.clone().requires_grad_(true);
    at::Tensor lp = m.token_logprobs(hg, targets, 0.7);
    EXPECT_LT((lp.to(at::kDouble) - expect_lp).abs().max().item<double>(), 1e-5);
    lp.sum().backward();
    ASSERT_TRUE(hg.grad().defined());
    EXPECT_EQ(hg.grad().scalar_type(), at::kBFloat16);
    EXPECT_GT(hg.grad().abs().max().item<double>(), 0.0);
    m.to(at::Device(at::kCPU));
    EXPECT_TRUE(m.lm_head_f32.defined());
  }
  auto f = random_model(tiny_config("llama"), 23, 0.2);
  f.cast_lm_head_to_fp32();
  EXPECT_EQ(f.lm_head_f32.data_ptr(), f.output_weight().data_ptr()) << "over f32: the head itself, no copy";
}

TEST(Model, NameMap) {
  auto m = random_model(tiny_config("qwen2"), 1);
  auto names = m.named_tensors();
  // qwen2 tied: embed + 2 layers x (2 norms + 4 w + 3 biases + 3 mlp) + norm
  EXPECT_EQ(names.size(), 1u + 2 * 12 + 1);
  EXPECT_EQ(names[4].name, "model.layers.0.self_attn.k_proj.weight");
  EXPECT_EQ(names[4].shape, (std::vector<int64_t>{24, 48}));
  auto proj = m.projections();
  EXPECT_EQ(proj.size(), 14u);
  EXPECT_EQ(proj[7].first, "model.layers.1.self_attn.q_proj");
  EXPECT_EQ(proj[7].second, &m.layers[1].self_attn.q_proj);
}
