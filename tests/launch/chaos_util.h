// Chaos: SIGKILL a random process of a running Cluster (the proxy or a worker) again and
// again, at random moments and at aimed ones (the moment a worker's next update or the
// proxy's next payload starts to appear: mid-upload, mid-publish), restarting each one; then
// the run's invariants from the bucket alone. Used by chaos_slow_test (directory bucket),
// chaos_s3_test (RGW) and scripts/chaos.sh (a soak of any length on any bucket).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>

#include "async_util.h"
#include "protocol/bucket.h"
#include "protocol/health.h"
#include "protocol/layout.h"
#include "protocol/verify.h"
#include "store/object_store.h"

namespace brl::test {

struct ChaosResult {
  int kills = 0, proxy_kills = 0, aimed = 0;  // aimed: right as a new object appeared or was being written
  double seconds = 0;
};

// Whether the directory store is writing an object under dir/prefix right now (its temporary
// files are invisible to listings, not to the file system).
inline bool writing_under(const std::string& dir, const std::string& prefix) {
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(std::filesystem::path(dir) / prefix, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
    if (it->path().filename().string().rfind(store::kTempPrefix, 0) == 0) return true;
  return false;
}

// Kills and restarts processes of `c` (already started) for `seconds`; seeded, so the choice
// of victims and delays is reproducible (the moments they hit are not). new_machines: a
// worker comes back with an empty disk, as a spot machine replaced by another does (needs
// c.cache_per_process).
inline ChaosResult chaos(Cluster& c, double seconds, uint64_t seed, bool new_machines = false) {
  using Clock = std::chrono::steady_clock;
  using std::chrono::milliseconds;
  auto s = protocol::open_bucket(c.bucket);
  const bool dir = std::filesystem::is_directory(c.bucket);
  const auto poll = milliseconds(dir ? 2 : 25);
  auto count = [&](const std::string& prefix) {
    auto l = s->list_all(prefix);
    return l ? l->size() : size_t{0};
  };
  std::mt19937_64 rng(seed);
  ChaosResult r;
  auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  while (elapsed() < seconds) {
    size_t k = rng() % c.procs.size();
    if (rng() % 2) {
      std::this_thread::sleep_for(milliseconds(200 + rng() % 2300));  // whatever it is doing
    } else {
      // The victim's next write: a worker's update, the proxy's next version (payload first,
      // then manifest, then LATEST): kill it a few ms after it starts or lands.
      std::string prefix = k == 0 ? "global/" : protocol::updates_prefix() + c.name(k) + "/";
      size_t before = count(prefix);
      auto deadline = Clock::now() + std::chrono::seconds(4);
      bool seen = false;
      while (!seen && Clock::now() < deadline) {
        std::this_thread::sleep_for(poll);
        seen = (dir && writing_under(c.bucket, prefix)) || count(prefix) != before;
      }
      r.aimed += seen;
      std::this_thread::sleep_for(milliseconds(rng() % 25));
    }
    stop(c.procs[k], SIGKILL);
    ++r.kills;
    r.proxy_kills += k == 0;
    std::this_thread::sleep_for(milliseconds(rng() % 400));
    if (new_machines && k > 0) std::filesystem::remove_all(c.cache(k));
    c.start(k);
  }
  r.seconds = elapsed();
  return r;
}

// After a clean stop: verify_run (one chain of parent links, payloads match their manifests'
// sha256, no update folded twice, every update object recorded in exactly one manifest or
// still pending after its worker's cursor, every rejection with a reason), nothing rejected
// as corrupt (a killed upload leaves no half object), at least min_versions versions, and
// learning that holds for any duration (judged over the whole run, not its last versions
// against its first): the best stretch of versions (a tenth of them, at least 3) beats the
// workers' first updates by 0.1 in train reward, the final stretch stays within 0.2 of that
// best, and the run's health (protocol/health.h) is not "collapsed".
inline protocol::VerifyReport check_after_chaos(store::ObjectStore& s, int64_t min_versions) {
  auto r = protocol::verify_run(s);
  EXPECT_TRUE(r.ok()) << r.summary();
  EXPECT_GE(r.newest, min_versions) << r.summary();
  std::vector<protocol::VersionSignal> versions;        // those with updates
  std::map<std::string, protocol::FoldedUpdate> first;  // per worker: its first folded update
  for (int64_t v = 1; v <= r.newest; ++v) {
    auto m = protocol::read_manifest(s, v);
    if (!m) continue;
    for (auto& x : m->rejected)
      EXPECT_NE(x.reason.rfind("corrupt", 0), 0u) << x.worker << "/" << x.id << " in v" << v << ": " << x.reason;
    for (auto& u : m->updates)
      if (!first.count(u.worker) || u.id < first[u.worker].id) first[u.worker] = u;
    if (!m->updates.empty()) versions.push_back(protocol::version_signal(*m));
  }
  if (versions.size() >= 3 && !first.empty()) {
    double start = 0;
    for (auto& [w, u] : first) start += u.reward_mean / static_cast<double>(first.size());
    const size_t win = std::max<size_t>(3, versions.size() / 10);
    auto stretch = [&](size_t end) {  // mean train reward of versions [end - win, end)
      double sum = 0;
      for (size_t i = end - win; i < end; ++i) sum += versions[i].reward_mean;
      return sum / static_cast<double>(win);
    };
    double best = 0;
    size_t best_end = win;
    for (size_t end = win; end <= versions.size(); ++end)
      if (stretch(end) > best) best = stretch(end), best_end = end;
    const double last = stretch(versions.size());
    std::printf(
        "train reward: %.3f in the workers' first updates, best %.3f (v%lld..v%lld), %.3f in the last %zu versions\n",
        start, best, static_cast<long long>(versions[best_end - win].version),
        static_cast<long long>(versions[best_end - 1].version), last, win);
    EXPECT_GT(best, start + 0.1) << "no progress: train reward " << start << " -> at best " << best;
    EXPECT_GE(last, best - 0.2) << "learned, then unlearned: train reward " << best << " at best, " << last
                                << " at the end";
    auto health = protocol::assess_run(versions, {}, protocol::RunHealthRule{});
    EXPECT_NE(health.state, "collapsed") << health.detail;
  } else {
    ADD_FAILURE() << "only " << versions.size() << " versions with updates: " << r.summary();
  }
  return r;
}

struct ChaosRun {
  ChaosResult chaos;
  protocol::VerifyReport verify;
};

// The whole chaos case: a run of the learnable task in `url` (default: a directory in tmp),
// started, killed at for `seconds`, stopped cleanly, checked; prints and records the kills.
inline ChaosRun chaos_case(const TempDir& tmp, const std::string& url, double seconds, uint64_t seed, int min_kills,
                           bool new_machines = false) {
  RunConfig cfg = learnable_config(make_base(tmp.str("base")), tmp.str("out"));
  cfg.sync.sync_interval_s = 0.7;
  Cluster c;
  c.bucket = init_bucket(tmp, cfg, url);
  c.dir = tmp.str();
  c.cache_per_process = new_machines;
  c.start_all();
  ChaosRun r;
  r.chaos = chaos(c, seconds, seed, new_machines);
  c.stop_all();
  auto s = protocol::open_bucket(c.bucket);
  r.verify = check_after_chaos(*s, static_cast<int64_t>(seconds / 8));
  EXPECT_GE(r.chaos.kills, min_kills) << "too few kills";
  // A restarted worker resumes its trainer state (worker.cpp says why): from its disk, or on a
  // new machine from the bucket. Only a restart before the worker's first sync has none.
  int restarts = 0, resumed = 0;
  for (size_t k = 1; k < c.procs.size(); ++k) {
    const std::string log = read_text(c.log(k));
    auto count = [&](const std::string& what) {
      int n = 0;
      for (size_t at = log.find(what); at != std::string::npos; at = log.find(what, at + 1)) ++n;
      return n;
    };
    restarts += std::max(0, count("starting from global version") - 1);
    // On a new machine only the bucket's copy (protocol::trainer_state_key) can be there.
    resumed += new_machines ? count("from " + s->describe() + "/state/" + c.name(k) + ".safetensors")
                            : count("resumed its trainer state");
  }
  EXPECT_GE(resumed, restarts * 4 / 5) << resumed << " of " << restarts << " worker restarts resumed a trainer state";
  double b2 = 0;  // LoRA B starts at zero: its norm is what training (and noise) put there
  for (auto& t : protocol::read_version(*s, r.verify.newest).value().adapter)
    if (t.name.find("lora_B") != std::string::npos)
      for (float x : t.data) b2 += static_cast<double>(x) * x;
  std::printf("%d of %d worker restarts resumed their trainer state%s; newest adapter's LoRA B norm %.2f\n", resumed,
              restarts, new_machines ? " from the bucket" : "", std::sqrt(b2));
  std::printf("survived %d kills in %.0f s (%d of the proxy, %d aimed at a write in progress); %s\n", r.chaos.kills,
              r.chaos.seconds, r.chaos.proxy_kills, r.chaos.aimed, r.verify.summary().c_str());
  ::testing::Test::RecordProperty("kills", r.chaos.kills);
  ::testing::Test::RecordProperty("proxy_kills", r.chaos.proxy_kills);
  ::testing::Test::RecordProperty("aimed_kills", r.chaos.aimed);
  ::testing::Test::RecordProperty("versions", static_cast<int>(r.verify.newest));
  return r;
}

}  // namespace brl::test
