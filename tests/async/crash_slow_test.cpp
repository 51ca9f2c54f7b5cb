// Kill -9 at random moments: a proxy and three workers (real processes) on a directory
// bucket; every ~1-3 s one of them is SIGKILLed (mid-step, mid-upload, mid-publish, whatever
// it was doing) and restarted. At the end, from the bucket alone: the versions verify (one
// chain, payloads match manifests, no update folded twice), and every update a worker wrote
// is recorded in exactly one manifest, folded or rejected: none lost, none applied twice.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <random>
#include <thread>

#include "async/run_setup.h"
#include "async_util.h"
#include "protocol/bucket.h"
#include "protocol/layout.h"
#include "protocol/verify.h"

using namespace brl;

TEST(Crash, KillNineAnythingAndNothingIsLostOrFoldedTwice) {
  test::TempDir tmp;
  RunConfig cfg = test::learnable_config(test::make_base(tmp.str("base")), tmp.str("out"));
  cfg.sync.sync_interval_s = 0.7;
  const std::string bucket = tmp.str("bucket"), cache = tmp.str("cache");
  {
    auto s = protocol::open_bucket(bucket);
    async::init_run(*s, cfg);
  }
  auto proxy_args = std::vector<std::string>{"proxy", "--bucket", bucket};
  auto worker_args = [&](int i) {
    return std::vector<std::string>{"worker", "--bucket", bucket, "--id", "w" + std::to_string(i), "--shard",
                                    std::to_string(i) + "/3", "--threads", "1", "--cache-dir", cache};
  };
  std::vector<test::Proc> procs;
  procs.push_back(test::start(proxy_args, tmp.str("proxy.log")));
  for (int i = 0; i < 3; ++i) procs.push_back(test::start(worker_args(i), tmp.str("w" + std::to_string(i) + ".log")));

  std::mt19937 rng(20261202);
  int kills = 0, proxy_kills = 0;
  auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(45)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1000 + rng() % 2000));
    size_t k = rng() % procs.size();
    test::stop(procs[k], SIGKILL);
    ++kills;
    proxy_kills += k == 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 500));
    procs[k] = k == 0 ? test::start(proxy_args, tmp.str("proxy.log"))
                      : test::start(worker_args(static_cast<int>(k) - 1), tmp.str("w" + std::to_string(k - 1) + ".log"));
  }
  // Clean stop: workers upload their last delta, then the proxy folds everything left.
  for (size_t k = 1; k < procs.size(); ++k) test::stop(procs[k]);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  test::stop(procs[0]);

  auto s = protocol::open_bucket(bucket);
  auto r = protocol::verify_run(*s);
  ASSERT_TRUE(r.ok()) << r.summary();
  EXPECT_GE(r.newest, 5) << r.summary();
  std::map<std::string, int> recorded;  // worker/id -> manifests recording it
  for (int64_t v = 0; v <= r.newest; ++v) {
    auto m = protocol::read_manifest(*s, v).value();
    for (auto& u : m.updates) ++recorded[u.worker + "/" + u.id];
    for (auto& x : m.rejected) {
      ++recorded[x.worker + "/" + x.id];
      // A killed upload never leaves half an object, so nothing is ever corrupt here.
      EXPECT_EQ(x.reason.rfind("corrupt", 0), std::string::npos) << x.worker << "/" << x.id << ": " << x.reason;
    }
  }
  int present = 0;
  auto objs = s->list_all(protocol::updates_prefix()).value();
  for (auto& o : objs) {
    auto k = protocol::parse_update_key(o.key);
    ASSERT_TRUE(k) << o.key;
    ++present;
    EXPECT_EQ(recorded[k->first + "/" + k->second], 1) << o.key << " is not recorded exactly once";
  }
  for (auto& [id, n] : recorded) EXPECT_EQ(n, 1) << id;
  EXPECT_GT(present, 10);
  std::printf("survived %d kills (%d of the proxy); %lld versions, %lld updates folded, %lld rejected\n", kills,
              proxy_kills, static_cast<long long>(r.newest), static_cast<long long>(r.updates_folded),
              static_cast<long long>(r.updates_rejected));
}

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
    async::init_run(*s, cfg);
  }
  std::vector<test::Proc> procs;
  for (int i = 0; i < 2; ++i)
    procs.push_back(test::start({"proxy", "--bucket", bucket, "--id", "p" + std::to_string(i)}, tmp.str("p.log")));
  for (int i = 0; i < 2; ++i)
    procs.push_back(test::start({"worker", "--bucket", bucket, "--id", "w" + std::to_string(i), "--threads", "1",
                                 "--cache-dir", cache},
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
  std::printf("%lld versions: %d by p0, %d by p1; %lld updates folded\n", static_cast<long long>(r.newest), by_proxy["p0"],
              by_proxy["p1"], static_cast<long long>(r.updates_folded));
  EXPECT_EQ(by_proxy["p0"] + by_proxy["p1"], r.newest);
  std::string log = test::read_text(tmp.str("p.log"));
  // Both really competed: at least one publish race was lost and handled.
  EXPECT_NE(log.find("was published by another proxy"), std::string::npos);
}
