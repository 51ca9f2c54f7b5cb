// What the proxy records for run health (protocol/health.h): each version's sample-weighted
// frac_reward_zero_std over the updates that report it, and the best train reward so far,
// carried from manifest to manifest and across a proxy restart.
#include <gtest/gtest.h>

#include "proxy/proxy.h"
#include "protocol/health.h"
#include "proxy_util.h"
#include "store/local_store.h"

using namespace brl;

namespace {
// Worker w's seq-th update (a delta of its own: the proxy refuses replays) with its train
// reward and share of uniform groups (-1: not reported).
void put_update(store::ObjectStore& s, const std::string& w, int64_t seq, int64_t base, int64_t samples, double reward,
                double zero_std) {
  auto h = test::update_header(w, seq, base, samples);
  h.reward_mean = reward;
  h.frac_reward_zero_std = zero_std;
  ASSERT_TRUE(
      s.put(protocol::update_key(w, h.id),
            protocol::encode_update(h, test::fp32_payload(test::tiny_delta(0.01f * static_cast<float>(seq + 1))))));
}
}  // namespace

TEST(ProxyHealth, RecordsUniformGroupsAndTheBestRewardSoFar) {
  test::TempDir tmp;
  const std::string dir = tmp.str("bucket");
  store::LocalStore s(dir);
  test::make_run(s, RunConfig(), test::tiny_v0());
  put_update(s, "wa", 0, 0, 30, 0.8, 0.5);
  put_update(s, "wb", 1, 0, 10, 0.4, 1.0);
  proxy::Proxy p(test::proxy_options(dir, "p1"));
  ASSERT_TRUE(p.poll_once());
  auto m1 = protocol::read_manifest(s, 1).value();
  EXPECT_DOUBLE_EQ(m1.stats["frac_reward_zero_std"].get<double>(), (30 * 0.5 + 10 * 1.0) / 40);
  EXPECT_DOUBLE_EQ(m1.stats["reward_mean"].get<double>(), (30 * 0.8 + 10 * 0.4) / 40);
  EXPECT_EQ(m1.stats["best_reward"]["version"], 1);
  EXPECT_EQ(m1.updates[1].frac_reward_zero_std, 1.0);

  // A worse version keeps v1 as the best; an update that does not report the share leaves
  // the version without it.
  put_update(s, "wa", 2, 1, 20, 0.1, -1);
  ASSERT_TRUE(p.poll_once());
  auto m2 = protocol::read_manifest(s, 2).value();
  EXPECT_FALSE(m2.stats.contains("frac_reward_zero_std"));
  EXPECT_EQ(m2.stats["best_reward"]["version"], 1);
  EXPECT_DOUBLE_EQ(m2.stats["best_reward"]["reward_mean"].get<double>(), 0.7);

  // A restarted proxy continues from the newest manifest's record, then a better version wins.
  proxy::Proxy q(test::proxy_options(dir, "p2"));
  put_update(s, "wb", 3, 2, 10, 0.05, 1.0);
  ASSERT_TRUE(q.poll_once());
  EXPECT_EQ(protocol::read_manifest(s, 3).value().stats["best_reward"]["version"], 1);
  put_update(s, "wb", 4, 3, 10, 0.9, 0.0);
  ASSERT_TRUE(q.poll_once());
  auto m4 = protocol::read_manifest(s, 4).value();
  EXPECT_EQ(m4.stats["best_reward"]["version"], 4);
  auto sig = protocol::version_signal(m4);
  EXPECT_EQ(sig.best_version, 4);
  EXPECT_DOUBLE_EQ(sig.best_reward, 0.9);
  EXPECT_DOUBLE_EQ(sig.frac_reward_zero_std, 0.0);
}
