#include "async/worker.h"

#include <ATen/Parallel.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "async/adapter_state.h"
#include "async/run_setup.h"
#include "codec/codec.h"
#include "grpo/train_loop.h"
#include "grpo/trainer.h"
#include "model/device.h"
#include "model/threads.h"
#include "protocol/bucket.h"
#include "protocol/layout.h"
#include "protocol/update.h"
#include "util/ed25519.h"
#include "util/error.h"
#include "util/hash.h"
#include "util/log.h"

namespace brl::async {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string default_worker_id() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::string h;
  for (char* p = host; *p && h.size() < 40; ++p)
    h += (std::isalnum(static_cast<unsigned char>(*p)) || *p == '-' || *p == '_') ? *p : '-';
  return (h.empty() ? "worker" : h) + "-" + std::to_string(getpid());
}

// The key this worker signs with (--signing-key, else $BRL_SIGNING_KEY_FILE), checked against
// the run's allow-list up front: a worker whose every update would be rejected must not start.
std::optional<ed25519::SigningKey> signing_key(const std::string& worker, const std::string& option, const RunConfig& cfg) {
  std::string path = option;
  if (path.empty())
    if (const char* e = std::getenv("BRL_SIGNING_KEY_FILE"); e) path = e;
  auto allowed = cfg.security.public_keys();
  if (path.empty()) {
    if (allowed.empty()) return std::nullopt;
    throw UserError("worker " + worker + ": this run folds only signed updates (" + std::to_string(allowed.size()) +
                        " keys in [security] allowed_keys) and the worker has no signing key",
                    "pass --signing-key NAME.pem or set BRL_SIGNING_KEY_FILE (create a key with `bucketrl keygen --out "
                    "NAME`; the run's owner adds NAME.pub to allowed_keys)");
  }
  auto key = ed25519::SigningKey::load(path);
  if (!allowed.empty() && !allowed.count(key.public_key()))
    throw UserError("worker " + worker + ": signing key '" + path + "' (" + ed25519::format_public_key(key.public_key()) +
                        ") is not one of the run's " + std::to_string(allowed.size()) + " allowed keys",
                    "use a key whose public half is in the run's [security] allowed_keys (run.json), or start a run "
                    "that lists this one");
  return key;
}

// The heartbeat, shared between the training thread (which fills it) and the beat thread.
class Beater {
 public:
  Beater(const std::string& bucket, protocol::Heartbeat hb, double interval_s)
      : store_(protocol::open_bucket(bucket)), hb_(std::move(hb)), interval_(interval_s), th_([this] { loop(); }) {}
  ~Beater() {
    {
      std::lock_guard<std::mutex> l(mu_);
      done_ = true;
    }
    cv_.notify_all();
    th_.join();
    beat();  // the final state
  }
  template <class F>
  void update(F f) {
    std::lock_guard<std::mutex> l(mu_);
    f(hb_);
  }
  void beat_now() { cv_.notify_all(); }

 private:
  void beat() {
    protocol::Heartbeat h;
    {
      std::lock_guard<std::mutex> l(mu_);
      hb_.time_ms = protocol::now_ms();
      h = hb_;
    }
    if (Status st = store_->put(protocol::heartbeat_key(h.worker), h.to_json().dump()); !st)
      LOG_WARN("worker {}: heartbeat failed: {}", h.worker, st.to_string());
  }
  void loop() {
    std::unique_lock<std::mutex> l(mu_);
    while (!done_) {
      l.unlock();
      beat();
      l.lock();
      cv_.wait_for(l, std::chrono::duration<double>(interval_));
    }
  }
  std::unique_ptr<store::ObjectStore> store_;
  std::mutex mu_;
  std::condition_variable cv_;
  protocol::Heartbeat hb_;
  double interval_;
  bool done_ = false;
  std::thread th_;
};

// Running sums over the steps since the last sync.
struct Window {
  int64_t steps = 0, samples = 0;
  double reward_sum = 0, reward_sq = 0, acc_sum = 0, zero_std_sum = 0;
  Clock::time_point start = Clock::now();
  void add(const grpo::StepStats& s) {
    ++steps;
    samples += s.samples;
    // Sample-weighted so the header's mean and std are over completions.
    reward_sum += s.reward_mean * s.samples;
    reward_sq += (s.reward_std * s.reward_std + s.reward_mean * s.reward_mean) * s.samples;
    acc_sum += s.accuracy * s.samples;
    zero_std_sum += s.frac_reward_zero_std * s.samples;
  }
  double mean() const { return samples ? reward_sum / samples : 0; }
  double std() const { return samples ? std::sqrt(std::max(0.0, reward_sq / samples - mean() * mean())) : 0; }
  double accuracy() const { return samples ? acc_sum / samples : 0; }
  double frac_reward_zero_std() const { return samples ? zero_std_sum / samples : 0; }
};

}  // namespace

WorkerSummary run_worker(const WorkerOptions& opt, const std::atomic<bool>& stop) {
  const std::string id = opt.id.empty() ? default_worker_id() : opt.id;
  protocol::check_worker_id(id);
  if (opt.num_shards < 1 || opt.shard < 0 || opt.shard >= opt.num_shards)
    throw UserError("worker " + id + ": shard " + std::to_string(opt.shard) + "/" + std::to_string(opt.num_shards) +
                    " is not valid", "use --shard I/N with 0 <= I < N");
  auto t0 = Clock::now();
  auto store = protocol::open_bucket(opt.bucket);
  auto run = protocol::read_run(*store).value();
  RunConfig cfg = join_run(*store, run, opt.cache_dir);
  if (!opt.device.empty()) cfg.model.device = opt.device;  // a machine's own, not the run's
  const auto key = signing_key(id, opt.signing_key, cfg);
  int threads = opt.threads > 0 ? opt.threads : cfg.train.threads;
  if (threads > 0) model::set_compute_threads(threads);

  protocol::Heartbeat hb0;
  hb0.worker = id;
  hb0.state = "starting";
  hb0.pid = getpid();
  {
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    hb0.host = host;
  }
  Beater beater(opt.bucket, hb0, cfg.sync.heartbeat_interval_s);

  grpo::Session ses = grpo::open_session(cfg);
  auto& m = ses.model;
  beater.update([&](protocol::Heartbeat& h) { h.device = model::device_label(m.device()); });
  // Sampling differs per worker (and per start, so a restarted worker does not replay).
  grpo::GrpoConfig g = cfg.grpo;
  g.seed = static_cast<int>((static_cast<uint64_t>(g.seed) ^ std::hash<std::string>{}(id) ^
                             static_cast<uint64_t>(protocol::now_ms())) & 0x3fffffff);
  grpo::GrpoTrainer trainer(m, ses.tokenizer, *ses.task, g, opt.shard, opt.num_shards, ses.reward_weights);

  WorkerSummary sum;
  int64_t version = -1;
  std::vector<codec::Tensor> anchor;
  // The proxy's verdicts on this worker's updates are in the manifests (rejected: worker, id,
  // reason): read those of the versions since the last adopted one, so a rejection is logged,
  // counted and sent in the heartbeat rather than known only to the proxy.
  constexpr int64_t kRejectionLookback = 64;  // versions read at most per adoption
  auto note_rejections = [&](const protocol::Manifest& m) {
    for (auto& r : m.rejected) {
      if (r.worker != id) continue;
      ++sum.rejected;
      sum.last_rejection = "update " + r.id + ": " + r.reason;
      LOG_WARN("worker {}: the proxy rejected update {} (in v{}): {}", id, r.id, m.version, r.reason);
    }
  };
  auto adopt = [&](int64_t v) {
    auto man = protocol::read_manifest(*store, v).value();
    if (version >= 0) {
      for (int64_t u = std::max(version + 1, v - kRejectionLookback + 1); u < v; ++u)
        if (auto mu = protocol::read_manifest(*store, u); mu) note_rejections(*mu);  // else collected already
      note_rejections(man);
    }
    auto t = protocol::read_version(*store, man).value().adapter;
    assign(m, t, man.payload_key);
    anchor = std::move(t);
    version = v;
    beater.update([&](protocol::Heartbeat& h) {
      h.version = v;
      h.updates_rejected = sum.rejected;
      if (!sum.last_rejection.empty()) h.last_error = "rejected " + sum.last_rejection;
    });
  };
  adopt(protocol::newest_version(*store).value());
  LOG_INFO("worker {}: run {}, starting from global version {} (shard {}/{}, {} threads, {})", id, run.run_id, version,
           opt.shard, opt.num_shards, at::get_num_threads(),
           key ? "signing as " + ed25519::format_public_key(key->public_key()) : std::string("unsigned updates"));

  // Update ids must sort after every earlier one of this worker, across restarts.
  int64_t last_ms = 0;
  if (auto mine = store->list_all(protocol::updates_prefix() + id + "/"); mine)
    for (auto& o : *mine)
      if (auto k = protocol::parse_update_key(o.key))
        if (auto t = protocol::update_id_time(k->second)) last_ms = std::max(last_ms, *t);
  if (auto man = protocol::read_manifest(*store, version); man)
    if (auto c = man->cursors.find(id); c != man->cursors.end())
      if (auto t = protocol::update_id_time(c->second)) last_ms = std::max(last_ms, *t);
  std::mt19937_64 rng(std::random_device{}());

  codec::Options copt;
  copt.kind = codec::parse_kind(cfg.sync.codec);
  copt.block_size = cfg.sync.block_size;
  copt.topk_chunk = cfg.sync.topk_chunk;
  copt.topk_density = cfg.sync.topk_density;
  copt.zstd_level = cfg.sync.zstd_level;
  codec::ErrorFeedback feedback;

  Window win;
  std::string log_lines;
  auto flush_logs = [&] {
    if (log_lines.empty()) return;
    if (Status st = store->put(protocol::log_key(id, protocol::now_ms()), log_lines); st) log_lines.clear();
  };

  // sync mode (the baseline): the barrier. Idle until the proxy publishes past `v`.
  auto wait_for_version = [&](int64_t v) {
    beater.update([](protocol::Heartbeat& h) { h.state = "waiting"; });
    auto tw = Clock::now();
    // As often as the proxy polls (at most every 100 ms): the barrier then costs at most one
    // poll interval on each side, and a benchmark can make both short.
    const auto poll = std::chrono::duration<double>(std::clamp(cfg.proxy.poll_interval_s, 0.005, 0.1));
    while (!stop.load()) {
      if (auto nv = protocol::newest_version(*store); nv && *nv > v) break;
      std::this_thread::sleep_for(poll);
    }
    sum.waited_s += since(tw);
  };

  auto sync = [&] {
    if (win.steps == 0) return;
    beater.update([](protocol::Heartbeat& h) { h.state = "uploading"; });
    auto cur = snapshot(m);
    auto delta = subtract(cur, anchor);
    codec::ErrorFeedback trial = feedback;  // committed only if the upload lands
    std::string payload = cfg.sync.error_feedback ? trial.encode(delta, copt) : codec::encode(delta, copt);
    protocol::UpdateHeader h;
    h.worker = id;
    last_ms = std::max(protocol::now_ms(), last_ms + 1);
    h.id = protocol::make_update_id(last_ms, rng());
    h.base_version = version;
    h.steps = win.steps;
    h.samples = win.samples;
    h.reward_mean = win.mean();
    h.reward_std = win.std();
    h.accuracy = win.accuracy();
    h.frac_reward_zero_std = win.frac_reward_zero_std();
    h.codec = cfg.sync.codec;
    h.created_ms = protocol::now_ms();
    h.seconds = since(win.start);
    std::string obj = protocol::encode_update(h, payload, key ? &*key : nullptr);
    store::PutOptions once;
    once.create_only = true;
    const auto tu = Clock::now();
    Status st = store->put(protocol::update_key(id, h.id), obj, once);
    const double upload_s = since(tu);
    if (!st) {
      // The progress stays in the model: the next sync's delta includes it.
      ++sum.failed_uploads;
      sum.last_error = st.to_string();
      LOG_WARN("worker {}: upload of update {} failed ({}); keeping the progress for the next sync", id, h.id, st.to_string());
      beater.update([&](protocol::Heartbeat& hb) {
        hb.state = "training";
        hb.last_error = st.to_string();
      });
      return;
    }
    feedback = std::move(trial);
    anchor = std::move(cur);
    ++sum.updates;
    sum.bytes_uploaded += obj.size();
    LOG_INFO("worker {}: uploaded {} (base v{}, {} steps, {} samples, reward {:.3f}, {} bytes {} in {:.3f} s)", id, h.id,
             version, h.steps, h.samples, h.reward_mean, obj.size(), h.codec, upload_s);
    win = Window{};
    flush_logs();
    if (cfg.sync.mode == "sync") wait_for_version(version);
    if (auto nv = protocol::newest_version(*store); nv && *nv > version) {
      try {
        adopt(*nv);
        if (cfg.sync.optimizer_state == "reset") trainer.reset_optimizer();  // see SyncConfig::optimizer_state
        if (cfg.sync.optimizer_state == "reset_momentum") trainer.reset_momentum();
        ++sum.adopted;
        LOG_INFO("worker {}: adopted global version {}", id, version);
      } catch (const UserError& e) {
        LOG_WARN("worker {}: cannot adopt version {} yet: {}", id, *nv, e.what());
      }
    }
    beater.update([&](protocol::Heartbeat& hb) {
      hb.state = "training";
      hb.updates = sum.updates;
      hb.bytes_uploaded = sum.bytes_uploaded;
    });
  };

  beater.update([](protocol::Heartbeat& h) { h.state = "training"; });
  beater.beat_now();
  Clock::time_point last_sync = Clock::now();
  int64_t samples_total = 0;
  auto train_start = Clock::now();
  while (!stop.load()) {
    if (opt.max_steps > 0 && sum.steps >= opt.max_steps) break;
    if (opt.time_limit_s > 0 && since(t0) > opt.time_limit_s) break;
    auto ts = Clock::now();
    const double waited_before = sum.waited_s;
    auto s = trainer.step();
    const double step_s = since(ts);
    ++sum.steps;
    samples_total += s.samples;
    win.add(s);
    log_lines += nlohmann::json{{"time_ms", protocol::now_ms()}, {"worker", id}, {"step", sum.steps},
                                {"version", version}, {"reward", s.reward_mean}, {"reward_std", s.reward_std},
                                {"accuracy", s.accuracy}, {"loss", s.loss}, {"kl", s.kl}, {"grad_norm", s.grad_norm},
                                {"clip_ratio", s.clip_ratio},
                                {"frac_reward_zero_std", s.frac_reward_zero_std},
                                {"completion_length", s.completion_length}, {"seconds", step_s},
                                {"gen_seconds", s.gen_seconds}, {"score_seconds", s.score_seconds},
                                {"train_seconds", s.train_seconds}}
                     .dump() +
                 "\n";
    double rate = samples_total / std::max(1e-9, since(train_start));
    beater.update([&](protocol::Heartbeat& h) {
      h.step = sum.steps;
      h.samples_per_s = rate;
      h.device_memory_bytes = static_cast<uint64_t>(model::device_memory_bytes(m.device()));
      h.reward_mean = s.reward_mean;
      h.accuracy = s.accuracy;
    });
    // A barrier round is K steps for everyone (as in data parallel); no time trigger then.
    bool due = (cfg.sync.mode != "sync" && since(last_sync) >= cfg.sync.sync_interval_s) ||
               (cfg.sync.sync_steps > 0 && win.steps >= cfg.sync.sync_steps);
    if (due) {
      sync();
      last_sync = Clock::now();
    }
    // A straggler for benchmarks: every busy second (the step and any upload, not the time
    // waited at a barrier) is followed by slowdown - 1 idle ones, so its throughput is
    // 1 / slowdown of what it would be (sleeping after the step alone made a 4x straggler ~2.7x).
    if (opt.slowdown > 1)
      std::this_thread::sleep_for(std::chrono::duration<double>((opt.slowdown - 1) * (since(ts) - (sum.waited_s - waited_before))));
  }
  // A clean stop uploads what is left. When the bucket refuses it (disk full, access denied,
  // unreachable beyond the store's retries) more tries, 2 s apart for up to ~15 s, give a
  // full disk time to be freed (say, by the proxy's garbage collection); then the loss is
  // said plainly and the exit status shows it.
  int final_attempts = 0;
  for (auto tf = Clock::now(); win.steps > 0;) {
    sync();
    ++final_attempts;
    if (win.steps == 0 || since(tf) > 13) break;
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
  if (win.steps > 0) {
    sum.lost_steps = win.steps;
    LOG_ERROR("worker {}: could not upload the last {} steps ({} attempts; last error: {}); they are lost to the run, "
              "everything before them is in the bucket",
              id, win.steps, final_attempts, sum.last_error);
  }
  flush_logs();
  beater.update([](protocol::Heartbeat& h) { h.state = "stopped"; });
  LOG_INFO("worker {}: stopped after {} steps, {} updates ({} bytes, {} rejected), {} adoptions, {:.1f} s at the barrier", id,
           sum.steps, sum.updates, sum.bytes_uploaded, sum.rejected, sum.adopted, sum.waited_s);
  return sum;
}

}  // namespace brl::async
