// Two proxies at once on one run. (Kill -9 of any process at random moments: chaos_slow_test.)
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <thread>

#include "launch/run_setup.h"
#include "async_util.h"
#include "protocol/bucket.h"
#include "protocol/layout.h"
#include "protocol/verify.h"

using namespace brl;

// Two proxies on one run (an operator mistake, or a restart while the old one still lives):
// the create-only manifest lets exactly one publish each version; the loser reloads and
// carries on, so the chain still verifies and no update is folded twice.
TEST(Crash, TwoProxiesNeverBothPublishOneVersion) {
  test::TempDir tmp;
  RunConfig cfg = test::learnable_config(test::make_base(tmp.str("base")), tmp.str("out"));
  cfg.sync.sync_interval_s = 0.5;
  cfg.proxy.poll_interval_s = 0.1;
  const std::string bucket = tmp.str("bucket"), cache = tmp.str("cache");
  {
    auto s = protocol::open_bucket(bucket);
    launch::init_run(*s, cfg);
  }
  std::vector<test::Proc> procs;
  for (int i = 0; i < 2; ++i)
    procs.push_back(test::start({"proxy", "--bucket", bucket, "--id", "p" + std::to_string(i)}, tmp.str("p.log")));
  for (int i = 0; i < 2; ++i)
    procs.push_back(test::start(
        {"worker", "--bucket", bucket, "--id", "w" + std::to_string(i), "--threads", "1", "--cache-dir", cache},
        tmp.str("w.log")));
  std::this_thread::sleep_for(std::chrono::seconds(25));
  for (size_t k = 2; k < procs.size(); ++k) test::stop(procs[k]);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  test::stop(procs[0]);
  test::stop(procs[1]);
  auto s = protocol::open_bucket(bucket);
  auto r = protocol::verify_run(*s);
  ASSERT_TRUE(r.ok()) << r.summary();
  std::map<std::string, int> by_proxy;
  for (int64_t v = 1; v <= r.newest; ++v) ++by_proxy[protocol::read_manifest(*s, v).value().proxy];
  EXPECT_GE(r.newest, 5);
  std::printf("%lld versions: %d by p0, %d by p1; %lld updates folded\n", static_cast<long long>(r.newest),
              by_proxy["p0"], by_proxy["p1"], static_cast<long long>(r.updates_folded));
  EXPECT_EQ(by_proxy["p0"] + by_proxy["p1"], r.newest);
  std::string log = test::read_text(tmp.str("p.log"));
  // Both really competed: at least one publish race was lost and handled.
  EXPECT_NE(log.find("was published by another proxy"), std::string::npos);
}
