// Update codecs: round-trip error within the per-block bounds derived from the quantizer's
// maths, the wire layout checked by hand, error feedback keeping the running sum on track
// (and drifting ~ sqrt(rounds) without it), hostile payloads -> error Status, size goal.
#include "codec/codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/rng.h"
#include "util/safetensors.h"

using namespace brl;
using codec::Kind;
using codec::Tensor;

namespace {

// Platform-stable Gaussian stream: splitmix64 counter + Box-Muller.
class Gauss {
 public:
  explicit Gauss(uint64_t seed) : seed_(seed) {}
  double uniform() { return (splitmix64(seed_ + (c_++) * 0x9e3779b97f4a7c15ULL) >> 11) * 0x1.0p-53; }
  double next() {
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * M_PI * u2);
  }
  std::vector<float> vec(size_t n, double sigma) {
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(sigma * next());
    return v;
  }

 private:
  uint64_t seed_, c_ = 0;
};

// prefix + i + suffix (spelled out: GCC 12 warns falsely on "literal" + std::to_string()).
std::string nm(const char* prefix, int i, const char* suffix = "") {
  std::string s = prefix;
  s += std::to_string(i);
  s += suffix;
  return s;
}

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

Tensor gauss_tensor(const std::string& name, std::vector<int64_t> shape, double sigma, uint64_t seed) {
  Gauss g(seed);
  return {name, shape, g.vec(numel(shape), sigma)};
}

const Kind kAll[] = {Kind::fp32, Kind::bf16, Kind::int8, Kind::int4};
const Kind kSparse[] = {Kind::topk_int2, Kind::topk_int4};
const Kind kEvery[] = {Kind::fp32, Kind::bf16, Kind::int8, Kind::int4, Kind::topk_int2, Kind::topk_int4};

codec::Options topk(Kind k, int chunk, double density, int level = 3) {
  codec::Options o{k, 64, level};
  o.topk_chunk = chunk;
  o.topk_density = density;
  return o;
}

// Float rounding on top of error_bound's exact-arithmetic figure: the scale fl(m / q) and the
// product fl(code * scale) each contribute at most 2^-24 of ~m; 4 ulps of m covers both.
double slack(double m) { return 4 * 0x1.0p-24 * m; }

// Max over elements of (|x - y| - allowed(x, block absmax)); <= 0 means within bounds.
// Also returns the largest error / bound ratio seen, to show the bound is nearly attained.
struct Check {
  double worst_excess = -1e300;
  double max_ratio = 0;
};
Check check_bounds(Kind k, int block, const std::vector<float>& x, const std::vector<float>& y) {
  Check c;
  for (size_t lo = 0; lo < x.size(); lo += block) {
    const size_t hi = std::min(x.size(), lo + block);
    double m = 0;
    for (size_t i = lo; i < hi; ++i) m = std::max(m, std::fabs(static_cast<double>(x[i])));
    for (size_t i = lo; i < hi; ++i) {
      const double err = std::fabs(static_cast<double>(x[i]) - y[i]);
      double bound;
      switch (k) {
        case Kind::fp32: bound = 0; break;
        case Kind::bf16: bound = std::fabs(x[i]) * codec::kBf16RelativeError; break;
        default: bound = codec::error_bound(k, m) + slack(m); break;
      }
      c.worst_excess = std::max(c.worst_excess, err - bound);
      if (k == Kind::int8 || k == Kind::int4)
        if (m > 0) c.max_ratio = std::max(c.max_ratio, err / codec::error_bound(k, m));
    }
  }
  return c;
}

std::vector<Tensor> decode_ok(const std::string& bytes) {
  auto r = codec::decode(bytes);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? std::move(r).value() : std::vector<Tensor>{};
}

// An odd assortment: scalars, empty tensors, sizes that are not multiples of any block,
// very different magnitudes, a zero tensor and a lone outlier.
std::vector<Tensor> assortment() {
  std::vector<Tensor> ts;
  ts.push_back(gauss_tensor("scalar", {}, 1.0, 1));
  ts.push_back({"empty", {0}, {}});
  ts.push_back({"empty2d", {3, 0}, {}});
  ts.push_back(gauss_tensor("one", {1}, 2.0, 2));
  ts.push_back(gauss_tensor("seven", {7}, 1e-3, 3));
  ts.push_back(gauss_tensor("block", {64}, 1.0, 4));
  ts.push_back(gauss_tensor("block_plus_one", {65}, 10.0, 5));
  ts.push_back(gauss_tensor("base_model.layers.0.self_attn.q_proj.lora_A", {3, 5, 7}, 0.02, 6));
  ts.push_back(gauss_tensor("wide", {130, 17}, 1e-4, 7));
  ts.push_back({"zeros", {33}, std::vector<float>(33, 0.0f)});
  Tensor outlier = gauss_tensor("outlier", {200}, 0.01, 8);
  outlier.data[77] = 50.0f;
  ts.push_back(outlier);
  return ts;
}

}  // namespace

TEST(Codec, ParseKindAndNames) {
  for (Kind k : kEvery) EXPECT_EQ(codec::parse_kind(codec::kind_name(k)), k);
  try {
    codec::parse_kind("int3");
    FAIL();
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("\"int3\""), std::string::npos) << m;
    EXPECT_NE(m.find("fp32, bf16, int8, int4, topk_int2, topk_int4"), std::string::npos) << m;
  }
}

TEST(Codec, OptionsAreValidated) {
  auto expect_bad = [](codec::Options o, const std::string& needle) {
    try {
      codec::encode({}, o);
      FAIL() << needle;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_bad({Kind::int8, 7, 3}, "block_size 7");
  expect_bad({Kind::int8, 4097, 3}, "block_size 4097");
  expect_bad({Kind::int4, 64, -1}, "zstd_level -1");
  expect_bad({Kind::int4, 64, 20}, "zstd_level 20");
  EXPECT_NO_THROW(codec::encode({}, {Kind::int4, 8, 0}));
  EXPECT_NO_THROW(codec::encode({}, {Kind::int4, 4096, 19}));
  expect_bad(topk(Kind::topk_int2, 15, 0.1), "topk_chunk 15");
  expect_bad(topk(Kind::topk_int2, 32769, 0.1), "topk_chunk 32769");
  expect_bad(topk(Kind::topk_int4, 4096, 0), "topk_density 0");
  expect_bad(topk(Kind::topk_int4, 4096, 1.5), "topk_density 1.5");
  EXPECT_NO_THROW(codec::encode({}, topk(Kind::topk_int2, 16, 1)));
  EXPECT_NO_THROW(codec::encode({}, topk(Kind::topk_int4, 32768, 1e-6)));
}

// Every codec, block sizes at both limits and an odd one, stored and compressed: names,
// shapes and order come back, and every element is within its block's bound.
TEST(Codec, RoundTripWithinBlockBounds) {
  const auto ts = assortment();
  for (Kind k : kAll)
    for (int block : {8, 64, 100, 4096})
      for (int level : {0, 3}) {
        SCOPED_TRACE(std::string(codec::kind_name(k)) + " block " + std::to_string(block) + " level " +
                     std::to_string(level));
        const auto out = decode_ok(codec::encode(ts, {k, block, level}));
        ASSERT_EQ(out.size(), ts.size());
        for (size_t i = 0; i < ts.size(); ++i) {
          SCOPED_TRACE(ts[i].name);
          EXPECT_EQ(out[i].name, ts[i].name);
          EXPECT_EQ(out[i].shape, ts[i].shape);
          ASSERT_EQ(out[i].data.size(), ts[i].data.size());
          if (k == Kind::fp32) {
            EXPECT_EQ(out[i].data, ts[i].data);
            continue;
          }
          EXPECT_LE(check_bounds(k, block, ts[i].data, out[i].data).worst_excess, 0.0);
          if (ts[i].name == "zeros") {
            EXPECT_EQ(out[i].data, ts[i].data);
          }
        }
      }
}

// The bound is tight, not loose: on many Gaussian blocks the worst error comes within a few
// percent of m / (2 q) (rounding errors are ~uniform in [-s/2, s/2]).
TEST(Codec, QuantizationBoundIsNearlyAttained) {
  const Tensor t = gauss_tensor("w", {1 << 16}, 1.0, 11);
  for (Kind k : {Kind::int8, Kind::int4}) {
    const auto out = decode_ok(codec::encode({t}, {k, 64, 0}));
    const Check c = check_bounds(k, 64, t.data, out[0].data);
    EXPECT_LE(c.worst_excess, 0.0) << codec::kind_name(k);
    EXPECT_GT(c.max_ratio, 0.97) << codec::kind_name(k);
    EXPECT_LE(c.max_ratio, 1.0 + 1e-5) << codec::kind_name(k);
  }
}

// Bounds from error_bound() itself, derived by hand.
TEST(Codec, ErrorBoundFormula) {
  EXPECT_EQ(codec::error_bound(Kind::fp32, 3.0), 0.0);
  EXPECT_DOUBLE_EQ(codec::error_bound(Kind::bf16, 3.0), 3.0 / 256);
  EXPECT_DOUBLE_EQ(codec::error_bound(Kind::int8, 2.54), 0.01);
  EXPECT_DOUBLE_EQ(codec::error_bound(Kind::int4, 1.4), 0.1);
}

// bf16: values with 8 significant bits are exact; otherwise round to nearest even.
TEST(Codec, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: even mantissa wins (1). 1 + 3 * 2^-8 ties
  // between 1 + 2^-7 (odd) and 1 + 2^-6 (even): rounds up. 1 + 2^-8 + 2^-20 is above the tie.
  Tensor t{"b", {6}, {1.0f, -2.5f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f, 3.4e38f}};
  const auto out = decode_ok(codec::encode({t}, {Kind::bf16, 64, 0}));
  EXPECT_EQ(out[0].data[0], 1.0f);
  EXPECT_EQ(out[0].data[1], -2.5f);
  EXPECT_EQ(out[0].data[2], 1.0f);
  EXPECT_EQ(out[0].data[3], 1.0f + 0x1p-6f);
  EXPECT_EQ(out[0].data[4], 1.0f + 0x1p-7f);
  EXPECT_TRUE(std::isfinite(out[0].data[5]));  // would round to inf: clamped to the largest bf16
  EXPECT_LE(std::fabs(out[0].data[5] - 3.4e38f), 3.4e38 / 256);
}

// The wire layout, read back with the plain safetensors reader and checked against codes
// worked out by hand.
TEST(Codec, WireLayoutByHand) {
  // int8, one block, absmax 127 -> scale 1: codes are the rounded values (ties to even).
  {
    Tensor t{"w", {2, 2}, {127.0f, -63.5f, 0.0f, 1.2f}};
    auto body = codec::unframe(codec::encode({t}, {Kind::int8, 8, 0})).value();
    auto f = st::SafetensorsFile::from_buffer(body.data(), body.size(), "t");
    EXPECT_EQ(f.metadata().at("codec"), "int8");
    EXPECT_EQ(f.metadata().at("block_size"), "8");
    EXPECT_EQ(f.metadata().at("format"), "1");
    EXPECT_EQ(f.metadata().at("tensors"), "[\"w\"]");
    auto& c = f.get("w");
    EXPECT_EQ(c.dtype, st::DType::I8);
    EXPECT_EQ(c.shape, (std::vector<int64_t>{2, 2}));
    const int8_t* q = reinterpret_cast<const int8_t*>(c.data);
    EXPECT_EQ((std::vector<int>{q[0], q[1], q[2], q[3]}), (std::vector<int>{127, -64, 0, 1}));
    auto& s = f.get("w.scale");
    EXPECT_EQ(s.dtype, st::DType::F32);
    EXPECT_EQ(s.shape, (std::vector<int64_t>{1}));
    float sc;
    std::memcpy(&sc, s.data, 4);
    EXPECT_EQ(sc, 1.0f);
  }
  // int4, 11 elements, block 8: two blocks with absmax 7 (scale 1) and 14 (scale 2);
  // stored nibble = code + 8, element 2i low, 2i+1 high, spare high nibble 0.
  {
    Tensor t{"v", {11}, {7, -7, 3.5f, 0, 1, -2, 2.6f, -0.4f, 14, -3, 5}};
    auto body = codec::unframe(codec::encode({t}, {Kind::int4, 8, 0})).value();
    auto f = st::SafetensorsFile::from_buffer(body.data(), body.size(), "t");
    EXPECT_EQ(f.metadata().at("shapes"), "{\"v\":[11]}");
    auto& c = f.get("v");
    EXPECT_EQ(c.dtype, st::DType::U8);
    EXPECT_EQ(c.shape, (std::vector<int64_t>{6}));
    // codes: 7 -7 4 0 1 -2 3 0 | 7 -2(-1.5 ties to even) 2(2.5 ties to even)
    const uint8_t want[6] = {0x1f, 0x8c, 0x69, 0x8b, 0x6f, 0x0a};
    EXPECT_EQ(std::memcmp(c.data, want, 6), 0);
    auto& s = f.get("v.scale");
    float sc[2];
    std::memcpy(sc, s.data, 8);
    EXPECT_EQ(sc[0], 1.0f);
    EXPECT_EQ(sc[1], 2.0f);
  }
}

TEST(Codec, StoredOrCompressedFlagAndDeterminism) {
  const Tensor zeros{"z", {10000}, std::vector<float>(10000, 0.0f)};
  const std::string stored = codec::encode({zeros}, {Kind::int8, 64, 0});
  const std::string packed = codec::encode({zeros}, {Kind::int8, 64, 3});
  EXPECT_EQ(stored.substr(0, 4), "BRLC");
  EXPECT_EQ(stored[5], 0);
  EXPECT_EQ(packed[5], 1);
  EXPECT_LT(packed.size(), stored.size() / 20);
  EXPECT_EQ(decode_ok(packed)[0].data, zeros.data);
  // Incompressible random fp32 may go out stored even at level 3: never bigger than stored.
  const Tensor g = gauss_tensor("g", {4096}, 1.0, 12);
  EXPECT_LE(codec::encode({g}, {Kind::fp32, 64, 3}).size(), codec::encode({g}, {Kind::fp32, 64, 0}).size());
  EXPECT_EQ(codec::encode({g}, {Kind::int4, 64, 3}), codec::encode({g}, {Kind::int4, 64, 3}));
}

TEST(Codec, EncodeRejectsBadInput) {
  auto expect_bad = [](const std::vector<Tensor>& ts, Kind k, const std::string& needle) {
    try {
      codec::encode(ts, {k, 64, 3});
      FAIL() << needle;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  Tensor nan{"lora_B", {3}, {1.0f, NAN, 2.0f}};
  expect_bad({nan}, Kind::int8, "\"lora_B\" element 1");
  Tensor inf{"x", {2}, {INFINITY, 0.0f}};
  expect_bad({inf}, Kind::fp32, "\"x\" element 0");
  Tensor late_inf = gauss_tensor("y", {300}, 1.0, 9);
  late_inf.data[250] = -INFINITY;
  expect_bad({late_inf}, Kind::int4, "\"y\" element 250 is -inf");
  expect_bad({{"m", {2, 3}, std::vector<float>(5)}}, Kind::int4, "\"m\" has shape [2,3] (6 elements) but 5");
  expect_bad({{"n", {-1}, {}}}, Kind::int4, "\"n\" has bad shape [-1]");
  expect_bad({{"", {1}, {1.0f}}}, Kind::bf16, "bad tensor name");
  expect_bad({{"a", {1}, {1.0f}}, {"a", {1}, {1.0f}}}, Kind::fp32, "\"a\" is duplicated");
  // "w.scale" is a legal name, but under int8/int4 it collides with w's scales.
  const std::vector<Tensor> clash = {{"w", {1}, {1.0f}}, {"w.scale", {1}, {2.0f}}};
  expect_bad(clash, Kind::int8, "\"w.scale\"");
  expect_bad({clash[1], clash[0]}, Kind::int4, "\"w\"");
  EXPECT_EQ(decode_ok(codec::encode(clash, {Kind::bf16, 64, 3})).size(), 2u);
}

// Error feedback: with it, sum(decoded) = sum(true) - residual, so the running error is one
// round's quantization error however many rounds pass. Without it, the per-round errors
// (independent, zero-mean, since each round's delta is fresh) add up: mean-square error after
// T rounds = the sum of the rounds' mean-square errors, i.e. RMS ~ sqrt(T).
TEST(Codec, ErrorFeedbackKeepsTheSumOnTrack) {
  constexpr int kRounds = 200, kBlock = 64;
  const std::vector<std::vector<int64_t>> shapes = {{16, 256}, {4096}};
  for (Kind k : {Kind::bf16, Kind::int8, Kind::int4}) {
    SCOPED_TRACE(codec::kind_name(k));
    const codec::Options opt{k, kBlock, 3};
    codec::ErrorFeedback ef;
    Gauss g(100 + static_cast<int>(k));
    std::vector<std::vector<double>> sum_true(2), sum_ef(2), sum_plain(2);
    for (auto& v : {&sum_true, &sum_ef, &sum_plain})
      for (size_t t = 0; t < 2; ++t) (*v)[t].assign(numel(shapes[t]), 0.0);
    double sum_round_ms = 0;  // sum over rounds of the no-feedback mean-square error
    double worst_excess = -1e300;
    for (int r = 0; r < kRounds; ++r) {
      std::vector<Tensor> delta;
      for (size_t t = 0; t < 2; ++t)
        delta.push_back({nm("t", static_cast<int>(t)), shapes[t], g.vec(numel(shapes[t]), 0.01)});
      // The corrected input this round (delta + the residual before it), to bound the error.
      std::vector<std::vector<float>> corrected(2);
      for (size_t t = 0; t < 2; ++t) {
        corrected[t] = delta[t].data;
        auto it = ef.residuals().find(delta[t].name);
        if (it != ef.residuals().end())
          for (size_t i = 0; i < corrected[t].size(); ++i) corrected[t][i] += it->second[i];
      }
      std::vector<codec::Tensor> sent;
      const auto with = decode_ok(ef.encode(delta, opt, &sent));
      ASSERT_EQ(sent.size(), with.size());  // what it hands back is what the payload decodes to
      for (size_t t = 0; t < sent.size(); ++t) ASSERT_EQ(sent[t].data, with[t].data) << sent[t].name;
      const auto without = decode_ok(codec::encode(delta, opt));
      double ms = 0;
      size_t n_all = 0;
      for (size_t t = 0; t < 2; ++t) {
        for (size_t i = 0; i < delta[t].data.size(); ++i) {
          sum_true[t][i] += delta[t].data[i];
          sum_ef[t][i] += with[t].data[i];
          sum_plain[t][i] += without[t].data[i];
          const double e = static_cast<double>(without[t].data[i]) - delta[t].data[i];
          ms += e * e;
        }
        n_all += delta[t].data.size();
        // |sum_ef - sum_true| <= this round's bound on the corrected input, plus float
        // rounding of the residual updates (<= 2^-23 of |corrected| per round).
        std::vector<float> drift(corrected[t].size());
        for (size_t i = 0; i < drift.size(); ++i) drift[i] = static_cast<float>(sum_true[t][i] - sum_ef[t][i]);
        for (size_t lo = 0; lo < drift.size(); lo += kBlock) {
          double m = 0;
          for (size_t i = lo; i < lo + kBlock; ++i) m = std::max(m, std::fabs(static_cast<double>(corrected[t][i])));
          for (size_t i = lo; i < lo + kBlock; ++i) {
            const double bound =
                (k == Kind::bf16 ? std::fabs(corrected[t][i]) * codec::kBf16RelativeError : codec::error_bound(k, m)) +
                (r + 1) * 0x1p-23 * m;
            worst_excess = std::max(worst_excess, std::fabs(static_cast<double>(drift[i])) - bound);
          }
        }
      }
      sum_round_ms += ms / n_all;
    }
    EXPECT_LE(worst_excess, 0.0);

    double ms_ef = 0, ms_plain = 0, res_sq = 0;
    size_t n = 0;
    for (size_t t = 0; t < 2; ++t) {
      const auto& res = ef.residuals().at(nm("t", static_cast<int>(t)));
      for (size_t i = 0; i < sum_true[t].size(); ++i, ++n) {
        ms_ef += std::pow(sum_ef[t][i] - sum_true[t][i], 2);
        ms_plain += std::pow(sum_plain[t][i] - sum_true[t][i], 2);
        res_sq += static_cast<double>(res[i]) * res[i];
      }
    }
    // sum_true - sum_ef is the final residual.
    EXPECT_NEAR(std::sqrt(ms_ef), ef.residual_norm(), 1e-3 * ef.residual_norm());
    EXPECT_NEAR(ef.residual_norm(), std::sqrt(res_sq), 1e-9 * std::sqrt(res_sq));
    ms_ef /= n;
    ms_plain /= n;
    // Without feedback the mean-square drift is the sum of the rounds' (8192 elements: the
    // estimate's relative spread is ~sqrt(2/8192) = 1.6 %, so 15 % is far outside chance).
    EXPECT_NEAR(ms_plain / sum_round_ms, 1.0, 0.15);
    // ...so RMS grows ~ sqrt(200) = 14x one round's, while with feedback it stays ~ one round's.
    const double one_round_rms = std::sqrt(sum_round_ms / kRounds);
    EXPECT_GT(std::sqrt(ms_plain), 10 * one_round_rms);
    EXPECT_LT(std::sqrt(ms_ef), 2 * one_round_rms);
  }
}

TEST(Codec, ErrorFeedbackStateHandling) {
  codec::ErrorFeedback ef;
  const codec::Options opt{Kind::int4, 64, 3};
  ef.encode({gauss_tensor("a", {100}, 1.0, 1), gauss_tensor("b", {50}, 1.0, 2)}, opt);
  const double n0 = ef.residual_norm();
  EXPECT_GT(n0, 0.0);
  // A bad delta (shape change, NaN) throws and leaves the residuals untouched.
  EXPECT_THROW(ef.encode({gauss_tensor("a", {99}, 1.0, 3)}, opt), UserError);
  Tensor nan = gauss_tensor("a", {100}, 1.0, 4);
  nan.data[5] = NAN;
  EXPECT_THROW(ef.encode({nan}, opt), UserError);
  EXPECT_EQ(ef.residual_norm(), n0);
  // A round without "b" keeps b's residual for later.
  const std::vector<float> rb = ef.residuals().at("b");
  ef.encode({gauss_tensor("a", {100}, 1.0, 5)}, opt);
  EXPECT_EQ(ef.residuals().at("b"), rb);
  // fp32 loses nothing: the residual is exactly what it was carried in, then zero.
  codec::ErrorFeedback exact;
  exact.encode({gauss_tensor("a", {100}, 1.0, 6)}, {Kind::fp32, 64, 3});
  EXPECT_EQ(exact.residual_norm(), 0.0);
  ef.reset();
  EXPECT_EQ(ef.residual_norm(), 0.0);
  EXPECT_TRUE(ef.residuals().empty());
}

// ---- hostile input ------------------------------------------------------------------------

namespace {

std::vector<Tensor> small_set() {
  return {gauss_tensor("lora_A", {5, 3}, 1.0, 21), gauss_tensor("lora_B", {7}, 0.1, 22)};
}

void expect_error(const std::string& bytes, const std::string& needle, StatusCode code = StatusCode::kCorrupt,
                  uint64_t max = 1ull << 32) {
  auto r = codec::decode(bytes, max);
  ASSERT_FALSE(r.is_ok()) << "decoded, expected an error containing: " << needle;
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
}

// A body we can take apart and reassemble with edits (re-framed with a valid checksum, so
// the body validators, not the checksum, must catch the damage).
struct Owned {
  std::string name;
  st::DType dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};
struct Body {
  std::vector<Owned> t;
  std::map<std::string, std::string> md;
  Owned& at(const std::string& n) {
    for (auto& o : t)
      if (o.name == n) return o;
    throw std::runtime_error("no " + n);
  }
};
Body open_body(const std::string& payload) {
  const std::string b = codec::unframe(payload).value();
  auto f = st::SafetensorsFile::from_buffer(b.data(), b.size(), "t");
  Body body;
  for (auto& n : f.names()) {
    auto& v = f.get(n);
    body.t.push_back({n, v.dtype, v.shape, std::string(reinterpret_cast<const char*>(v.data), v.nbytes)});
  }
  body.md = f.metadata();
  return body;
}
std::string close_body(const Body& b) {
  std::vector<st::TensorData> tds;
  for (auto& o : b.t) tds.push_back({o.name, o.dtype, o.shape, o.bytes.data(), o.bytes.size()});
  return codec::frame(st::serialize_safetensors(tds, b.md), 0);
}
void put_f32(std::string& bytes, size_t i, float v) { std::memcpy(bytes.data() + 4 * i, &v, 4); }

}  // namespace

TEST(CodecHostile, EveryTruncationIsAnError) {
  for (Kind k : kEvery)
    for (int level : {0, 3}) {
      const std::string p = codec::encode(small_set(), {k, 8, level});
      for (size_t len = 0; len < p.size(); ++len) {
        auto r = codec::decode(std::string_view(p).substr(0, len));
        ASSERT_FALSE(r.is_ok()) << codec::kind_name(k) << " level " << level << " prefix " << len;
        EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
      }
      EXPECT_FALSE(codec::decode(p + '\0').is_ok());
      EXPECT_TRUE(codec::decode(p).is_ok());
    }
  expect_error("", "shorter than the 24-byte prefix");
}

// No single bit flip changes what decodes (checksum over the body, every prefix field
// checked): it is an error, or, where zstd ignores the flipped bit (seen once in 1800 flips: a
// bit of a compressed stream that decompresses to the same body), the very same tensors.
TEST(CodecHostile, EveryBitFlipIsAnErrorOrHarmless) {
  Gauss g(31);
  int harmless = 0, flips = 0;
  for (Kind k : kEvery)
    for (int level : {0, 3}) {
      const std::string p = codec::encode(small_set(), {k, 8, level});
      const auto want = decode_ok(p);
      for (int trial = 0; trial < 150; ++trial, ++flips) {
        std::string q = p;
        const size_t bit = static_cast<size_t>(g.uniform() * q.size() * 8);
        q[bit / 8] ^= static_cast<char>(1 << (bit % 8));
        auto r = codec::decode(q);
        if (!r.is_ok()) continue;
        ++harmless;
        ASSERT_TRUE(level > 0 && bit / 8 >= 24)
            << codec::kind_name(k) << " bit " << bit << ": a stored body or prefix flip decoded";
        ASSERT_EQ(r.value().size(), want.size());
        for (size_t t = 0; t < want.size(); ++t)
          ASSERT_EQ(std::memcmp(r.value()[t].data.data(), want[t].data.data(), 4 * want[t].data.size()), 0)
              << codec::kind_name(k) << " bit " << bit << " decoded to other values";
      }
    }
  EXPECT_LE(harmless, flips / 100);
}

// Past the checksum: damage inside a re-framed (checksum-valid) body must be reported or
// decode to well-formed tensors, never crash or over-read (run under BRL_SANITIZE too).
TEST(CodecHostile, DamagedBodiesBehindAValidChecksum) {
  Gauss g(41);
  int errors = 0, total = 0;
  for (Kind k : kAll) {
    const std::string body = codec::unframe(codec::encode(small_set(), {k, 8, 0})).value();
    for (int trial = 0; trial < 500; ++trial) {
      std::string b = body;
      const int mode = trial % 3;
      if (mode == 0) {  // bit flips
        for (int f = 0; f < 1 + trial % 4; ++f) {
          const size_t bit = static_cast<size_t>(g.uniform() * b.size() * 8);
          b[bit / 8] ^= static_cast<char>(1 << (bit % 8));
        }
      } else if (mode == 1) {  // random byte overwrite
        b[static_cast<size_t>(g.uniform() * b.size())] = static_cast<char>(static_cast<uint8_t>(g.uniform() * 256));
      } else {  // truncation
        b.resize(static_cast<size_t>(g.uniform() * b.size()));
      }
      auto r = codec::decode(codec::frame(b, trial % 2 ? 3 : 0));
      ++total;
      if (!r.is_ok()) {
        ++errors;
        EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << r.status().to_string();
        continue;
      }
      for (auto& t : r.value()) {  // whatever decoded is well-formed and finite
        EXPECT_EQ(static_cast<int64_t>(t.data.size()), numel(t.shape));
        for (float v : t.data) EXPECT_TRUE(std::isfinite(v));
      }
    }
  }
  EXPECT_GT(errors, total / 3);  // most damage is detected
}

TEST(CodecHostile, BadPrefix) {
  const std::string p = codec::encode(small_set(), {Kind::int8, 8, 0});
  std::string q = p;
  q[0] = 'X';
  expect_error(q, "magic");
  q = p;
  q[4] = 2;
  expect_error(q, "frame version 2");
  q = p;
  q[5] = 7;
  expect_error(q, "compression flag 7");
  q = p;
  q[6] = 1;
  expect_error(q, "reserved");
  q = p;
  q[16] ^= 1;
  expect_error(q, "checksum");
  // A forged length far above the cap is refused before anything is allocated.
  q = p;
  q[15] = 0x7f;
  expect_error(q, "max_decoded_bytes", StatusCode::kInvalidArgument);
  // The same forged length under the cap on a zstd payload: decompression runs dry.
  std::string z = codec::encode(small_set(), {Kind::int8, 8, 3});
  ASSERT_EQ(z[5], 1);
  z[12] = 0x10;  // declares ~64 GiB
  expect_error(z, "decompresses to", StatusCode::kCorrupt, 1ull << 40);
  // zstd flag on a stored body.
  q = p;
  q[5] = 1;
  expect_error(q, "zstd");
}

TEST(CodecHostile, SizeCaps) {
  // A zstd "bomb": 4 MB of zeros compresses to a few hundred bytes.
  const Tensor zeros{"z", {1 << 20}, std::vector<float>(1 << 20, 0.0f)};
  const std::string bomb = codec::encode({zeros}, {Kind::fp32, 64, 19});
  ASSERT_LT(bomb.size(), 2000u);
  expect_error(bomb, "the body is", StatusCode::kInvalidArgument, 1 << 20);
  // int4 decodes to ~7x its body: a cap between the two refuses the decoded floats.
  const std::string p = codec::encode({gauss_tensor("w", {1 << 16}, 1.0, 5)}, {Kind::int4, 64, 0});
  const uint64_t body = p.size() - 24, decoded = 4u << 16;
  ASSERT_LT(body, decoded / 6);
  expect_error(p, "the decoded tensors is 262144 bytes", StatusCode::kInvalidArgument, 2 * body);
  EXPECT_TRUE(codec::decode(p, decoded).is_ok());
}

TEST(CodecHostile, WrongMetadataAndContents) {
  const std::string i8 = codec::encode(small_set(), {Kind::int8, 8, 0});
  const std::string i4 = codec::encode(small_set(), {Kind::int4, 8, 0});
  const std::string bf = codec::encode(small_set(), {Kind::bf16, 8, 0});
  const std::string f32 = codec::encode(small_set(), {Kind::fp32, 8, 0});
  auto edit = [](const std::string& p, auto&& fn) {
    Body b = open_body(p);
    fn(b);
    return close_body(b);
  };
  // metadata fields
  expect_error(edit(i8, [](Body& b) { b.md.erase("codec"); }), "no \"codec\"");
  expect_error(edit(i8, [](Body& b) { b.md["codec"] = "int3"; }), "codec \"int3\" is unknown");
  expect_error(edit(i8, [](Body& b) { b.md["format"] = "2"; }), "format \"2\"");
  expect_error(edit(i8, [](Body& b) { b.md["block_size"] = "abc"; }), "block_size \"abc\"");
  expect_error(edit(i8, [](Body& b) { b.md["block_size"] = "7"; }), "block_size 7 is outside");
  expect_error(edit(i8, [](Body& b) { b.md["block_size"] = "99999999999999999999"; }), "block_size");
  expect_error(edit(i8, [](Body& b) { b.md["block_size"] = "16"; }), "\"lora_A.scale\" has shape [2]");
  expect_error(edit(i8, [](Body& b) { b.md["tensors"] = "[\"lora_A\""; }), "not valid JSON");
  expect_error(edit(i8, [](Body& b) { b.md["tensors"] = "{}"; }), "not an array");
  expect_error(edit(i8, [](Body& b) { b.md["tensors"] = "[\"lora_A\",1]"; }), "non-string");
  expect_error(edit(i8, [](Body& b) { b.md["tensors"] = "[\"lora_A\",\"lora_A\"]"; }), "listed twice");
  expect_error(edit(i8, [](Body& b) { b.md["tensors"] = "[\"lora_A\"]"; }), "\"lora_B\" is not in the metadata");
  expect_error(edit(i8, [](Body& b) { b.md["tensors"] = "[\"lora_A\",\"lora_B\",\"x\"]"; }),
               "\"x\" is listed in the metadata but missing");
  expect_error(edit(i4, [](Body& b) { b.md["codec"] = "int8"; }), "\"lora_A\" is U8, codec int8 stores I8");
  expect_error(edit(f32, [](Body& b) { b.md["codec"] = "bf16"; }), "is F32, codec bf16 stores BF16");
  // scales and codes
  expect_error(edit(i8, [](Body& b) { put_f32(b.at("lora_B.scale").bytes, 0, NAN); }),
               "\"lora_B\" block 0 has scale nan");
  expect_error(edit(i4, [](Body& b) { put_f32(b.at("lora_A.scale").bytes, 1, INFINITY); }), "block 1 has scale inf");
  expect_error(edit(i8, [](Body& b) { put_f32(b.at("lora_A.scale").bytes, 0, -1.0f); }), "block 0 has scale -1");
  expect_error(edit(i8,
                    [](Body& b) {
                      b.at("lora_A.scale").shape = {1};
                      b.at("lora_A.scale").bytes.resize(4);
                    }),
               "\"lora_A.scale\" has shape [1]");
  expect_error(edit(i8, [](Body& b) { b.at("lora_B").bytes[3] = static_cast<char>(-128); }),
               "\"lora_B\" element 3 has int8 code -128");
  expect_error(edit(i4, [](Body& b) { b.at("lora_A").bytes[2] &= 0x0f; }), "\"lora_A\" element 5 has int4 nibble 0");
  expect_error(edit(i4, [](Body& b) { b.at("lora_B").bytes[3] |= 0x10; }), "\"lora_B\" has a non-zero padding nibble");
  expect_error(edit(bf,
                    [](Body& b) {
                      b.at("lora_B").bytes[1] = 0x7f;
                      b.at("lora_B").bytes[0] = static_cast<char>(0x80);
                    }),
               "\"lora_B\" element 0 is not finite");
  expect_error(edit(f32, [](Body& b) { put_f32(b.at("lora_A").bytes, 4, NAN); }), "\"lora_A\" element 4 is not finite");
  // int4 logical shapes
  expect_error(edit(i4, [](Body& b) { b.md.erase("shapes"); }), "no \"shapes\"");
  expect_error(edit(i4, [](Body& b) { b.md["shapes"] = "{\"lora_A\":[5,3]}"; }), "one shape per listed tensor");
  expect_error(edit(i4, [](Body& b) { b.md["shapes"] = "{\"lora_A\":[5,3],\"zzz\":[7]}"; }), "no entry for \"lora_B\"");
  expect_error(edit(i4, [](Body& b) { b.md["shapes"] = "{\"lora_A\":[5,-3],\"lora_B\":[7]}"; }),
               "non-negative integers");
  expect_error(edit(i4, [](Body& b) { b.md["shapes"] = "{\"lora_A\":[5,3.5],\"lora_B\":[7]}"; }),
               "non-negative integers");
  expect_error(edit(i4, [](Body& b) { b.md["shapes"] = "{\"lora_A\":\"x\",\"lora_B\":[7]}"; }), "not an array");
  expect_error(edit(i4, [](Body& b) { b.md["shapes"] = "{\"lora_A\":[4611686018427387904,8],\"lora_B\":[7]}"; }),
               "overflows");
  expect_error(edit(i4, [](Body& b) { b.md["shapes"] = "{\"lora_A\":[1000000000000],\"lora_B\":[7]}"; }),
               "needs [500000000000]");
  expect_error(edit(i4, [](Body& b) { b.md["shapes"] = "{\"lora_A\":[17],\"lora_B\":[7]}"; }),
               "packs [8] bytes, its shape [17] needs [9]");
  // A body that is not safetensors at all, or whose tensor sizes disagree with its header.
  expect_error(codec::frame("not a safetensors body", 0), "safetensors");
  const std::string hdr = R"({"w":{"dtype":"I8","shape":[4],"data_offsets":[0,3]}})";
  std::string raw(8, '\0');
  raw[0] = static_cast<char>(hdr.size());
  expect_error(codec::frame(raw + hdr + "abc", 0), "data_offsets span 3 bytes");
  // Sanity: the unedited bodies still decode after the round trip through open/close.
  for (auto* p : {&i8, &i4, &bf, &f32}) EXPECT_TRUE(codec::decode(edit(*p, [](Body&) {})).is_ok());
}

// The issue's goal: int4 payload <= 15 % of the fp32 payload, both with zstd, on Gaussian
// data shaped like LoRA factors. Raw int4 is 0.5 + 4 / block bytes per element (14.1 % of
// 4 at block 64), so this holds only if zstd does not expand the codes.
TEST(Codec, Int4SizeGoal) {
  std::vector<Tensor> ts;
  uint64_t n = 0;
  for (int l = 0; l < 4; ++l) {
    ts.push_back(gauss_tensor(nm("l", l, ".A"), {16, 896}, 0.02, 50 + l));
    ts.push_back(gauss_tensor(nm("l", l, ".B"), {4864, 16}, 1e-3, 60 + l));
    n += 16 * 896 + 4864 * 16;
  }
  const double fp32 = codec::encode(ts, {Kind::fp32, 64, 3}).size();
  for (int block : {64, 128}) {
    const double int4 = codec::encode(ts, {Kind::int4, block, 3}).size();
    EXPECT_LE(int4, 0.15 * fp32) << "block " << block << ": " << int4 / fp32;
    EXPECT_LE(int4, (0.5 + 4.0 / block) * n + 4096) << "block " << block;
    std::printf("int4 block %d: %.1f %% of fp32 (%.0f / %.0f bytes)\n", block, 100 * int4 / fp32, int4, fp32);
  }
}

// ---- topk kinds (SparseLoCo's chunked top-k) ------------------------------------------------

namespace {
// The independent reference: per run, the k = ceil(density * len) (>= 1) largest magnitudes,
// ties to the lower index, by a full sort.
std::vector<std::vector<size_t>> reference_topk(const std::vector<float>& x, int chunk, double density) {
  std::vector<std::vector<size_t>> runs;
  for (size_t lo = 0; lo < x.size(); lo += chunk) {
    const size_t len = std::min<size_t>(chunk, x.size() - lo);
    std::vector<size_t> idx(len);
    for (size_t i = 0; i < len; ++i) idx[i] = lo + i;
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
    const size_t k = std::min(len, std::max<size_t>(1, static_cast<size_t>(std::ceil(density * len))));
    idx.resize(k);
    runs.push_back(idx);
  }
  return runs;
}
}  // namespace

// Every tensor of the assortment, run lengths at the limits and odd, densities from one element
// per run to all: the decoded tensor is zero off the reference top-k, and on it keeps the sign
// and is within (hi - lo) / 2L of the value (lo, hi: the run's smallest and largest sent
// magnitude), which is <= error_bound(kind, run absmax).
TEST(CodecTopk, SendsTheLargestWithinTheirLevelBound) {
  auto ts = assortment();
  ts.push_back({"ties", {40}, std::vector<float>(40, 0.25f)});  // every magnitude equal: the lowest indices go
  for (Kind k : kSparse)
    for (int chunk : {16, 100, 4096, 32768})
      for (double density : {1e-9, 1.0 / 64, 0.1, 1.0}) {
        SCOPED_TRACE(std::string(codec::kind_name(k)) + " chunk " + std::to_string(chunk) + " density " +
                     std::to_string(density));
        const auto out = decode_ok(codec::encode(ts, topk(k, chunk, density)));
        ASSERT_EQ(out.size(), ts.size());
        const double L = k == Kind::topk_int2 ? 2 : 8;
        for (size_t t = 0; t < ts.size(); ++t) {
          ASSERT_EQ(out[t].name, ts[t].name);
          ASSERT_EQ(out[t].shape, ts[t].shape);
          const auto& x = ts[t].data;
          const auto& y = out[t].data;
          std::vector<bool> sent(x.size(), false);
          for (auto& run : reference_topk(x, chunk, density)) {
            double lo = 1e300, hi = 0, m = 0;
            for (size_t i : run)
              lo = std::min(lo, std::fabs(static_cast<double>(x[i]))),
              hi = std::max(hi, std::fabs(static_cast<double>(x[i])));
            for (size_t i = run.empty() ? 0 : (run[0] / chunk) * chunk;
                 i < std::min(x.size(), (run[0] / chunk + 1) * chunk); ++i)
              m = std::max(m, std::fabs(static_cast<double>(x[i])));
            for (size_t i : run) {
              sent[i] = true;
              const double err = std::fabs(static_cast<double>(x[i]) - y[i]);
              ASSERT_LE(err, (hi - lo) / (2 * L) + slack(hi)) << ts[t].name << " element " << i;
              ASSERT_LE(err, codec::error_bound(k, m) + slack(m));
              ASSERT_TRUE(x[i] == 0 || std::signbit(x[i]) == std::signbit(y[i])) << ts[t].name << " element " << i;
            }
          }
          for (size_t i = 0; i < x.size(); ++i)
            if (!sent[i]) {
              ASSERT_EQ(y[i], 0.0f) << ts[t].name << " element " << i << " was not among the top-k";
            }
        }
      }
}

// The issue's goal: >= 30x smaller than fp32 at the Qwen2.5-0.5B r = 16 shape (four layers'
// q_proj-like A and down-like B factors, Gaussian), SparseLoCo's settings (64 of 4096, 2 bits)
// and at density 1/8. The floor, from the entropy of which elements are sent: a mask at density
// d costs at least H(d) / d bits a sent element (7.4 at 1/64, 4.35 at 1/8), so with 2-bit codes
// fp32 can be at most 32 / (H(1/64) + 2/64) = 218x resp. 32 / (H(1/8) + 2/8) = 40.3x larger;
// zstd gets within a few percent of that at 1/8 and ~1.7x of it at 1/64.
TEST(CodecTopk, SizeGoal) {
  std::vector<Tensor> ts;
  for (int l = 0; l < 4; ++l) {
    ts.push_back(gauss_tensor(nm("l", l, ".A"), {16, 896}, 0.02, 50 + l));
    ts.push_back(gauss_tensor(nm("l", l, ".B"), {4864, 16}, 1e-3, 60 + l));
  }
  const double fp32 = codec::encode(ts, {Kind::fp32, 64, 3}).size();
  const double two = codec::encode(ts, topk(Kind::topk_int2, 4096, 1.0 / 64)).size();
  const double four = codec::encode(ts, topk(Kind::topk_int4, 4096, 1.0 / 64)).size();
  const double eighth = codec::encode(ts, topk(Kind::topk_int2, 4096, 1.0 / 8)).size();
  std::printf("topk_int2 64/4096: %.1fx smaller than fp32; topk_int4: %.1fx; topk_int2 at 1/8: %.1fx\n", fp32 / two,
              fp32 / four, fp32 / eighth);
  EXPECT_GE(fp32 / two, 30.0);
  EXPECT_GE(fp32 / four, 30.0);
  EXPECT_GE(fp32 / eighth, 30.0);
  EXPECT_LE(fp32 / eighth, 40.3);  // the entropy floor above

  // The demo's adapter (hidden 128, 4 layers, r 8 on all seven modules: 56 tensors, 75 k
  // elements) under PEFT's names: here the body's header is a real share of the payload, and
  // 1/8 stays past 30x only because all tensors share three arrays (one entry per tensor and
  // array, format 2, made it 24.5x).
  std::vector<Tensor> demo;
  const std::pair<const char*, std::pair<int, int>> mods[] = {
      {"self_attn.q_proj", {128, 128}}, {"self_attn.k_proj", {128, 64}}, {"self_attn.v_proj", {128, 64}},
      {"self_attn.o_proj", {128, 128}}, {"mlp.gate_proj", {128, 352}},   {"mlp.up_proj", {128, 352}},
      {"mlp.down_proj", {352, 128}}};
  uint64_t seed = 100;
  for (int l = 0; l < 4; ++l)
    for (auto& [mod, io] : mods) {
      const std::string base = "base_model.model.model.layers." + std::to_string(l) + "." + mod;
      demo.push_back(gauss_tensor(base + ".lora_A.weight", {8, io.first}, 0.02, seed++));
      demo.push_back(gauss_tensor(base + ".lora_B.weight", {io.second, 8}, 1e-3, seed++));
    }
  const double demo_fp32 = codec::encode(demo, {Kind::fp32, 64, 3}).size();
  const double demo_eighth = codec::encode(demo, topk(Kind::topk_int2, 4096, 1.0 / 8)).size();
  std::printf("demo adapter, topk_int2 at 1/8: %.1fx smaller than fp32\n", demo_fp32 / demo_eighth);
  EXPECT_GE(demo_fp32 / demo_eighth, 30.0);
}

// Error feedback makes a sparse codec lossless over time: the sum of what was sent plus the
// residual is the sum of the deltas (to float rounding), and the residual stays far below the
// drift of sending the same top-k without feedback (which loses 63/64 of every round).
TEST(CodecTopk, ErrorFeedbackCarriesWhatWasNotSent) {
  constexpr int kRounds = 100;
  const auto opt = topk(Kind::topk_int2, 256, 1.0 / 16);
  codec::ErrorFeedback ef;
  Gauss g(77);
  const size_t n = 4096;
  std::vector<double> sum_true(n, 0), sum_ef(n, 0), sum_plain(n, 0);
  for (int r = 0; r < kRounds; ++r) {
    std::vector<Tensor> d{{"w", {static_cast<int64_t>(n)}, g.vec(n, 0.01)}};
    const auto with = decode_ok(ef.encode(d, opt));
    const auto without = decode_ok(codec::encode(d, opt));
    for (size_t i = 0; i < n; ++i)
      sum_true[i] += d[0].data[i], sum_ef[i] += with[0].data[i], sum_plain[i] += without[0].data[i];
  }
  const auto& res = ef.residuals().at("w");
  double worst = 0, drift_ef = 0, drift_plain = 0;
  for (size_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::fabs(sum_ef[i] + res[i] - sum_true[i]));
    drift_ef += std::pow(sum_ef[i] - sum_true[i], 2);
    drift_plain += std::pow(sum_plain[i] - sum_true[i], 2);
  }
  EXPECT_LT(worst, 1e-5);  // 100 rounds of float residual updates on values ~0.1
  std::printf("RMS drift after %d rounds: %.4f with feedback, %.4f without (one round's delta RMS 0.01)\n", kRounds,
              std::sqrt(drift_ef / n), std::sqrt(drift_plain / n));
  EXPECT_LT(std::sqrt(drift_ef / n), 0.5 * std::sqrt(drift_plain / n));
}

TEST(CodecTopk, HostileBodies) {
  // lora_A: 15 elements, 5 sent (3 code bytes, 4 padding bits); lora_B: 7, 3 sent (2 bytes).
  // The body holds mask [3] (2 + 1 bytes), codes [5] (3 + 2), range [2, 2] (one run each).
  const std::string p = codec::encode(small_set(), topk(Kind::topk_int4, 16, 0.3, 0));
  auto edit = [&](auto&& fn) {
    Body b = open_body(p);
    fn(b);
    return close_body(b);
  };
  // lora_A's 5 of 15: clearing one leaves 4, whose codes need 2 bytes, not 3.
  auto first_set = [](const std::string& m) {
    for (size_t i = 0; i < 8 * m.size(); ++i)
      if ((static_cast<uint8_t>(m[i / 8]) >> (i % 8)) & 1) return i;
    return size_t{0};
  };
  expect_error(edit([&](Body& b) {
                 auto& m = b.at("mask").bytes;
                 const size_t i = first_set(m);
                 m[i / 8] = static_cast<char>(static_cast<uint8_t>(m[i / 8]) & ~(1u << (i % 8)));
               }),
               "the listed tensors use 4 code bytes, 3 mask bytes and 2 ranges; the body holds codes [5], mask [3], "
               "range [2,2]");
  // Setting lora_B's 8th mask bit (past its 7 elements), or one of lora_A's 16th.
  expect_error(edit([&](Body& b) { b.at("mask").bytes[2] |= static_cast<char>(0x80); }),
               "\"lora_B\" has mask bits set past its 7 elements");
  expect_error(edit([&](Body& b) { b.at("mask").bytes[1] |= static_cast<char>(0x80); }),
               "\"lora_A\" has mask bits set past its 15 elements");
  // A mask bit set in lora_A's slice (not at a padding position) asks for more codes than remain.
  expect_error(edit([&](Body& b) {
                 auto& m = b.at("mask").bytes;
                 for (int i = 0; i < 15; ++i)
                   m[i / 8] = static_cast<char>(static_cast<uint8_t>(m[i / 8]) | 1u << (i % 8));
               }),
               "\"lora_A\" sends 15 elements (its mask): its 8 code bytes run past the end of codes [5]");
  expect_error(edit([&](Body& b) { b.md["format"] = "2"; }),
               "format \"2\" is not supported for codec topk_int4 (this build reads 3; formats 1 and 2 came from older "
               "builds");
  expect_error(edit([&](Body& b) { put_f32(b.at("range").bytes, 0, 9.0f); }), "\"lora_A\" run 0 has range [9");
  expect_error(edit([&](Body& b) { put_f32(b.at("range").bytes, 1, NAN); }), "(must be finite, 0 <= lo <= hi)");
  expect_error(edit([&](Body& b) { put_f32(b.at("range").bytes, 2, -1.0f); }), "\"lora_B\" run 0 has range [-1");
  expect_error(edit([&](Body& b) { b.at("codes").bytes.back() |= static_cast<char>(0xf0); }),
               "\"lora_B\" has non-zero padding bits");
  expect_error(edit([&](Body& b) { b.md["topk_chunk"] = "8"; }), "topk_chunk \"8\"");
  expect_error(edit([&](Body& b) {
                 b.at("mask").shape = {2};
                 b.at("mask").bytes.resize(2);
               }),
               "\"lora_B\": 7 elements in runs of 16 need 1 mask bytes and 1 ranges, past the end of mask [2] and "
               "range [2,2]");
  expect_error(edit([&](Body& b) {
                 b.at("range").shape = {4};
                 b.at("range").bytes.resize(16);
               }),
               "topk arrays must be codes [bytes], mask [bytes] and range [runs, 2], not [5], [3] and [4]");
  expect_error(edit([&](Body& b) {
                 b.at("codes").shape = {6};
                 b.at("codes").bytes.push_back('\0');
               }),
               "the body holds codes [6]");
  expect_error(edit([&](Body& b) { b.md.erase("topk_chunk"); }), "no \"topk_chunk\"");
  expect_error(edit([&](Body& b) {
                 b.t.erase(std::remove_if(b.t.begin(), b.t.end(), [](const Owned& o) { return o.name == "mask"; }),
                           b.t.end());
               }),
               "\"mask\" is listed in the metadata but missing");
  // A topk body names its tensors in the metadata only; a body tensor of a listed name is foreign.
  expect_error(edit([&](Body& b) {
                 b.t.push_back({"lora_A", st::DType::U8, {1}, std::string(1, '\0')});
               }),
               "body tensor \"lora_A\" is not in the metadata's tensor list");
  expect_error(edit([&](Body& b) { b.md["codec"] = "int4"; }), "format \"3\" is not supported for codec int4");
  expect_error(edit([&](Body& b) {
                 b.md["codec"] = "int4";
                 b.md["format"] = "1";
               }),
               "\"lora_A\" is listed in the metadata but missing");
  EXPECT_TRUE(codec::decode(edit([](Body&) {})).is_ok());
}
