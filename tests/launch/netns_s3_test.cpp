// Several hosts (tests/launch/netns_util.h): the proxy, two workers and the evaluator each in a
// network namespace of their own, the S3 server (Ceph RGW, scripts/s3-server.sh) in the
// test's, reached over each host's own veth link; nothing can talk but through the bucket.
// Mid-run, worker w1's link is cut for 20 s, then the proxy's for 15 s. While w1 is away the
// proxy and w0 keep publishing, and the proxy sees w1 lost; back, w1 resumes and the update it
// made while cut off meets the staleness rules. While the proxy is away the workers keep
// uploading, and back, it folds all of that. Then the run's invariants from the bucket alone.
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>

#include "chaos_util.h"
#include "netns_util.h"
#include "protocol/update.h"

using namespace brl;

namespace {

using Clock = std::chrono::steady_clock;

bool wait_for(double seconds, const std::function<bool()>& done) {
  auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return true;
}

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

bool alive(const test::Proc& p) { return p.pid > 0 && waitpid(p.pid, nullptr, WNOHANG) == 0; }

int64_t newest(store::ObjectStore& s) {
  auto v = protocol::newest_version(s);
  return v ? *v : -1;
}

// What the manifests of versions 1..newest say of each update, by worker/id.
struct Record {
  int64_t version = 0;
  bool folded = false;
  protocol::FoldedUpdate u;  // when folded
  std::string reason;        // when rejected
};
std::map<std::string, Record> records(store::ObjectStore& s) {
  std::map<std::string, Record> r;
  for (int64_t v = 1, n = newest(s); v <= n; ++v) {
    auto m = protocol::read_manifest(s, v);
    if (!m) continue;
    for (auto& u : m->updates) r[u.worker + "/" + u.id] = {v, true, u, ""};
    for (auto& x : m->rejected) r[x.worker + "/" + x.id] = {v, false, {}, x.reason};
  }
  return r;
}

// Ids of the update objects of `worker` made (by the id's time) within [from_ms, to_ms].
std::vector<std::string> made_between(store::ObjectStore& s, const std::string& worker, int64_t from_ms,
                                      int64_t to_ms) {
  std::vector<std::string> ids;
  for (auto& o : s.list_all(protocol::updates_prefix() + worker + "/").value())
    if (auto k = protocol::parse_update_key(o.key))
      if (auto t = protocol::update_id_time(k->second); t && *t >= from_ms && *t <= to_ms) ids.push_back(k->second);
  return ids;
}

// One link cut for `seconds`, then restored: the newest version and the time at either end.
struct Outage {
  int64_t v_from = 0, v_to = 0, from_ms = 0, to_ms = 0;
};
Outage cut_for(test::Network& net, const std::string& host, double seconds, store::ObjectStore& s,
               const test::Proc& p) {
  Outage o{newest(s), 0, protocol::now_ms(), 0};
  net.cut(host);
  sleep_s(seconds);
  o.v_to = newest(s);
  o.to_ms = protocol::now_ms();
  EXPECT_TRUE(alive(p)) << host << " died while cut off";
  net.restore(host);
  std::printf("%s cut for %.0f s: v%lld -> v%lld meanwhile\n", host.c_str(), seconds, static_cast<long long>(o.v_from),
              static_cast<long long>(o.v_to));
  return o;
}

// SIGKILLs whatever still runs when the test leaves early (a failed ASSERT).
struct KillLeftovers {
  std::vector<test::Proc>& procs;
  ~KillLeftovers() {
    for (auto& p : procs) test::stop(p, SIGKILL);
  }
};

}  // namespace

TEST(NetnsS3, CutAWorkerAndTheProxyOffTheBucketAndTheRunGoesOn) {
  for (const char* v : {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "BRL_S3_TEST_BUCKET"})
    ASSERT_TRUE(std::getenv(v) && *std::getenv(v))
        << v << " is not set: run scripts/s3-server.sh start && source .cache/s3/env.sh";
  if (std::string why = test::netns_unavailable(); !why.empty()) GTEST_SKIP() << why;
  // The relay's target: the server as the test sees it (http://127.0.0.1:7480 from env.sh).
  std::string endpoint = std::getenv("AWS_ENDPOINT_URL");
  ASSERT_EQ(endpoint.rfind("http://", 0), 0u) << endpoint;
  std::string hostport = endpoint.substr(7, endpoint.find('/', 7) - 7);
  ASSERT_NE(hostport.find(':'), std::string::npos) << endpoint;
  std::string rgw_host = hostport.substr(0, hostport.find(':'));
  int rgw_port = std::stoi(hostport.substr(hostport.find(':') + 1));
  if (rgw_host == "localhost") rgw_host = "127.0.0.1";

  std::string url = "s3://" + std::string(std::getenv("BRL_S3_TEST_BUCKET")) + "/brl-netns-test-" +
                    std::to_string(getpid()) + "-" +
                    std::to_string(std::chrono::system_clock::now().time_since_epoch().count() % 1000000007);
  test::TempDir tmp;
  RunConfig cfg = test::learnable_config(test::make_base(tmp.str("base")), tmp.str("out"));
  cfg.proxy.heartbeat_timeout_s = 6;  // so that the proxy sees w1 lost during its 20 s away
  auto s = protocol::open_bucket(url);

  const std::vector<std::string> names{"proxy", "w0", "w1", "eval"};
  test::Network net(names);
  std::vector<std::string> root_addrs;
  for (auto& h : net.hosts()) root_addrs.push_back(h.root_addr);
  test::TcpRelay relay(root_addrs, rgw_host, rgw_port);
  std::vector<test::Placement> at;
  for (size_t k = 0; k < names.size(); ++k) {
    std::string ep = "http://" + net.hosts()[k].root_addr + ":" + std::to_string(relay.port(k));
    at.push_back({net.hosts()[k].netns, {{"AWS_ENDPOINT_URL", ep}, {"AWS_ENDPOINT_URL_S3", ep}}});
  }
  // Listening on every address of its namespace, so that only routing keeps workers away.
  const int http_port = 9470;
  at[0].env.push_back({"BRL_PROXY_TOKEN", "netns-test-token"});

  test::Cluster c;
  c.workers = 2;
  c.bucket = test::init_bucket(tmp, cfg, url);
  c.dir = tmp.str();
  c.cache_per_process = true;  // each host fetches the base model through its own link
  c.proxy_extra = {"--http", "0.0.0.0:" + std::to_string(http_port)};
  c.placement = {at[0], at[1], at[2]};
  c.start_all();
  c.procs.push_back(test::start(
      {"evaluator", "--bucket", url, "--threads", "1", "--cache-dir", tmp.str("cache-eval"), "--min-interval", "2"},
      tmp.str("eval.log"), at[3]));
  KillLeftovers guard{c.procs};
  auto t0 = Clock::now();
  auto now_s = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };

  // Isolation: every process is in its namespace; the proxy's port answers on its link (from
  // the test's side) but not from any other host; a host reaches only its own relay address;
  // the S3 server's loopback port is not there inside a host.
  const auto &P = net.host("proxy"), &W0 = net.host("w0"), &W1 = net.host("w1");
  ASSERT_TRUE(wait_for(60, [&] { return test::reachable("", P.ns_addr, http_port); }))
      << "the proxy's HTTP never came up";
  for (size_t k = 0; k < names.size(); ++k)
    EXPECT_TRUE(test::in_netns(c.procs[k].pid, net.hosts()[k].netns)) << names[k];
  for (auto& n : {"w0", "w1", "eval"}) {
    EXPECT_FALSE(test::reachable(net.host(n).netns, P.ns_addr, http_port)) << n << " reaches the proxy directly";
    EXPECT_FALSE(test::reachable(net.host(n).netns, "127.0.0.1", rgw_port))
        << n << " reaches the S3 server on loopback";
  }
  EXPECT_TRUE(test::reachable(W0.netns, W0.root_addr, relay.port(1)));
  EXPECT_FALSE(test::reachable(W0.netns, W1.root_addr, relay.port(2))) << "w0 reaches w1's link";

  // Warm-up: both workers folded in.
  auto both_folded = [&] {
    std::set<std::string> ws;
    for (auto& [k, r] : records(*s))
      if (r.folded) ws.insert(r.u.worker);
    return ws.size() == 2;
  };
  ASSERT_TRUE(wait_for(90, both_folded)) << "both workers never got folded in; see " << tmp.str();
  std::printf("[%5.1f s] warm: v%lld, both workers folded in\n", now_s(), static_cast<long long>(newest(*s)));

  // --- w1 cut off for 20 s. A cut that catches w1 inside a bucket request leaves it there for
  // the whole cut (the link goes down under an open connection, which curl gives up on only
  // after 20 s without progress, and the retry runs after the restore): then it made nothing
  // while away and the cut is done again, at most twice more, to see what it makes.
  Outage w1_out;
  int64_t v_cut = 0, v_back = 0;
  std::vector<std::string> stale_ids;
  for (int attempt = 1; attempt <= 3 && stale_ids.empty(); ++attempt) {
    w1_out = cut_for(net, "w1", 20, *s, c.procs[2]);
    v_cut = w1_out.v_from, v_back = w1_out.v_to;
    EXPECT_GE(v_back - v_cut, 3) << "the proxy and w0 did not go on without w1";
    // Back: what w1 made while away is either folded with its staleness (and the weight that
    // goes with it) or rejected as stale; then w1 adopts a current version and is folded again.
    ASSERT_TRUE(wait_for(60,
                         [&] {
                           stale_ids = made_between(*s, "w1", w1_out.from_ms, w1_out.to_ms);
                           auto r = records(*s);
                           bool all = true;
                           for (auto& id : stale_ids) all = all && r.count("w1/" + id);
                           bool fresh = false;  // a w1 update built on a version published after it came back
                           for (auto& [k, x] : r)
                             fresh = fresh || (x.folded && x.u.worker == "w1" && x.u.base_version > v_back);
                           return all && fresh;
                         }))
        << "w1 did not resume: " << stale_ids.size() << " updates made while cut off";
    if (stale_ids.empty()) std::printf("  w1 made no update while cut off (held in a bucket request): again\n");
  }
  ASSERT_FALSE(stale_ids.empty()) << "three cuts each caught w1 inside a bucket request";
  {
    auto r = records(*s);
    for (auto& id : stale_ids) {
      const Record& x = r["w1/" + id];
      if (x.folded) {
        EXPECT_LE(x.u.base_version, v_cut + 1) << id;  // it could adopt nothing while cut off
        EXPECT_GE(x.u.staleness, 1) << id;
        EXPECT_EQ(x.u.weight, x.u.samples) << id;
        EXPECT_NEAR(x.u.discount, std::pow(1.0 + x.u.staleness, -cfg.aggregation.staleness_exponent), 1e-6) << id;
      } else {
        EXPECT_EQ(x.reason.rfind("stale:", 0), 0u) << id << ": " << x.reason;
      }
      std::printf("  w1's update %s made while cut off: %s in v%lld\n", id.c_str(),
                  x.folded ? ("folded with staleness " + std::to_string(x.u.staleness)).c_str() : x.reason.c_str(),
                  static_cast<long long>(x.version));
    }
  }
  std::printf("[%5.1f s] w1 resumed: v%lld\n", now_s(), static_cast<long long>(newest(*s)));
  // The proxy's view (heartbeats): w1 lost while away, then back (straggling at first: its
  // throughput counts the time it spent stalled).
  std::string plog = test::read_text(c.log(0));
  size_t lost = plog.find("worker w1 is lost");
  ASSERT_NE(lost, std::string::npos) << "the proxy never saw w1 lost";
  size_t next = plog.find("worker w1 is ", lost + 1);
  EXPECT_TRUE(next != std::string::npos &&
              (plog.compare(next + 13, 5, "alive") == 0 || plog.compare(next + 13, 10, "straggling") == 0))
      << "the proxy never saw w1 back";

  // --- the proxy cut off for 15 s: nothing is published, the workers keep uploading.
  auto p_out = cut_for(net, "proxy", 15, *s, c.procs[0]);
  const int64_t v_pcut = p_out.v_from, v_pback = p_out.v_to;
  // One publish may have been on the wire as the link went.
  EXPECT_LE(v_pback, v_pcut + 1) << "a version was published by a proxy that had no link";
  std::vector<std::string> made[2] = {made_between(*s, "w0", p_out.from_ms, p_out.to_ms),
                                      made_between(*s, "w1", p_out.from_ms, p_out.to_ms)};
  std::printf("[%5.1f s] updates made while the proxy was cut off: w0 %zu, w1 %zu\n", now_s(), made[0].size(),
              made[1].size());
  EXPECT_GE(made[0].size(), 3u);
  EXPECT_GE(made[1].size(), 3u);
  // Back: it folds every one of them (built on v_pcut or the one before: not stale).
  EXPECT_TRUE(wait_for(60, [&] {
    auto r = records(*s);
    for (int i = 0; i < 2; ++i)
      for (auto& id : made[i])
        if (!r.count(c.name(1 + i) + "/" + id)) return false;
    return true;
  })) << "the proxy did not catch up";
  {
    auto r = records(*s);
    for (int i = 0; i < 2; ++i)
      for (auto& id : made[i]) {
        auto& x = r[c.name(1 + i) + "/" + id];
        EXPECT_TRUE(x.folded) << c.name(1 + i) << "/" << id << ": " << x.reason;
      }
  }
  int64_t v_caught = newest(*s);
  std::printf("[%5.1f s] proxy caught up: v%lld\n", now_s(), static_cast<long long>(v_caught));
  EXPECT_TRUE(wait_for(30, [&] { return newest(*s) >= v_caught + 3; })) << "the run stalled after the cuts";

  // Clean stop: every process exits with status 0 (none died of the cuts).
  auto eval = c.procs.back();
  c.procs.pop_back();  // the Cluster's own: the proxy and the workers
  auto st = c.stop_all();
  sleep_s(1);
  st.push_back(test::stop(eval));
  for (size_t k = 0; k < st.size(); ++k) {
    std::string log = test::read_text(k < 3 ? c.log(k) : tmp.str("eval.log"));
    EXPECT_TRUE(WIFEXITED(st[k]) && WEXITSTATUS(st[k]) == 0) << names[k] << " ended with wait status " << st[k] << ":\n"
                                                             << log.substr(log.size() > 3000 ? log.size() - 3000 : 0);
  }
  std::printf("[%5.1f s] stopped\n", now_s());

  // The invariants, training progress, both workers folded, held-out accuracy up.
  auto rep = test::check_after_chaos(*s, v_caught);
  auto r = records(*s);
  std::set<std::string> folded_by;
  for (auto& [k, x] : r)
    if (x.folded) {
      folded_by.insert(x.u.worker);
      EXPECT_EQ(x.u.staleness, x.version - 1 - x.u.base_version) << k;
      EXPECT_LE(x.u.staleness, cfg.aggregation.max_staleness) << k;
    }
  EXPECT_EQ(folded_by, (std::set<std::string>{"w0", "w1"}));
  auto evs = s->list_all(protocol::evals_prefix()).value();
  ASSERT_GE(evs.size(), 2u);
  auto first = protocol::EvalRecord::parse(s->get(evs.front().key).value(), "first").value();
  auto last = protocol::EvalRecord::parse(s->get(evs.back().key).value(), "last").value();
  std::printf("held-out accuracy: %.2f at v%lld, %.2f at v%lld; %s\n", first.accuracy,
              static_cast<long long>(first.version), last.accuracy, static_cast<long long>(last.version),
              rep.summary().c_str());
  EXPECT_EQ(first.version, 0);
  EXPECT_LT(first.accuracy, 0.2);
  EXPECT_GE(last.accuracy, 0.8) << "at v" << last.version;
  ::testing::Test::RecordProperty("versions_while_worker_cut", static_cast<int>(v_back - v_cut));
  ::testing::Test::RecordProperty("versions", static_cast<int>(rep.newest));
}
