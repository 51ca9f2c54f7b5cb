// The proxy's aggregation modes (proxy/aggregate.h): fedavg against a hand-computed mean;
// exact against an independent full SVD (Eckart-Young: the best rank-r approximation of the
// mean product and its tail-singular-value error), and against fedavg's product; Nesterov
// momentum against a hand-derived sequence and across a restart (bit-identical); trimmed
// mean / median against one attacker of five; and the real Proxy on a directory bucket
// restarted mid-run continuing the momentum exactly, with float32 and with bf16 versions.
#include <gtest/gtest.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include "launch/aten_factorizer.h"
#include "proxy/aggregate.h"
#include "proxy/proxy.h"
#include "codec/codec.h"
#include "config/run_config.h"
#include "protocol/bucket.h"
#include "protocol/layout.h"
#include "protocol/update.h"
#include "protocol/verify.h"
#include "store/local_store.h"
#include "util/error.h"
#include "util/hash.h"
#include "util/safetensors.h"
#include "../proxy/proxy_util.h"

using namespace brl;
using namespace brl::proxy;
using codec::Tensor;
namespace fs = std::filesystem;

namespace {

const std::string kA = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
const std::string kB = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight";

std::vector<float> randn(size_t n, std::mt19937& g, float scale = 1) {
  std::normal_distribution<float> d(0, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// One LoRA module: A [r, in], B [out, r].
std::vector<Tensor> module(int64_t r, int64_t in, int64_t out, std::mt19937& g, float scale = 1) {
  return {{kA, {r, in}, randn(static_cast<size_t>(r * in), g, scale)},
          {kB, {out, r}, randn(static_cast<size_t>(out * r), g, scale)}};
}

AggregationConfig mode(const std::string& m, double lr = 1, double mu = 0) {
  AggregationConfig c;
  c.mode = kAggregationModes.parse(m).value();
  c.server_learning_rate = lr;
  c.server_momentum = mu;
  c.validate();
  return c;
}

AggregateInput input(const std::vector<Tensor>& g, const std::vector<std::vector<Tensor>>& ds,
                     std::vector<double> w = {}) {
  AggregateInput in;
  in.global = &g;
  in.weights = std::move(w);
  for (auto& d : ds) in.deltas.push_back(&d);
  if (in.weights.empty()) in.weights.assign(ds.size(), 1.0);
  in.factorizer = &launch::aten_factorizer();
  return in;
}

at::Tensor mat(const Tensor& t) {
  return at::from_blob(const_cast<float*>(t.data.data()), {t.shape[0], t.shape[1]}, at::kFloat).to(at::kDouble);
}
// (B + dB)(A + dA) of a module list [A, B] (delta may be null).
at::Tensor product(const std::vector<Tensor>& m, const std::vector<Tensor>* d = nullptr) {
  at::Tensor A = mat(m[0]), B = mat(m[1]);
  if (d) A = A + mat((*d)[0]), B = B + mat((*d)[1]);
  return at::mm(B, A);
}
double fro(const at::Tensor& x) { return x.norm().item<double>(); }

bool bit_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name || a[i].data.size() != b[i].data.size() ||
        std::memcmp(a[i].data.data(), b[i].data.data(), a[i].data.size() * sizeof(float)) != 0)
      return false;
  return true;
}

}  // namespace

TEST(Fedavg, HandComputedWeightedMean) {
  std::vector<Tensor> g{{"w", {2}, {1, 2}}};
  std::vector<std::vector<Tensor>> ds{{{"w", {2}, {1, 0}}}, {{"w", {2}, {0, 3}}}, {{"w", {2}, {-2, 6}}}};
  // weights 1, 2, 1: sum = (1 - 2, 6 + 6) / 4 = (-0.25, 3); lr 0.5 -> step (-0.125, 1.5)
  auto r = aggregate(mode("fedavg", 0.5), input(g, ds, {1, 2, 1}), nullptr);
  EXPECT_FLOAT_EQ(r.next[0].data[0], 0.875f);
  EXPECT_FLOAT_EQ(r.next[0].data[1], 3.5f);
  EXPECT_NEAR(r.stats["delta_norm"].get<double>(), std::sqrt(0.125 * 0.125 + 1.5 * 1.5), 1e-12);
  EXPECT_NEAR(r.stats["step_norm"].get<double>(), std::sqrt(0.25 * 0.25 + 9.0), 1e-12);
  EXPECT_EQ(r.stats["mode"], "fedavg");
  EXPECT_EQ(r.stats["updates"], 3);
  EXPECT_DOUBLE_EQ(r.stats["total_weight"].get<double>(), 4.0);
}

TEST(Aggregate, RejectsBadInput) {
  std::vector<Tensor> g{{"w", {2}, {1, 2}}};
  std::vector<std::vector<Tensor>> wrong{{{"w", {3}, {1, 2, 3}}}};
  EXPECT_THROW(aggregate(mode("fedavg"), input(g, wrong), nullptr), UserError);
  std::vector<std::vector<Tensor>> ok{{{"w", {2}, {1, 2}}}};
  EXPECT_THROW(aggregate(mode("fedavg"), input(g, ok, {0.0}), nullptr), UserError);
  EXPECT_THROW(aggregate(mode("fedavg"), input(g, {}), nullptr), UserError);
  AggregationConfig bad;  // an unknown mode cannot even be set
  EXPECT_THROW(bad.table().set_from_json({{"mode", "krum"}}, "run.toml"), UserError);
}

TEST(AggregationConfig, Validation) {
  for (const char* m : {"fedavg", "exact", "trimmed_mean", "median"}) EXPECT_NO_THROW(mode(m));
  AggregationConfig c;
  try {
    c.table().set_from_json({{"mode", "mean"}}, "run.toml");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("fedavg, exact, trimmed_mean, median"), std::string::npos) << e.what();
  }
  c = {};
  c.trim_ratio = 0.5;
  EXPECT_THROW(c.validate(), UserError);
  c = {};
  c.trim_ratio = -0.1;
  EXPECT_THROW(c.validate(), UserError);
  c = {};
  c.server_momentum = 1.0;
  EXPECT_THROW(c.validate(), UserError);
  c = {};
  c.server_momentum = 0.9;
  c.trim_ratio = 0.49;
  EXPECT_NO_THROW(c.validate());
}

TEST(Exact, OneWorkerReproducesTheProduct) {
  std::mt19937 gen(1);
  auto g = module(4, 10, 12, gen);
  std::vector<std::vector<Tensor>> ds{module(4, 10, 12, gen, 0.3f)};
  auto r = aggregate(mode("exact"), input(g, ds), nullptr);
  at::Tensor want = product(g, &ds[0]);  // rank 4 = r: representable exactly
  EXPECT_LT(fro(product(r.next) - want) / fro(want), 1e-6);
  EXPECT_LT(r.stats["reconstruction_error"]["max"].get<double>(), 1e-6);
  EXPECT_EQ(r.stats["modules"], 1);
  EXPECT_EQ(r.stats["reconstruction_error"]["worst"], "base_model.model.model.layers.0.self_attn.q_proj.");
}

// Already balanced factors (B = U S^1/2, A = S^1/2 V^T) with a zero delta come back as they
// were: the Procrustes alignment undoes the SVD's arbitrary signs instead of publishing a
// large factor step that leaves the product unchanged.
TEST(Exact, KeepsTheFactorsBasisWhenNothingChanges) {
  std::mt19937 gen(2);
  at::Tensor M = at::from_blob(randn(12 * 10, gen).data(), {12, 10}, at::kFloat).to(at::kDouble);
  auto [U, S, Vh] = at::linalg_svd(M, false);
  at::Tensor root = S.slice(0, 0, 3).sqrt();
  at::Tensor B = (U.slice(1, 0, 3) * root.unsqueeze(0)).to(at::kFloat).contiguous();
  at::Tensor A = (root.unsqueeze(1) * Vh.slice(0, 0, 3)).neg().to(at::kFloat).contiguous();  // one gauge of many
  B = B.neg();
  std::vector<Tensor> g{{kA, {3, 10}, std::vector<float>(A.data_ptr<float>(), A.data_ptr<float>() + 30)},
                        {kB, {12, 3}, std::vector<float>(B.data_ptr<float>(), B.data_ptr<float>() + 36)}};
  std::vector<std::vector<Tensor>> ds{
      {{kA, {3, 10}, std::vector<float>(30, 0)}, {kB, {12, 3}, std::vector<float>(36, 0)}}};
  auto r = aggregate(mode("exact"), input(g, ds), nullptr);
  for (size_t i = 0; i < 2; ++i)
    for (size_t k = 0; k < g[i].data.size(); ++k)
      EXPECT_NEAR(r.next[i].data[k], g[i].data[k], 1e-5) << g[i].name << " " << k;
  EXPECT_LT(r.stats["step_norm"].get<double>(), 1e-5);
}

// 2 workers x r=2 below both sides (the QR path); 3 workers x r=3 = 9 above min(in, out)
// (the dense path, through the Gram matrix of either side).
struct ExactCase {
  int workers;
  int64_t r, in, out;
};
void PrintTo(const ExactCase& c, std::ostream* os) {
  *os << c.workers << " workers, r " << c.r << ", in " << c.in << ", out " << c.out;
}
class ExactTwoWorkers : public ::testing::TestWithParam<ExactCase> {};

TEST_P(ExactTwoWorkers, IsTheBestRankRApproximationOfTheMeanProduct) {
  auto c = GetParam();
  std::mt19937 gen(3);
  auto g = module(c.r, c.in, c.out, gen);
  std::vector<std::vector<Tensor>> ds;
  std::vector<double> w;
  for (int i = 0; i < c.workers; ++i) ds.push_back(module(c.r, c.in, c.out, gen, 0.8f)), w.push_back(1.0 + i);
  auto r = aggregate(mode("exact"), input(g, ds, w), nullptr);

  // Independently: the weighted mean product and its full SVD.
  at::Tensor M = at::zeros({c.out, c.in}, at::kDouble);
  double W = 0;
  for (int i = 0; i < c.workers; ++i) M = M + w[i] * product(g, &ds[i]), W += w[i];
  M = M / W;
  auto [U, S, Vh] = at::linalg_svd(M, false);
  at::Tensor Mr = at::mm(U.slice(1, 0, c.r) * S.slice(0, 0, c.r).unsqueeze(0), Vh.slice(0, 0, c.r));
  const double tail = S.slice(0, c.r).square().sum().sqrt().item<double>() / fro(M);
  ASSERT_GT(tail, 0.05) << "the mean product must have rank > r for this test to mean anything";

  at::Tensor got = product(r.next);
  EXPECT_LT(fro(got - Mr) / fro(M), 1e-5);
  EXPECT_NEAR(fro(M - got) / fro(M), tail, 1e-5);  // Eckart-Young: the error is the tail
  EXPECT_NEAR(r.stats["reconstruction_error"]["max"].get<double>(), tail, 1e-5);
  EXPECT_NEAR(r.stats["reconstruction_error"]["mean"].get<double>(), tail, 1e-5);
  // Balanced split: B'^T B' = A'A'^T (both R^T S_r R).
  at::Tensor A = mat(r.next[0]), B = mat(r.next[1]);
  EXPECT_LT(fro(at::mm(B.t(), B) - at::mm(A, A.t())) / fro(at::mm(A, A.t())), 1e-5);

  // fedavg multiplies mean(B) by mean(A): it misses the cross terms. Its product is rank r
  // too, so Eckart-Young says it cannot be closer to M; here it is clearly farther.
  auto f = aggregate(mode("fedavg"), input(g, ds, w), nullptr);
  const double fedavg_err = fro(M - product(f.next)) / fro(M);
  EXPECT_GT(fedavg_err, tail + 0.01) << "fedavg " << fedavg_err << " vs exact " << tail;
  EXPECT_GT(fro(product(f.next) - got) / fro(M), 0.05);
}

INSTANTIATE_TEST_SUITE_P(Paths, ExactTwoWorkers,
                         ::testing::Values(ExactCase{2, 2, 10, 12}, ExactCase{3, 3, 6, 8}, ExactCase{3, 3, 8, 6}),
                         [](const auto& i) {
                           const auto& c = i.param;
                           return std::string(c.workers * c.r < std::min(c.in, c.out) ? "LowRank" : "Dense") +
                                  (c.in > c.out ? "Wide" : "Tall");
                         });

TEST(Exact, AveragesTensorsOutsideLoraPairs) {
  std::mt19937 gen(4);
  auto g = module(2, 5, 6, gen);
  g.push_back({"base_model.model.lm_head.bias", {3}, {1, 1, 1}});
  auto d1 = module(2, 5, 6, gen, 0.1f), d2 = module(2, 5, 6, gen, 0.1f);
  d1.push_back({"base_model.model.lm_head.bias", {3}, {1, 2, 3}});
  d2.push_back({"base_model.model.lm_head.bias", {3}, {3, 2, 1}});
  auto r = aggregate(mode("exact"), input(g, {d1, d2}, {1, 3}), nullptr);
  // (1 * (1,2,3) + 3 * (3,2,1)) / 4 = (2.5, 2, 1.5)
  EXPECT_FLOAT_EQ(r.next[2].data[0], 3.5f);
  EXPECT_FLOAT_EQ(r.next[2].data[1], 3.0f);
  EXPECT_FLOAT_EQ(r.next[2].data[2], 2.5f);
}

TEST(Nesterov, TwoStepsMatchTheHandDerivedSequence) {
  // lr 0.5, mu 0.9. Step 1: d1 = (1, -2): m1 = d1, update = 0.5 (d1 + 0.9 m1) = (0.95, -1.9).
  // Step 2: d2 = (0.5, 1): m2 = 0.9 m1 + d2 = (1.4, -0.8), update = 0.5 (d2 + 0.9 m2) = (0.88, 0.14).
  auto cfg = mode("fedavg", 0.5, 0.9);
  OuterState st;
  std::vector<Tensor> g{{"w", {2}, {0, 0}}};
  std::vector<std::vector<Tensor>> d1{{{"w", {2}, {1, -2}}}}, d2{{{"w", {2}, {0.5f, 1}}}};
  auto r1 = aggregate(cfg, input(g, d1), &st);
  EXPECT_NEAR(r1.next[0].data[0], 0.95, 1e-6);
  EXPECT_NEAR(r1.next[0].data[1], -1.9, 1e-6);
  EXPECT_EQ(st.steps, 1);
  auto r2 = aggregate(cfg, input(r1.next, d2), &st);
  EXPECT_NEAR(r2.next[0].data[0], 0.95 + 0.88, 1e-6);
  EXPECT_NEAR(r2.next[0].data[1], -1.9 + 0.14, 1e-6);
  EXPECT_NEAR(st.momentum[0].data[0], 1.4, 1e-6);
  EXPECT_NEAR(st.momentum[0].data[1], -0.8, 1e-6);
  EXPECT_EQ(r2.stats["outer_steps"], 2);
  EXPECT_NEAR(r2.stats["momentum_norm"].get<double>(), std::sqrt(1.4 * 1.4 + 0.8 * 0.8), 1e-6);
  EXPECT_NEAR(r2.stats["delta_norm"].get<double>(), std::sqrt(0.88 * 0.88 + 0.14 * 0.14), 1e-6);
}

TEST(Nesterov, StateMustMatchTheAdapter) {
  OuterState st;
  st.momentum = {{"other", {2}, {0, 0}}};
  std::vector<Tensor> g{{"w", {2}, {0, 0}}};
  std::vector<std::vector<Tensor>> d{{{"w", {2}, {1, 1}}}};
  EXPECT_THROW(aggregate(mode("fedavg", 1, 0.9), input(g, d), &st), UserError);
}

TEST(OuterState, RoundTripAndCorruption) {
  OuterState s;
  s.steps = 7;
  s.momentum = {{kA, {2, 3}, {1, -2, 3.5f, 0, 1e-30f, -0.0f}}, {kB, {1}, {42}}};
  std::string bytes = protocol::encode_outer_state(s);
  auto back = protocol::decode_outer_state(bytes, "state");
  ASSERT_TRUE(back) << back.status().to_string();
  EXPECT_EQ(back->steps, 7);
  EXPECT_TRUE(bit_equal(back->momentum, s.momentum));
  EXPECT_EQ(back->momentum[0].shape, (std::vector<int64_t>{2, 3}));
  auto cut = protocol::decode_outer_state(bytes.substr(0, bytes.size() - 3), "state");
  EXPECT_FALSE(cut);
  EXPECT_EQ(cut.status().code(), StatusCode::kCorrupt);
  // A plain adapter is not a state.
  auto adapter = protocol::decode_outer_state(protocol::encode_adapter(s.momentum), "adapter");
  ASSERT_FALSE(adapter);
  EXPECT_NE(adapter.status().message().find("not an outer optimizer state"), std::string::npos);
}

// Six versions straight vs. three, serialize + decode the state, three more: bit-identical.
class NesterovRestart : public ::testing::TestWithParam<std::string> {};

TEST_P(NesterovRestart, IsBitIdentical) {
  auto cfg = mode(GetParam(), 0.7, 0.9);
  std::mt19937 gen(5);
  auto g0 = module(3, 8, 9, gen);
  std::vector<std::vector<std::vector<Tensor>>> rounds;
  for (int v = 0; v < 6; ++v)
    rounds.push_back({module(3, 8, 9, gen, 0.1f), module(3, 8, 9, gen, 0.1f), module(3, 8, 9, gen, 0.1f)});
  const std::vector<double> w{1, 2, 3};

  OuterState straight;
  auto g = g0;
  for (auto& ds : rounds) g = aggregate(cfg, input(g, ds, w), &straight).next;

  OuterState first;
  auto h = g0;
  for (int v = 0; v < 3; ++v) h = aggregate(cfg, input(h, rounds[v], w), &first).next;
  OuterState resumed = protocol::decode_outer_state(protocol::encode_outer_state(first), "state").value();
  auto h2 = protocol::decode_adapter(protocol::encode_adapter(h), "adapter").value();  // as the bucket returns it
  for (int v = 3; v < 6; ++v) h2 = aggregate(cfg, input(h2, rounds[v], w), &resumed).next;

  EXPECT_TRUE(bit_equal(g, h2));
  EXPECT_TRUE(bit_equal(straight.momentum, resumed.momentum));
  EXPECT_EQ(resumed.steps, 6);
  // And the momentum matters: a restart that forgot it would land elsewhere.
  OuterState fresh;
  auto lost = h;
  for (int v = 3; v < 6; ++v) lost = aggregate(cfg, input(lost, rounds[v], w), &fresh).next;
  EXPECT_FALSE(bit_equal(g, lost));
}

INSTANTIATE_TEST_SUITE_P(Modes, NesterovRestart, ::testing::Values("fedavg", "exact", "median"));

TEST(Robust, HandExamples) {
  std::vector<Tensor> g{{"w", {1}, {0}}};
  auto one = [](float x) { return std::vector<Tensor>{{"w", {1}, {x}}}; };
  auto five = std::vector<std::vector<Tensor>>{one(4), one(100), one(1), one(3), one(2)};
  auto cfg = mode("trimmed_mean");  // 0.2 x 5: one dropped at each end -> mean(2, 3, 4)
  EXPECT_FLOAT_EQ(aggregate(cfg, input(g, five), nullptr).next[0].data[0], 3.0f);
  EXPECT_EQ(aggregate(cfg, input(g, five), nullptr).stats["trimmed_per_side"], 1);
  EXPECT_FLOAT_EQ(aggregate(mode("median"), input(g, five), nullptr).next[0].data[0], 3.0f);
  auto four = std::vector<std::vector<Tensor>>{one(10), one(1), one(3), one(2)};
  EXPECT_FLOAT_EQ(aggregate(mode("median"), input(g, four), nullptr).next[0].data[0], 2.5f);
  cfg.trim_ratio = 0.25;  // 0.25 x 4 = 1 per side -> mean(2, 3)
  EXPECT_FLOAT_EQ(aggregate(cfg, input(g, four), nullptr).next[0].data[0], 2.5f);
  cfg.trim_ratio = 0.1;  // 0.1 x 4 = 0.4 -> none dropped: the plain mean 4
  EXPECT_FLOAT_EQ(aggregate(cfg, input(g, four), nullptr).next[0].data[0], 4.0f);
}

// Against a plain sort of each element's values: odd, even and power-of-two counts, a
// tensor length that is not a multiple of the block.
TEST(Robust, MatchesSortingEachElement) {
  std::mt19937 gen(9);
  for (size_t n : {1, 2, 7, 13, 16}) {
    const size_t len = 150;
    std::vector<Tensor> g{{"w", {static_cast<int64_t>(len)}, std::vector<float>(len, 0)}};
    std::vector<std::vector<Tensor>> ds;
    for (size_t u = 0; u < n; ++u) ds.push_back({{"w", {static_cast<int64_t>(len)}, randn(len, gen)}});
    auto cfg = mode("trimmed_mean");
    cfg.trim_ratio = 0.3;
    auto t = aggregate(cfg, input(g, ds), nullptr).next[0].data;
    auto md = aggregate(mode("median"), input(g, ds), nullptr).next[0].data;
    const size_t k = static_cast<size_t>(0.3 * n);
    for (size_t e = 0; e < len; ++e) {
      std::vector<double> v;
      for (auto& d : ds) v.push_back(d[0].data[e]);
      std::sort(v.begin(), v.end());
      double tm = 0;
      for (size_t j = k; j < n - k; ++j) tm += v[j] / static_cast<double>(n - 2 * k);
      ASSERT_NEAR(t[e], tm, 1e-6) << "n " << n << " element " << e;
      ASSERT_FLOAT_EQ(md[e], static_cast<float>(n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2])))
          << "n " << n << " element " << e;
    }
  }
}

// Four honest workers send mu + small noise, the fifth 100 x (resp. -100 x) its delta, with a
// huge claimed weight. The robust rules stay near the honest mean; fedavg does not.
class Robust : public ::testing::TestWithParam<float> {};

TEST_P(Robust, OneAttackerOfFive) {
  const float attack = GetParam();
  std::mt19937 gen(6);
  const size_t n = 2000;
  std::vector<Tensor> g{{"w", {static_cast<int64_t>(n)}, std::vector<float>(n, 0)}};
  auto mu = randn(n, gen);
  std::vector<std::vector<Tensor>> ds;
  std::vector<double> honest(n, 0);
  for (int i = 0; i < 5; ++i) {
    auto noise = randn(n, gen, 0.05f);
    std::vector<float> d(n);
    for (size_t k = 0; k < n; ++k) d[k] = mu[k] + noise[k];
    if (i < 4)
      for (size_t k = 0; k < n; ++k) honest[k] += d[k] / 4;
    else
      for (auto& x : d) x *= attack;
    ds.push_back({{"w", {static_cast<int64_t>(n)}, d}});
  }
  auto dist = [&](const std::vector<Tensor>& next) {
    double e = 0, h = 0;
    for (size_t k = 0; k < n; ++k) e += std::pow(next[0].data[k] - honest[k], 2), h += honest[k] * honest[k];
    return std::sqrt(e / h);
  };
  const std::vector<double> w{1, 1, 1, 1, 1000};
  double trimmed = dist(aggregate(mode("trimmed_mean"), input(g, ds, w), nullptr).next);
  double med = dist(aggregate(mode("median"), input(g, ds, w), nullptr).next);
  double avg = dist(aggregate(mode("fedavg"), input(g, ds, {1, 1, 1, 1, 1}), nullptr).next);
  EXPECT_LT(trimmed, 0.06) << "relative distance to the honest mean";
  EXPECT_LT(med, 0.06);
  EXPECT_GT(avg, 10.0);  // (4 mu + 100 mu) / 5 ~ 20 mu away even with equal weights
}

INSTANTIATE_TEST_SUITE_P(Attacks, Robust, ::testing::Values(100.0f, -100.0f), [](const auto& i) {
  return i.param > 0 ? std::string("Scaled") : std::string("SignFlipped");
});

// ---- The real Proxy on a directory bucket ---------------------------------------------

namespace {

using test::make_run;
using test::TempDir;
using test::upload;

RunConfig proxy_config() {
  RunConfig c;
  c.aggregation.mode = AggregationMode::fedavg;
  c.aggregation.server_learning_rate = 0.7;
  c.aggregation.server_momentum = 0.9;
  c.proxy.keep_versions = 2;
  return c;
}

}  // namespace

// What rounding to bf16 gives, by ATen's conversion (an implementation independent of ours).
std::vector<Tensor> aten_bf16(std::vector<Tensor> ts) {
  for (auto& t : ts) {
    auto x = at::from_blob(t.data.data(), {static_cast<int64_t>(t.data.size())}, at::kFloat)
                 .to(at::kBFloat16)
                 .to(at::kFloat);
    std::memcpy(t.data.data(), x.data_ptr<float>(), t.data.size() * sizeof(float));
  }
  return ts;
}

class ProxyRestart : public ::testing::TestWithParam<std::string> {};

// Six versions with server momentum through one proxy, and through a proxy stopped after v3
// and a new one that resumes from the bucket: the same bytes at every version, equal to
// aggregate() applied by hand; the state objects are named by the manifests and collected
// with old payloads. With bf16 versions the payloads are the hand-computed float32 sequence
// rounded (as ATen rounds), and the proxy's float32 master copy, kept in the state object,
// is that sequence itself: rounding never accumulates, also across the restart.
TEST_P(ProxyRestart, ContinuesExactly) {
  const bool bf16 = GetParam() == "bfloat16";
  auto config = [&] {
    RunConfig c = proxy_config();
    c.aggregation.publish_dtype = kPublishDtypes.parse(GetParam()).value();
    return c;
  };
  std::mt19937 gen(7);
  auto v0 = module(4, 16, 16, gen, 0.1f);
  std::vector<std::vector<std::vector<Tensor>>> rounds;
  for (int v = 0; v < 6; ++v) rounds.push_back({module(4, 16, 16, gen, 0.01f), module(4, 16, 16, gen, 0.01f)});
  const std::vector<double> samples{64, 192};

  // By hand: what the six versions must be (weights = samples, staleness 0). A bf16 run
  // starts from version 0 as published, rounded.
  std::vector<std::vector<Tensor>> want{bf16 ? aten_bf16(v0) : v0};
  OuterState st;
  for (auto& ds : rounds) want.push_back(aggregate(config().aggregation, input(want.back(), ds, samples), &st).next);

  auto run = [&](const std::string& dir, int restart_after) {
    auto s = protocol::open_bucket(dir);
    make_run(*s, config(), v0);
    // What writers killed mid-put leave: GC removes temporary files after an hour, not before.
    std::filesystem::create_directories(dir + "/updates/wa");
    for (const char* t : {"/updates/wa/.brl-tmp-1-1-old", "/updates/wa/.brl-tmp-1-2-new"})
      std::ofstream(dir + t) << "partial";
    std::filesystem::last_write_time(dir + "/updates/wa/.brl-tmp-1-1-old",
                                     std::filesystem::file_time_type::clock::now() - std::chrono::hours(2));
    auto proxy = std::make_unique<Proxy>(test::proxy_options(dir, "p1"));
    for (int v = 0; v < 6; ++v) {
      if (v == restart_after) proxy = std::make_unique<Proxy>(test::proxy_options(dir, "p2"));
      upload(*s, "wa", 2 * v, v, 64, rounds[v][0]);
      upload(*s, "wb", 2 * v + 1, v, 192, rounds[v][1]);
      EXPECT_TRUE(proxy->poll_once()) << "version " << v + 1;
      EXPECT_EQ(proxy->version(), v + 1);
    }
  };
  TempDir a, b;
  run(a.str(), -1);
  run(b.str(), 3);

  store::LocalStore sa(a.str()), sb(b.str());
  for (int64_t v = 1; v <= 6; ++v) {
    auto ma = protocol::read_manifest(sa, v).value(), mb = protocol::read_manifest(sb, v).value();
    EXPECT_EQ(ma.payload_sha256, mb.payload_sha256) << "version " << v;
    EXPECT_EQ(ma.outer_state->sha256, mb.outer_state->sha256) << "version " << v;
    EXPECT_EQ(mb.stats["outer_steps"], v);
    EXPECT_EQ(mb.stats["mode"], "fedavg");
    EXPECT_EQ(mb.payload_dtype, GetParam());
    EXPECT_EQ(mb.updates.size(), 2u);
    if (v < 5) continue;  // older payloads are collected (keep_versions 2, GC at v5)
    auto bytes = protocol::read_payload(sb, mb).value();
    auto file = st::SafetensorsFile::from_buffer(bytes.data(), bytes.size(), "v");
    EXPECT_EQ(file.get(kA).dtype, bf16 ? st::DType::BF16 : st::DType::F32);
    // 2 (bf16) or 4 bytes per element plus the header.
    EXPECT_LT(bytes.size(), (bf16 ? 2u : 4u) * (4 * 16 + 16 * 4) + 400u) << "version " << v;
    auto got = protocol::decode_adapter(bytes, "v").value();
    EXPECT_TRUE(bit_equal(got, bf16 ? aten_bf16(want[v]) : want[v])) << "version " << v;
    auto state = protocol::decode_outer_state(sb.get(mb.outer_state->key).value(), "state").value();
    EXPECT_TRUE(bf16 ? bit_equal(state.master, want[v]) : state.master.empty()) << "version " << v;
  }
  EXPECT_TRUE(!bf16 || !bit_equal(aten_bf16(want[6]), want[6]));  // the master is not the payload
  EXPECT_EQ(protocol::read_manifest(sb, 4).value().proxy, "p2");
  for (auto& d : {a.str(), b.str()}) {
    EXPECT_FALSE(std::filesystem::exists(d + "/updates/wa/.brl-tmp-1-1-old")) << d;
    EXPECT_TRUE(std::filesystem::exists(d + "/updates/wa/.brl-tmp-1-2-new")) << d;
    store::LocalStore sd(d);
    auto rep = protocol::verify_run(sd);
    EXPECT_TRUE(rep.ok()) << rep.summary();
  }
  // GC at v5 kept versions >= 4: the state of v1..v3 is gone, that of v4..v6 is there.
  auto m3 = protocol::read_manifest(sb, 3).value(), m5 = protocol::read_manifest(sb, 5).value();
  EXPECT_TRUE(sb.get(m3.outer_state->key).status().is_not_found());
  auto body = sb.get(m5.outer_state->key);
  ASSERT_TRUE(body);
  EXPECT_EQ(sha256_hex(*body), m5.outer_state->sha256);
  EXPECT_EQ(protocol::decode_outer_state(*body, "v5").value().steps, 5);
}

INSTANTIATE_TEST_SUITE_P(PublishDtype, ProxyRestart, ::testing::Values("float32", "bfloat16"), [](const auto& i) {
  return i.param == "float32" ? std::string("Float32") : std::string("Bfloat16");
});

// A manifest naming a state that is not there: the proxy refuses to start rather than
// restart the momentum from zero.
TEST(ProxyRestartState, MissingStateIsAnError) {
  TempDir a;
  std::mt19937 gen(8);
  auto v0 = module(2, 4, 4, gen);
  const std::string dir = a.str();
  {
    auto s = protocol::open_bucket(dir);
    make_run(*s, proxy_config(), v0);
    Proxy p(test::proxy_options(dir, "p1"));
    upload(*s, "wa", 0, 0, 10, module(2, 4, 4, gen, 0.1f));
    ASSERT_TRUE(p.poll_once());
  }
  store::LocalStore s(dir);
  auto m = protocol::read_manifest(s, 1).value();
  ASSERT_TRUE(s.remove(m.outer_state->key).is_ok());
  EXPECT_ANY_THROW(Proxy(test::proxy_options(dir, "p2")));
}

// Garbage collection that cannot read a manifest counts the failure and leaves the version for
// the next pass; it used to move past it, so that version's payload stayed in the bucket for
// good. Manifest v2 is unreadable at the collection of v5 and readable again at that of v10.
TEST(ProxyGc, AFailedManifestReadIsRetriedNotSkipped) {
  TempDir a;
  std::mt19937 gen(9);
  auto v0 = module(2, 4, 4, gen);
  const std::string dir = a.str();
  auto s = protocol::open_bucket(dir);
  make_run(*s, proxy_config(), v0);  // keep_versions 2: collections at v5 and v10
  Proxy p(test::proxy_options(dir, "p1"));
  store::LocalStore ls(dir);
  std::string manifest2, payload2;
  for (int v = 0; v < 10; ++v) {
    if (v == 4) {  // before the poll that publishes v5 and collects
      manifest2 = ls.get(protocol::manifest_key(2)).value();
      payload2 = protocol::read_manifest(ls, 2).value().payload_key;
      ASSERT_TRUE(ls.put(protocol::manifest_key(2), "{torn").is_ok());
    }
    upload(*s, "wa", v, v, 10, module(2, 4, 4, gen, 0.1f));
    ASSERT_TRUE(p.poll_once()) << "version " << v + 1;
    if (v == 4) {
      EXPECT_EQ(p.counters().gc_failures, 1);
      EXPECT_TRUE(ls.head(payload2).is_ok()) << "v2 was not collected";
      EXPECT_TRUE(ls.get(protocol::read_manifest(ls, 3).value().payload_key).status().is_not_found()) << "v3 was";
      ASSERT_TRUE(ls.put(protocol::manifest_key(2), manifest2).is_ok());
    }
  }
  EXPECT_EQ(p.counters().gc_failures, 1);
  EXPECT_TRUE(ls.get(payload2).status().is_not_found()) << "v2 collected at the next pass";
  auto rep = protocol::verify_run(ls);
  EXPECT_TRUE(rep.ok()) << rep.summary();
}

// The staleness discount scales an update's own step, in every mode (hand-computed): a stale
// update folded alone moves the adapter by s times its delta. It used to be a weight only, which
// the division by the total weight cancels when the update is alone, and which the robust modes
// ignored.
TEST(StalenessDiscount, ScalesTheStepInEveryMode) {
  std::vector<Tensor> g{{"w", {2}, {1, 2}}};
  std::vector<std::vector<Tensor>> one{{{"w", {2}, {4, -2}}}};
  AggregateInput in = input(g, one);
  in.discounts = {0.5};
  auto r = aggregate(mode("fedavg"), in, nullptr);
  EXPECT_FLOAT_EQ(r.next[0].data[0], 3.0f);  // 1 + 0.5 * 4
  EXPECT_FLOAT_EQ(r.next[0].data[1], 1.0f);  // 2 + 0.5 * -2
  EXPECT_DOUBLE_EQ(r.stats["discount"].get<double>(), 0.5);

  // fedavg, weights 1 and 3, discounts 1 and 0.5: (1 * (2, 0) + 3 * 0.5 * (0, 4)) / 4 = (0.5, 1.5).
  std::vector<std::vector<Tensor>> two{{{"w", {2}, {2, 0}}}, {{"w", {2}, {0, 4}}}};
  in = input(g, two, {1, 3});
  in.discounts = {1, 0.5};
  r = aggregate(mode("fedavg"), in, nullptr);
  EXPECT_FLOAT_EQ(r.next[0].data[0], 1.5f);
  EXPECT_FLOAT_EQ(r.next[0].data[1], 3.5f);
  EXPECT_DOUBLE_EQ(r.stats["discount"].get<double>(), (1 + 3 * 0.5) / 4);

  // median of the discounted deltas: (1, 2, 10) * (1, 0.5, 0.25) = (1, 1, 2.5) -> 1; undiscounted 2.
  std::vector<std::vector<Tensor>> three{{{"w", {1}, {1}}}, {{"w", {1}, {2}}}, {{"w", {1}, {10}}}};
  std::vector<Tensor> g1{{"w", {1}, {0}}};
  in = input(g1, three);
  in.discounts = {1, 0.5, 0.25};
  EXPECT_FLOAT_EQ(aggregate(mode("median"), in, nullptr).next[0].data[0], 1.0f);
  // trimmed mean, one dropped at each end of (1, 1, 2.5, 0.5 * 8 = 4): (1 + 2.5) / 2.
  std::vector<std::vector<Tensor>> four{{{"w", {1}, {1}}}, {{"w", {1}, {2}}}, {{"w", {1}, {10}}}, {{"w", {1}, {8}}}};
  in = input(g1, four);
  in.discounts = {1, 0.5, 0.25, 0.5};
  AggregationConfig tm = mode("trimmed_mean");
  tm.trim_ratio = 0.25;
  EXPECT_FLOAT_EQ(aggregate(tm, in, nullptr).next[0].data[0], 1.75f);

  for (double bad : {0.0, 1.5, -1.0}) {
    in = input(g, one);
    in.discounts = {bad};
    EXPECT_THROW(aggregate(mode("fedavg"), in, nullptr), UserError) << bad;
  }
}

// exact: M = BA + s ((B + dB)(A + dA) - BA). From PEFT's start B = 0 that is s dB (A + dA), of
// rank <= r, so the fold reproduces it (up to float rounding).
TEST(StalenessDiscount, ExactScalesTheProductStep) {
  std::mt19937 gen(12);
  auto g = module(4, 16, 12, gen, 0.3f);
  std::fill(g[1].data.begin(), g[1].data.end(), 0.0f);  // B = 0
  std::vector<std::vector<Tensor>> one{module(4, 16, 12, gen, 0.1f)};
  AggregateInput in = input(g, one);
  in.discounts = {0.25};
  auto r = aggregate(mode("exact"), in, nullptr);
  at::Tensor want = 0.25 * product(g, &one[0]);  // BA = 0
  at::Tensor got = product(r.next);
  EXPECT_LT(fro(got - want) / fro(want), 1e-5);
  // With B != 0 the discounted share stays at BA: M = 0.75 BA + 0.25 (B + dB)(A + dA), which
  // has rank <= 2r; with rank 4 of 12 x 16 modules the fold keeps its best rank-r part, so
  // compare against that.
  auto g2 = module(4, 16, 12, gen, 0.3f);
  in = input(g2, one);
  in.discounts = {0.25};
  r = aggregate(mode("exact"), in, nullptr);
  at::Tensor M = 0.75 * product(g2) + 0.25 * product(g2, &one[0]);
  auto [U, S, Vh] = at::linalg_svd(M, false);
  at::Tensor best = at::mm(U.slice(1, 0, 4) * S.slice(0, 0, 4).unsqueeze(0), Vh.slice(0, 0, 4));
  EXPECT_LT(fro(product(r.next) - best) / fro(best), 1e-5);
}

// ---- Gauge fixing: the robust modes and the norm see products, not bases ------------------

namespace {

// A well-conditioned random r x r basis change G (I + noise) and its inverse, as doubles.
std::pair<at::Tensor, at::Tensor> basis_change(int64_t r, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor G = at::eye(r, at::kDouble) * 1.5 + 0.4 * at::randn({r, r}, gen, at::TensorOptions().dtype(at::kDouble));
  return {G, at::linalg_inv(G)};
}

std::vector<float> flat(const at::Tensor& t) {
  at::Tensor c = t.to(at::kFloat).contiguous();
  return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

// The delta of a worker whose adapter (B + dB, A + dA) is rewritten as ((B + dB) G, G^-1 (A + dA)).
std::vector<Tensor> rebased(const std::vector<Tensor>& g, const std::vector<Tensor>& d, const at::Tensor& G,
                            const at::Tensor& Gi) {
  at::Tensor Au = mat(g[0]) + mat(d[0]), Bu = mat(g[1]) + mat(d[1]);
  return {{kA, g[0].shape, flat(at::mm(Gi, Au) - mat(g[0]))}, {kB, g[1].shape, flat(at::mm(Bu, G) - mat(g[1]))}};
}

// A global module and five honest deltas of it: common direction + noise, both factors moved.
struct Honest {
  std::vector<Tensor> g;
  std::vector<std::vector<Tensor>> ds;
};
Honest honest_module(int64_t r, int64_t in, int64_t out, uint64_t seed, size_t n = 5) {
  std::mt19937 gen(static_cast<unsigned>(seed));
  Honest h{module(r, in, out, gen, 1.0f), {}};
  auto common = module(r, in, out, gen, 0.05f);
  for (size_t u = 0; u < n; ++u) {
    auto noise = module(r, in, out, gen, 0.01f);
    for (size_t t = 0; t < 2; ++t)
      for (size_t k = 0; k < noise[t].data.size(); ++k) noise[t].data[k] += common[t].data[k];
    h.ds.push_back(noise);
  }
  return h;
}

}  // namespace

// The test: a basis change G applied to one honest worker's factors changes nothing in
// any robust mode (nor in exact, which works on products); element-wise statistics on the raw
// factors would have moved.
TEST(Gauge, BasisChangeOfOneWorkerChangesNothingInRobustModes) {
  Honest h = honest_module(4, 24, 20, 31);
  auto [G, Gi] = basis_change(4, 32);
  auto changed = h.ds;
  changed[2] = rebased(h.g, h.ds[2], G, Gi);
  // The rebased worker has the same product but other factors: raw statistics see a different update.
  EXPECT_LT(fro(product(h.g, &changed[2]) - product(h.g, &h.ds[2])) / fro(product(h.g, &h.ds[2])), 1e-5);
  EXPECT_GT(fro(mat(changed[2][0]) - mat(h.ds[2][0])), 0.3);
  for (const char* m : {"trimmed_mean", "median", "exact"}) {
    SCOPED_TRACE(m);
    auto a = aggregate(mode(m), input(h.g, h.ds), nullptr);
    auto b = aggregate(mode(m), input(h.g, changed), nullptr);
    for (size_t t = 0; t < 2; ++t) {
      double diff = fro(mat(a.next[t]) - mat(b.next[t])), step = fro(mat(a.next[t]) - mat(h.g[t]));
      EXPECT_LT(diff, 1e-4 * step) << a.next[t].name << ": step " << step;
    }
    if (std::string(m) != "exact") {
      EXPECT_EQ(b.stats["gauge"]["modules"], 1);
      EXPECT_EQ(b.stats["gauge"]["unfixable_updates"], 0);
    }
  }
  // What the raw factors' median would have done: one of the five A columns moved a lot.
  auto raw_median = [&](const std::vector<std::vector<Tensor>>& ds) {
    std::vector<float> out;
    for (size_t k = 0; k < ds[0][0].data.size(); ++k) {
      std::vector<float> v;
      for (auto& d : ds) v.push_back(d[0].data[k]);
      std::nth_element(v.begin(), v.begin() + 2, v.end());
      out.push_back(v[2]);
    }
    return out;
  };
  auto r0 = raw_median(h.ds), r1 = raw_median(changed);
  double moved = 0;
  for (size_t k = 0; k < r0.size(); ++k) moved = std::max(moved, static_cast<double>(std::abs(r0[k] - r1[k])));
  EXPECT_GT(moved, 1e-3) << "the basis change must matter to raw factor statistics, else this test proves nothing";
}

// One update through the median is the update itself, gauge-fixed: the same product (the
// adapter it makes acts the same), and its A agrees with the global A on A's row space.
TEST(Gauge, FixedPairKeepsTheProductAndTheRowSpace) {
  Honest h = honest_module(3, 16, 10, 41, 1);
  auto r = aggregate(mode("median"), input(h.g, h.ds), nullptr);
  at::Tensor want = product(h.g, &h.ds[0]);
  EXPECT_LT(fro(product(r.next) - want) / fro(want), 1e-5);
  at::Tensor A = mat(h.g[0]), pinv = at::mm(A.t(), at::linalg_inv(at::mm(A, A.t())));
  EXPECT_LT(fro(at::mm(mat(r.next[0]), pinv) - at::eye(3, at::kDouble)), 1e-5);
}

// update_norm: the same for a rebased worker; the norm as sent when dA = 0 (K = I) or when A
// is rank-deficient (nothing to fix against); raw norms differ under the basis change.
TEST(Gauge, UpdateNormIsBasisIndependent) {
  Honest h = honest_module(4, 24, 20, 51, 1);
  auto [G, Gi] = basis_change(4, 52);
  auto d = h.ds[0], c = rebased(h.g, d, G, Gi);
  auto raw = [](const std::vector<Tensor>& x) {
    return std::sqrt(std::pow(fro(mat(x[0])), 2) + std::pow(fro(mat(x[1])), 2));
  };
  EXPECT_GT(std::abs(raw(c) - raw(d)), 0.1 * raw(d));
  const auto med = mode("median");
  EXPECT_NEAR(update_norm(med, h.g, c), update_norm(med, h.g, d), 1e-5 * update_norm(med, h.g, d));
  for (const char* m : {"trimmed_mean", "exact"})
    EXPECT_DOUBLE_EQ(update_norm(mode(m), h.g, c), update_norm(med, h.g, c)) << m;
  auto only_b = d;
  std::fill(only_b[0].data.begin(), only_b[0].data.end(), 0.0f);
  EXPECT_NEAR(update_norm(med, h.g, only_b), raw(only_b), 1e-6 * raw(only_b));
  auto flat_a = h.g;
  std::fill(flat_a[0].data.begin(), flat_a[0].data.end(), 0.5f);  // rank 1 < r
  EXPECT_NEAR(update_norm(med, flat_a, d), raw(d), 1e-6 * raw(d));
  auto s = aggregate(mode("median"), input(flat_a, h.ds), nullptr).stats["gauge"];
  EXPECT_EQ(s["unfixable_modules"], 1);
}

// Four honest workers and one that sends 100 x (resp. -100 x) its delta, on a LoRA module: the
// robust modes' product stays near the honest workers' mean product, fedavg's does not.
TEST_P(Robust, OneAttackerOfFiveOnALoraModule) {
  const float attack = GetParam();
  Honest h = honest_module(4, 24, 20, 61);
  at::Tensor honest = at::zeros({20, 24}, at::kDouble);
  for (size_t u = 0; u < 4; ++u) honest += product(h.g, &h.ds[u]) / 4;
  for (auto& t : h.ds[4])
    for (auto& x : t.data) x *= attack;
  auto dist = [&](const std::vector<Tensor>& next) { return fro(product(next) - honest) / fro(honest - product(h.g)); };
  const std::vector<double> w{1, 1, 1, 1, 1000};
  EXPECT_LT(dist(aggregate(mode("trimmed_mean"), input(h.g, h.ds, w), nullptr).next), 0.1);
  EXPECT_LT(dist(aggregate(mode("median"), input(h.g, h.ds, w), nullptr).next), 0.1);
  EXPECT_GT(dist(aggregate(mode("fedavg"), input(h.g, h.ds), nullptr).next), 10.0);
}

// Sparse (topk) updates: an element counts only the updates that sent it (a zero was not
// sent); dense updates' zeros are values. Weights 1 and 3, the first discounted by 0.5:
//   element 0: both sent      -> (1 * 0.5 * 2 + 3 * 4) / 4 = 3.25
//   element 1: only the first  -> 0.5 * 8 = 4 (dense: 1 * 0.5 * 8 / 4 = 1)
//   element 2: only the second -> 6 (dense: 3 * 6 / 4 = 4.5)
//   element 3: neither         -> 0
TEST(Fedavg, SparseUpdatesCountOnlyWhereTheySent) {
  std::vector<Tensor> g{{"w", {4}, {0, 0, 0, 0}}};
  std::vector<std::vector<Tensor>> ds{{{"w", {4}, {2, 8, 0, 0}}}, {{"w", {4}, {4, 0, 6, 0}}}};
  AggregateInput in = input(g, ds, {1, 3});
  in.discounts = {0.5, 1};
  in.sparse = {true, true};
  auto r = aggregate(mode("fedavg"), in, nullptr).next[0].data;
  EXPECT_FLOAT_EQ(r[0], 3.25f);
  EXPECT_FLOAT_EQ(r[1], 4.0f);
  EXPECT_FLOAT_EQ(r[2], 6.0f);
  EXPECT_FLOAT_EQ(r[3], 0.0f);
  in.sparse = {};  // dense: zeros are values
  r = aggregate(mode("fedavg"), in, nullptr).next[0].data;
  EXPECT_FLOAT_EQ(r[1], 1.0f);
  EXPECT_FLOAT_EQ(r[2], 4.5f);
  in.sparse = {false, true};  // mixed: the dense update's 0 at element 2 counts, its weight too
  r = aggregate(mode("fedavg"), in, nullptr).next[0].data;
  EXPECT_FLOAT_EQ(r[1], 4.0f);  // (1 * 0.5 * 8) / 1: the sparse one did not send it
  EXPECT_FLOAT_EQ(r[2], 4.5f);  // (3 * 6) / (1 + 3): the dense one's 0 is a value
  in.sparse = {true};
  EXPECT_THROW(aggregate(mode("fedavg"), in, nullptr), UserError);
}

// fedavg judges factors as sent, because it folds them as sent: a worker that rescales its
// adapter to ((B + dB) / c, c (A + dA)) keeps its product and its gauge-fixed norm, but its
// raw delta is large and fedavg's mean of factors then moves the product far from every
// worker's. The median folds the gauge-fixed pair and is not moved.
TEST(Gauge, FedavgJudgesAndFoldsTheFactorsAsSent) {
  Honest h = honest_module(4, 24, 20, 71, 2);
  const double c = 1000;
  auto G = at::eye(4, at::kDouble) / c, Gi = at::eye(4, at::kDouble) * c;
  auto scaled = rebased(h.g, h.ds[1], G, Gi);
  auto raw = [](const std::vector<Tensor>& x) {
    return std::sqrt(std::pow(fro(mat(x[0])), 2) + std::pow(fro(mat(x[1])), 2));
  };
  EXPECT_NEAR(update_norm(mode("median"), h.g, scaled), update_norm(mode("median"), h.g, h.ds[1]), 1e-3 * raw(h.ds[1]));
  EXPECT_NEAR(update_norm(mode("fedavg"), h.g, scaled), raw(scaled), 1e-6 * raw(scaled));
  EXPECT_GT(update_norm(mode("fedavg"), h.g, scaled), 100 * raw(h.ds[1]));
  std::vector<std::vector<Tensor>> honest{h.ds[0], h.ds[1]}, attacked{h.ds[0], scaled};
  auto moved = [&](const char* m) {
    at::Tensor a = product(aggregate(mode(m), input(h.g, honest), nullptr).next);
    at::Tensor b = product(aggregate(mode(m), input(h.g, attacked), nullptr).next);
    return fro(a - b) / fro(a - product(h.g));
  };
  EXPECT_GT(moved("fedavg"), 10.0);  // why fedavg must see the raw norm
  EXPECT_LT(moved("median"), 1e-3);
}
