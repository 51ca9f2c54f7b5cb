// The torch-free proxy library without a factorizer (as this sanitizer-built test links it):
// a run in aggregation mode "exact" is refused when the proxy loads, naming the mode and
// what to run instead, and aggregate() refuses it too; the other modes need none.
#include <gtest/gtest.h>

#include "proxy/aggregate.h"
#include "proxy/proxy.h"
#include "proxy_util.h"
#include "store/local_store.h"

using namespace brl;

TEST(ProxyLoad, ExactModeNeedsAFactorizer) {
  test::TempDir tmp;
  const std::string dir = tmp.str();
  store::LocalStore s(dir);
  RunConfig cfg;
  cfg.aggregation.mode = AggregationMode::exact;
  test::make_run(s, cfg, test::tiny_v0());
  const std::string why = test::error_of([&] { proxy::Proxy p(test::proxy_options(dir, "p")); });
  EXPECT_NE(why.find("mode = \"exact\""), std::string::npos) << why;
  EXPECT_NE(why.find("bucketrl executable"), std::string::npos) << why;

  const auto g = test::tiny_v0();
  const auto d = test::tiny_delta(0.01f);
  proxy::AggregateInput in;
  in.global = &g;
  in.deltas = {&d};
  in.weights = {1.0};
  const std::string agg = test::error_of([&] { proxy::aggregate(cfg.aggregation, in, nullptr); });
  EXPECT_NE(agg.find("mode = \"exact\""), std::string::npos) << agg;
  for (auto m : {AggregationMode::fedavg, AggregationMode::median, AggregationMode::trimmed_mean}) {
    cfg.aggregation.mode = m;
    EXPECT_EQ(proxy::aggregate(cfg.aggregation, in, nullptr).next.size(), 2u) << kAggregationModes(m);
  }
}
