// S3 faults over a whole run (issue 8): the proxy, two workers and the evaluator (the real
// bucketrl) reach the RGW server only through a TCP fault proxy that breaks a stated share
// of their requests: connection resets, answers cut off (mid-body where there is one), S3
// 500 InternalError / 503 SlowDown answers, and slow answers. The run must go on without a
// process dying, train, and leave a bucket that verifies when read directly (not through the
// faults). Resets and truncations of a create-only PUT that the server applied make its retry
// ambiguous (412 for our own object): no update a worker reports as not uploaded may be in
// the bucket, or its progress would be uploaded (and folded) twice.
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <regex>
#include <set>
#include <thread>

#include "../store/tcp_fault_proxy.h"
#include "chaos_util.h"

using namespace brl;

namespace {

std::string tail_of(const std::string& path, size_t n = 3000) {
  std::string t = test::read_text(path);
  return t.size() > n ? t.substr(t.size() - n) : t;
}

// Stops p with SIGTERM and expects a clean exit: a process that died of an injected fault
// (or hangs on one) fails the test.
void expect_clean_stop(test::Proc& p, const std::string& name) {
  if (p.pid <= 0) return;
  int st = test::stop(p);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
      << name << " did not stop cleanly (status " << st << "); log tail:\n"
      << tail_of(p.log);
}

}  // namespace

TEST(FaultsS3, ARunThroughFivePercentFaultyRequestsCompletesAndVerifies) {
  const std::string url = test::s3_test_url("brl-faults-test");
  const std::string endpoint = std::getenv("AWS_ENDPOINT_URL");
  test::TempDir tmp;
  RunConfig cfg = test::learnable_config(test::make_base(tmp.str("base")), tmp.str("out"));

  // 5% of requests: 1.5% reset, 1% truncated, 1.5% S3 error answers, 1% slow (0.2-1.5 s).
  // No hangs: the client's low-speed timeout (20 s) would make them dominate the run time.
  brl::testing::TcpFaultProxy::Faults f;
  f.reset = 0.015;
  f.truncate = 0.01;
  f.error = 0.015;
  f.slow = 0.01;
  brl::testing::TcpFaultProxy net(std::atoi(endpoint.substr(endpoint.rfind(':') + 1).c_str()), f, /*seed=*/20261203);

  test::Cluster c;
  c.bucket = test::init_bucket(tmp, cfg, url);  // directly: the run's processes are what is under test
  c.dir = tmp.str();
  c.workers = 2;
  c.env = {{"AWS_ENDPOINT_URL", "http://127.0.0.1:" + std::to_string(net.port())}};
  auto t0 = std::chrono::steady_clock::now();
  c.start_all();
  test::Proc ev = test::start(
      {"evaluator", "--bucket", url, "--cache-dir", c.dir + "/cache", "--threads", "1", "--min-interval", "4"},
      c.dir + "/evaluator.log", test::Placement{"", c.env});
  struct KillLeft {  // a failed ASSERT must not leave processes behind
    std::vector<test::Proc>& procs;
    test::Proc& ev;
    ~KillLeft() {
      for (auto& p : procs) test::stop(p, SIGKILL);
      test::stop(ev, SIGKILL);
    }
  } kill_left{c.procs, ev};

  // 45 s of training; a process that exits before it is stopped died of a fault.
  const double kSeconds = 45;
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < kSeconds) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    for (size_t k = 0; k < c.procs.size(); ++k)
      ASSERT_EQ(waitpid(c.procs[k].pid, nullptr, WNOHANG), 0) << c.name(k) << " exited mid-run; log tail:\n"
                                                              << tail_of(c.log(k));
    ASSERT_EQ(waitpid(ev.pid, nullptr, WNOHANG), 0) << "the evaluator exited mid-run; log tail:\n" << tail_of(ev.log);
  }
  // The clean stop goes through the faults too: the workers' last uploads, the proxy's last fold.
  for (size_t k = 1; k < c.procs.size(); ++k) expect_clean_stop(c.procs[k], c.name(k));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  expect_clean_stop(c.procs[0], "proxy");
  expect_clean_stop(ev, "evaluator");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto n = net.counts();
  net.stop();
  std::printf(
      "fault proxy: %d of %d requests faulty (%.1f%%): %d reset, %d truncated, %d S3 errors, %d slow; run %.0f s\n",
      n.injected(), n.requests, 100.0 * n.injected() / std::max(1, n.requests), n.reset, n.truncate, n.error, n.slow,
      seconds);
  ::testing::Test::RecordProperty("requests", n.requests);
  ::testing::Test::RecordProperty("faults", n.injected());
  EXPECT_GT(n.requests, 300) << "too few requests to say anything";
  EXPECT_GT(n.injected(), 0);
  EXPECT_GT(n.reset, 0);
  EXPECT_GT(n.truncate, 0);
  EXPECT_GT(n.error, 0);

  // From the bucket directly: the invariants, nothing rejected as corrupt, train reward up.
  auto s = protocol::open_bucket(url);
  auto r = test::check_after_chaos(*s, 4);
  std::printf("%s\n", r.summary().c_str());

  // Every update a worker logged as not uploaded is absent (its progress went into a later one).
  const std::regex failed("upload of update (\\S+) failed");
  int reported_failed = 0;
  for (size_t k = 1; k < c.procs.size(); ++k) {
    std::string log = test::read_text(c.log(k));
    for (std::sregex_iterator it(log.begin(), log.end(), failed), end; it != end; ++it) {
      ++reported_failed;
      auto h = s->head(protocol::update_key(c.name(k), (*it)[1].str()));
      EXPECT_FALSE(h) << c.name(k) << " reported update " << (*it)[1]
                      << " as failed, but it is in the bucket: its progress "
                      << "is uploaded twice";
    }
  }
  std::printf("uploads the workers reported failed: %d\n", reported_failed);

  // Held-out accuracy (the evaluator, through the faults too) rose from the random model's.
  auto evs = s->list_all(protocol::evals_prefix()).value();
  ASSERT_GE(evs.size(), 2u);
  auto first = protocol::EvalRecord::parse(s->get(evs.front().key).value(), "first").value();
  auto last = protocol::EvalRecord::parse(s->get(evs.back().key).value(), "last").value();
  std::printf("held-out accuracy: %.3f at v%lld, %.3f at v%lld\n", first.accuracy,
              static_cast<long long>(first.version), last.accuracy, static_cast<long long>(last.version));
  EXPECT_EQ(first.version, 0);
  EXPECT_LT(first.accuracy, 0.2);
  EXPECT_GE(last.accuracy, 0.8);
}
