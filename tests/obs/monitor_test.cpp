// The proxy's monitor over a directory bucket of hand-made manifests: the history (reward
// mean and spread computed by hand), per-worker totals, rejected updates, counters that
// count only what appeared after the proxy started, /status and /metrics over HTTP.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "config/run_config.h"
#include "http_client.h"
#include "obs/monitor.h"
#include "obs/proxy_http.h"
#include "prom_check.h"
#include "protocol/layout.h"
#include "protocol/status.h"
#include "store/local_store.h"
#include "../test_files.h"

using namespace brl;

namespace {

protocol::FoldedUpdate folded(const std::string& w, const std::string& id, int64_t samples, double reward,
                              uint64_t size, int64_t staleness) {
  protocol::FoldedUpdate u;
  u.worker = w;
  u.id = id;
  u.sha256 = u.payload_sha256 = std::string(64, 'a');
  u.samples = samples;
  u.reward_mean = reward;
  u.size = size;
  u.staleness = staleness;
  return u;
}

void put_manifest(store::ObjectStore& s, int64_t v, std::vector<protocol::FoldedUpdate> ups,
                  std::vector<protocol::RejectedUpdate> rej = {}, double agg_s = 0, nlohmann::json stats = {}) {
  protocol::Manifest m;
  m.version = v;
  m.parent = v - 1;
  m.created_ms = 1'700'000'000'000 + v * 60'000;
  m.proxy = "p-test";
  m.payload_key = protocol::version_dir(v) + "adapter-x.safetensors";
  m.payload_sha256 = std::string(64, 'b');
  m.updates = std::move(ups);
  m.rejected = std::move(rej);
  m.stats = {{"aggregate_seconds", agg_s}};
  if (stats.is_object()) m.stats.update(stats);
  ASSERT_TRUE(s.put(protocol::manifest_key(v), m.to_json().dump()));
}

obs::WorkerLive live_worker(const std::string& name, const std::string& health, int64_t age_ms) {
  obs::WorkerLive w;
  w.beat.worker = name;
  w.beat.state = "training";
  w.beat.time_ms = protocol::now_ms() - age_ms;
  w.beat.step = 42;
  w.beat.samples_per_s = 12.5;
  w.beat.device = name == "w0" ? "cuda:0 NVIDIA H200" : "";
  w.beat.device_memory_bytes = name == "w0" ? 3u << 30 : 0;
  w.health = protocol::kHealthNames.parse(health).value();
  return w;
}

}  // namespace

TEST(Monitor, SummarizesVersionsByHand) {
  protocol::Manifest m;
  m.version = 1;
  m.updates = {folded("w0", "a", 10, 0.2, 1000, 0), folded("w1", "b", 30, 0.6, 3000, 1)};
  m.stats = {{"aggregate_seconds", 0.125}};
  auto p = obs::summarize_version(m);
  // mean = (10*0.2 + 30*0.6) / 40 = 0.5; var = (10*0.09 + 30*0.01) / 40 = 0.03
  EXPECT_DOUBLE_EQ(p.reward_mean, 0.5);
  EXPECT_NEAR(p.reward_std, std::sqrt(0.03), 1e-12);
  EXPECT_EQ(p.samples, 40);
  EXPECT_EQ(p.bytes_in, 4000u);
  EXPECT_EQ(p.updates, 2);
  EXPECT_DOUBLE_EQ(p.staleness_mean, 0.5);
  EXPECT_DOUBLE_EQ(p.aggregate_s, 0.125);
}

TEST(Monitor, StatusAndMetricsFromTheBucketAndTheLiveState) {
  test::TempDir tmp;
  auto bucket = std::make_unique<store::LocalStore>(tmp.path.string());
  put_manifest(*bucket, 0, {});
  put_manifest(*bucket, 1, {folded("w0", "a", 10, 0.2, 1000, 0), folded("w1", "b", 30, 0.6, 3000, 1)},
               {{"w2", "c", "stale: base version 0 is 9 versions behind (max_staleness 8)"}});
  put_manifest(*bucket, 2, {folded("w0", "d", 20, 0.7, 1000, 0)});
  store::LocalStore writer(tmp.path.string());
  ASSERT_TRUE(
      writer.put(protocol::eval_key(2), protocol::EvalRecord{2, 200, 1, 0.5, 0.5, 8, 0.25, 0.75}.to_json().dump()));
  obs::Monitor mon(std::move(bucket));
  obs::HttpServer server({"127.0.0.1", 0, false}, "");
  obs::add_proxy_routes(server, mon);
  ASSERT_TRUE(server.start());
  const int port = server.port();
  EXPECT_EQ(test::http_get(port, "/health").status, 503);  // the proxy has not read the run yet

  protocol::RunDescription run;
  run.run_id = "run-obs";
  run.config = RunConfig().to_json();
  obs::ProxyLive live;
  live.version = 2;
  live.accepted = 3;
  live.rejected = 1;
  live.rejected_by_reason = {{"stale", 1}};
  live.workers = {{"w0", live_worker("w0", "alive", 1000)}, {"w1", live_worker("w1", "lost", 90'000)}};
  mon.update(live);
  mon.set_run(run, "p-test", 2);
  mon.sync_once();
  EXPECT_EQ(test::http_get(port, "/health").status, 200);

  auto st = mon.status();
  EXPECT_EQ(st["run"]["id"], "run-obs");
  EXPECT_EQ(st["proxy"]["id"], "p-test");
  EXPECT_EQ(st["version"], 2);
  ASSERT_EQ(st["versions"].size(), 3u);
  EXPECT_DOUBLE_EQ(st["versions"][1]["reward_mean"].get<double>(), 0.5);
  EXPECT_EQ(st["versions"][1]["bytes_in"], 4000);
  ASSERT_EQ(st["rejected"].size(), 1u);
  EXPECT_EQ(st["rejected"][0]["worker"], "w2");
  EXPECT_EQ(st["rejected"][0]["version"], 1);
  EXPECT_EQ(st["run_health"]["state"], "ok");
  ASSERT_EQ(st["evals"].size(), 1u);
  EXPECT_EQ(st["evals"][0]["k"], 8);
  EXPECT_DOUBLE_EQ(st["evals"][0]["pass_at_1"].get<double>(), 0.25);
  std::map<std::string, nlohmann::json> ws;
  for (auto& w : st["workers"]) ws[w["worker"].get<std::string>()] = w;
  ASSERT_EQ(ws.size(), 3u);  // two with heartbeats, one known only from a manifest
  EXPECT_EQ(ws["w0"]["folded"], 2);
  EXPECT_EQ(ws["w0"]["health"], "alive");
  EXPECT_EQ(ws["w0"]["step"], 42);
  EXPECT_EQ(ws["w0"]["device"], "cuda:0 NVIDIA H200");  // the heartbeat's, through /status
  EXPECT_EQ(ws["w0"]["device_memory_bytes"], 3u << 30);
  EXPECT_NEAR(ws["w1"]["age_s"].get<double>(), 90, 5);
  EXPECT_EQ(ws["w1"]["health"], "lost");
  EXPECT_DOUBLE_EQ(ws["w1"]["staleness_mean"].get<double>(), 1.0);
  EXPECT_EQ(ws["w2"]["rejected"], 1);
  EXPECT_EQ(ws["w2"]["health"], "unknown");

  std::string text = mon.metrics();
  EXPECT_EQ(test::check_prometheus_text(text), "") << text;
  for (const char* line :
       {"bucketrl_ready 1\n", "bucketrl_version 2\n", "bucketrl_updates_accepted_total 3\n",
        "bucketrl_updates_rejected_total{reason=\"stale\"} 1\n", "bucketrl_workers{state=\"alive\"} 1\n",
        "bucketrl_workers{state=\"lost\"} 1\n", "bucketrl_workers{state=\"stopped\"} 0\n",
        "bucketrl_bytes_in_total 0\n",  // v0..v2 were there before this proxy started
        "bucketrl_train_reward 0.7\n", "bucketrl_worker_updates_folded{worker=\"w0\"} 2\n",
        "bucketrl_worker_device_memory_bytes{worker=\"w0\",device=\"cuda:0 NVIDIA H200\"} 3221225472\n",
        "bucketrl_heldout_accuracy 0.5\n", "bucketrl_heldout_pass_at_k{k=\"1\"} 0.25\n",
        "bucketrl_heldout_pass_at_k{k=\"8\"} 0.75\n", "bucketrl_run_health{state=\"ok\"} 1\n",
        "bucketrl_run_health{state=\"collapsed\"} 0\n", "bucketrl_run_health_since_version -1\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << " in\n" << text;

  // A new version appears: the reader picks it up, the counters count it.
  put_manifest(writer, 3, {folded("w1", "e", 10, 0.9, 500, 2)}, {}, 0.25);
  live.version = 3;
  mon.update(live);
  mon.sync_once();
  text = mon.metrics();
  for (const char* line :
       {"bucketrl_version 3\n", "bucketrl_bytes_in_total 500\n", "bucketrl_aggregation_seconds_sum 0.25\n",
        "bucketrl_aggregation_seconds_count 1\n", "bucketrl_train_reward 0.9\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << " in\n" << text;

  auto s = test::http_get(port, "/status");
  ASSERT_EQ(s.status, 200);
  auto j = nlohmann::json::parse(s.body);
  EXPECT_EQ(j["version"], 3);
  EXPECT_EQ(j["versions"].size(), 4u);
  auto m = test::http_get(port, "/metrics");
  EXPECT_NE(m.head.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << m.head;
  EXPECT_EQ(test::check_prometheus_text(m.body), "");
  auto d = test::http_get(port, "/");
  EXPECT_NE(d.head.find("text/html"), std::string::npos);
  EXPECT_NE(d.body.find("id=\"chart-reward-time\""), std::string::npos);
  EXPECT_EQ(d.body.find("http://"), std::string::npos);  // self-contained: nothing fetched from elsewhere
  EXPECT_EQ(d.body.find("https://"), std::string::npos);
}

// A run that learned and then lost every bit of reward variance: the proxy's /status and
// /metrics and `bucketrl status` (from the bucket alone) all call it collapsed, from v4.
TEST(Monitor, CollapsedRunIsFlaggedEverywhere) {
  test::TempDir tmp;
  store::LocalStore writer(tmp.path.string());
  protocol::RunDescription run;
  run.run_id = "run-collapse";
  run.config = RunConfig().to_json();
  ASSERT_TRUE(writer.put(protocol::run_key(), run.to_json().dump()));
  put_manifest(writer, 0, {});
  for (int64_t v = 1; v <= 23; ++v) {
    const bool early = v <= 3;  // then 20 versions (proxy.collapse_versions) without variance
    put_manifest(writer, v, {folded("w0", "u" + std::to_string(100 + v), 64, early ? 0.9 : 0.0, 100, 0)}, {}, 0,
                 {{"reward_mean", early ? 0.9 : 0.0},
                  {"frac_reward_zero_std", early ? 0.2 : 1.0},
                  {"best_reward", {{"version", 1}, {"reward_mean", 0.9}}}});  // as the proxy records it
  }
  ASSERT_TRUE(writer.put(protocol::latest_key(), "23"));
  obs::Monitor mon(std::make_unique<store::LocalStore>(tmp.path.string()));
  obs::ProxyLive live;
  live.version = 23;
  mon.update(live);
  mon.set_run(run, "p-test", 23);
  mon.sync_once();
  auto h = mon.status()["run_health"];
  EXPECT_EQ(h["state"], "collapsed") << h.dump();
  EXPECT_EQ(h["since_version"], 4);
  std::string text = mon.metrics();
  for (const char* line : {"bucketrl_run_health{state=\"collapsed\"} 1\n", "bucketrl_run_health{state=\"ok\"} 0\n",
                           "bucketrl_run_health_since_version 4\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << " in\n" << text;
  // Shows 5 versions, judges health over the newest 20: the best (v1) only through best_reward.
  auto st = protocol::run_status(writer, 5);
  EXPECT_EQ(st["run_health"], h);
  EXPECT_NE(protocol::format_status(st).find("run health: collapsed since v4"), std::string::npos);
}

TEST(Monitor, TokenFromFileOrEnvironment) {
  test::TempDir tmp;
  std::string f = (tmp.path / "token").string();
  FILE* fp = std::fopen(f.c_str(), "w");
  std::fputs("  tok-from-file \nsecond line\n", fp);
  std::fclose(fp);
  setenv(obs::kTokenEnv, "tok-from-env", 1);
  EXPECT_EQ(obs::resolve_http_token(f), "tok-from-file");
  EXPECT_EQ(obs::resolve_http_token(""), "tok-from-env");
  unsetenv(obs::kTokenEnv);
  EXPECT_EQ(obs::resolve_http_token(""), "");
  EXPECT_THROW(obs::resolve_http_token((tmp.path / "missing").string()), UserError);
  // Beyond loopback without a token: a clear refusal, not a warning.
  EXPECT_THROW(obs::start_proxy_http(tmp.path.string(), "0.0.0.0:0", ""), UserError);
  EXPECT_EQ(obs::start_proxy_http(tmp.path.string(), "off", ""), nullptr);
}
