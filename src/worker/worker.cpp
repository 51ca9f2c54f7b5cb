#include "worker/worker.h"

#include <ATen/Parallel.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "grpo/train_loop.h"
#include "grpo/trainer.h"
#include "model/device.h"
#include "model/threads.h"
#include "protocol/bucket.h"
#include "protocol/layout.h"
#include "protocol/update.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/file.h"
#include "util/host.h"
#include "util/log.h"
#include "worker/adapter_state.h"
#include "worker/heartbeat.h"
#include "worker/join.h"

namespace brl::worker {

namespace {

// The key this worker signs with (--signing-key, else $BRL_SIGNING_KEY_FILE), checked against
// the run's allow-list up front: a worker whose every update would be rejected must not start.
std::optional<ed25519::SigningKey> signing_key(const std::string& worker, const std::string& option,
                                               const RunConfig& cfg) {
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
    throw UserError("worker " + worker + ": signing key '" + path + "' (" +
                        ed25519::format_public_key(key.public_key()) + ") is not one of the run's " +
                        std::to_string(allowed.size()) + " allowed keys",
                    "use a key whose public half is in the run's [security] allowed_keys (run.json), or start a run "
                    "that lists this one");
  return key;
}

// The proxy's verdicts on a worker's updates are in the manifests (rejected: worker, id,
// reason): those of the versions since the last adopted one are read on adoption, so a
// rejection is logged, counted and sent in the heartbeat rather than known only to the proxy.
constexpr int64_t kRejectionLookback = 64;  // versions read at most per adoption
constexpr size_t kMaxUnfolded = 16;         // own uploads kept for adoption (Worker::unfolded_)

}  // namespace

Worker::Worker(WorkerOptions opt) : opt_(std::move(opt)), rng_(std::random_device{}()) {
  id_ = opt_.id.empty() ? process_id("", "worker") : opt_.id;
  protocol::check_worker_id(id_);
  if (opt_.num_shards < 1 || opt_.shard < 0 || opt_.shard >= opt_.num_shards)
    throw UserError("worker " + id_ + ": shard " + std::to_string(opt_.shard) + "/" + std::to_string(opt_.num_shards) +
                        " is not valid",
                    "use --shard I/N with 0 <= I < N");
  store_ = protocol::open_bucket(opt_.bucket);
  run_ = protocol::read_run(*store_).value();
  cfg_ = join_run(*store_, run_, opt_.cache_dir);
  if (!opt_.device.empty()) cfg_.model.device = opt_.device;  // a machine's own, not the run's
  key_ = signing_key(id_, opt_.signing_key, cfg_);
  const int threads = opt_.threads > 0 ? opt_.threads : cfg_.train.threads;
  if (threads > 0) model::set_compute_threads(threads);

  protocol::Heartbeat hb0;
  hb0.worker = id_;
  hb0.state = "starting";
  hb0.pid = getpid();
  hb0.host = hostname();
  beater_ = std::make_unique<HeartbeatSender>(opt_.bucket, hb0, cfg_.sync.heartbeat_interval_s);

  ses_ = std::make_unique<grpo::Session>(grpo::open_session(cfg_));
  beater_->update([&](protocol::Heartbeat& h) { h.device = model::device_label(ses_->model.device()); });
  // Sampling differs per worker (and per start, so a restarted worker does not replay).
  grpo::GrpoConfig g = cfg_.grpo;
  g.seed = static_cast<int>(
      (static_cast<uint64_t>(g.seed) ^ std::hash<std::string>{}(id_) ^ static_cast<uint64_t>(protocol::now_ms())) &
      0x3fffffff);
  trainer_ = std::make_unique<grpo::GrpoTrainer>(ses_->model, ses_->tokenizer, *ses_->task, g, opt_.shard,
                                                 opt_.num_shards, ses_->reward_weights);
  adopt(protocol::newest_version(*store_).value());
  if (!opt_.id.empty() && cfg_.sync.optimizer_state != OptimizerState::reset) {
    state_path_ =
        (std::filesystem::path(cache_root_dir(opt_.cache_dir)) / "workers" / run_.run_id / (id_ + ".state.safetensors"))
            .string();
    resume_state();
  }
  LOG_INFO("worker {}: run {}, starting from global version {} (shard {}/{}, {} threads, {})", id_, run_.run_id,
           version_, opt_.shard, opt_.num_shards, at::get_num_threads(),
           key_ ? "signing as " + ed25519::format_public_key(key_->public_key()) : std::string("unsigned updates"));

  // Update ids must sort after every earlier one of this worker, across restarts.
  if (auto mine = store_->list_all(protocol::updates_prefix() + id_ + "/"); mine)
    for (auto& o : *mine)
      if (auto k = protocol::parse_update_key(o.key))
        if (auto t = protocol::update_id_time(k->second)) last_ms_ = std::max(last_ms_, *t);
  if (auto man = protocol::read_manifest(*store_, version_); man)
    if (auto c = man->cursors.find(id_); c != man->cursors.end())
      if (auto t = protocol::update_id_time(c->second)) last_ms_ = std::max(last_ms_, *t);

  codec_.kind = codec::parse_kind(cfg_.sync.codec);
  codec_.block_size = cfg_.sync.block_size;
  codec_.topk_chunk = cfg_.sync.topk_chunk;
  codec_.topk_density = cfg_.sync.topk_density;
  codec_.zstd_level = cfg_.sync.zstd_level;
  beater_->update([](protocol::Heartbeat& h) { h.state = "training"; });
  beater_->beat_now();
  last_sync_ = train_start_ = Clock::now();
}

Worker::~Worker() = default;

int64_t Worker::trainer_steps() const { return trainer_->global_step(); }
uint64_t Worker::example_cursor() const { return trainer_->example_cursor(); }

// A restarted worker that began with a fresh AdamW moved every adapter coordinate by about
// learning_rate a step, whatever its gradient's size (the second moment is what scales a
// step down, and a fresh one knows only the newest gradients): near a saturated reward,
// where the gradients are small noise, that random walk grew the adapter until one step
// flipped the policy to a wrong answer with no reward variance left to learn back from
// (chaos_slow_test, a worker killed every few seconds). So the state is kept across restarts:
// on this machine's disk, and in the bucket for a machine that takes over the id. The newer
// of the two (by trainer step) is resumed.
void Worker::resume_state() {
  struct Copy {
    std::string label, bytes;
    int64_t step = -1;
  };
  std::vector<Copy> copies;
  if (std::ifstream f(state_path_, std::ios::binary); f)
    copies.push_back({state_path_, std::string(std::istreambuf_iterator<char>(f), {})});
  const std::string key = protocol::trainer_state_key(id_);
  if (auto b = store_->get(key); b) copies.push_back({store_->describe() + "/" + key, std::move(*b)});
  else if (!b.status().is_not_found())
    LOG_WARN("worker {}: cannot read its trainer state from the bucket ({})", id_, b.status().to_string());
  for (auto& c : copies) c.step = grpo::GrpoTrainer::portable_state_step(c.bytes).value_or(-1);
  std::stable_sort(copies.begin(), copies.end(), [](const Copy& x, const Copy& y) { return x.step > y.step; });
  for (const auto& c : copies) {
    try {
      trainer_->load_portable_state(c.bytes, c.label);
    } catch (const std::exception& e) {
      LOG_WARN("worker {}: cannot resume the trainer state in {} ({})", id_, c.label, e.what());
      continue;
    }
    LOG_INFO("worker {}: resumed its trainer state (step {}, prompt {}) from {}", id_, trainer_->global_step(),
             trainer_->example_cursor(), c.label);
    return;
  }
  if (!copies.empty()) LOG_WARN("worker {}: starting its optimizer afresh", id_);
}

// After every sync: on this machine's disk (util/file.h: a kill at any moment leaves the old
// state or the new one), and in the bucket at most every state_upload_interval_s. A failure
// (a full disk, the bucket away) costs only a resume, not the run.
void Worker::save_state() {
  if (state_path_.empty()) return;
  const std::string bytes = trainer_->portable_state();
  try {
    std::filesystem::create_directories(std::filesystem::path(state_path_).parent_path());
    write_file(state_path_, bytes);
  } catch (const std::exception& e) {
    LOG_WARN("worker {}: cannot save the trainer state to {}: {}", id_, state_path_, e.what());
  }
  if (!state_uploaded_ || seconds_since(*state_uploaded_) >= cfg_.sync.state_upload_interval_s) upload_state(bytes);
}

// The bucket's copy (an object store's put is atomic), for a machine that takes over this id.
void Worker::upload_state(const std::string& bytes) {
  if (state_path_.empty() || cfg_.sync.state_upload_interval_s <= 0) return;
  if (auto st = store_->put(protocol::trainer_state_key(id_), bytes); !st.ok())
    LOG_WARN("worker {}: cannot copy its trainer state to the bucket: {}", id_, st.to_string());
  else state_uploaded_ = Clock::now();
}

void Worker::adopt(int64_t v) {
  auto man = protocol::read_manifest(*store_, v).value();
  auto note_rejections = [&](const protocol::Manifest& m) {
    for (auto& r : m.rejected) {
      if (r.worker != id_) continue;
      ++sum_.rejected;
      sum_.last_rejection = "update " + r.id + ": " + r.reason;
      LOG_WARN("worker {}: the proxy rejected update {} (in v{}): {}", id_, r.id, m.version, r.reason);
    }
  };
  if (version_ >= 0) {
    for (int64_t u = std::max(version_ + 1, v - kRejectionLookback + 1); u < v; ++u)
      if (auto mu = protocol::read_manifest(*store_, u); mu) note_rejections(*mu);  // else collected already
    note_rejections(man);
  }
  auto t = protocol::read_version(*store_, man).value().adapter;
  // The version's cursor names the newest of this worker's updates the proxy has considered
  // (folded or rejected; ids sort by time); the later ones are still to come, so they stay.
  if (auto c = man.cursors.find(id_); c != man.cursors.end())
    std::erase_if(unfolded_, [&](const Unfolded& u) { return u.id <= c->second; });
  for (const auto& u : unfolded_) add_into(t, u.delta);
  assign(ses_->model, t, man.payload_key);
  anchor_ = std::move(t);
  version_ = v;
  beater_->update([&](protocol::Heartbeat& h) {
    h.version = v;
    h.updates_rejected = sum_.rejected;
    if (!sum_.last_rejection.empty()) h.last_error = "rejected " + sum_.last_rejection;
  });
}

void Worker::step() {
  const auto ts = Clock::now();
  trainer_->set_log_completions(cfg_.train.log_completions && cfg_.train.logs_step(sum_.steps + 1));
  auto s = trainer_->step();
  const double step_s = seconds_since(ts);
  ++sum_.steps;
  samples_total_ += s.samples;
  win_.add({s.samples, s.reward_mean, s.reward_std, s.accuracy, s.frac_reward_zero_std});
  nlohmann::json line{{"time_ms", protocol::now_ms()},
                      {"worker", id_},
                      {"step", sum_.steps},
                      {"version", version_},
                      {"reward", s.reward_mean},
                      {"reward_std", s.reward_std},
                      {"accuracy", s.accuracy},
                      {"loss", s.loss},
                      {"kl", s.kl},
                      {"grad_norm", s.grad_norm},
                      {"clip_ratio", s.clip_ratio},
                      {"frac_reward_zero_std", s.frac_reward_zero_std},
                      {"completion_length", s.completion_length},
                      {"seconds", step_s},
                      {"gen_seconds", s.gen_seconds},
                      {"score_seconds", s.score_seconds},
                      {"train_seconds", s.train_seconds}};
  grpo::add_optional_stats(line, s);
  if (!s.completions.empty())
    line["completions"] = grpo::completions_json(s, *ses_->task, cfg_.train.num_completions_to_print);
  log_lines_ += line.dump() + "\n";
  const double rate = samples_total_ / std::max(1e-9, seconds_since(train_start_));
  beater_->update([&](protocol::Heartbeat& h) {
    h.step = sum_.steps;
    h.samples_per_s = rate;
    h.device_memory_bytes = static_cast<uint64_t>(model::device_memory_bytes(ses_->model.device()));
    h.reward_mean = s.reward_mean;
    h.accuracy = s.accuracy;
  });
}

bool Worker::sync_due() const {
  // Between generation batches only: the rollouts left of one were sampled from the version this
  // window started from (steps_per_generation > gradient_accumulation_steps, num_iterations > 1).
  if (!trainer_->at_generation_boundary()) return false;
  // A barrier round is K steps for everyone (as in data parallel); no time trigger then.
  return (cfg_.sync.mode != SyncMode::sync && seconds_since(last_sync_) >= cfg_.sync.sync_interval_s) ||
         (cfg_.sync.sync_steps > 0 && win_.steps() >= cfg_.sync.sync_steps);
}

void Worker::flush_logs() {
  if (log_lines_.empty()) return;
  if (Status st = store_->put(protocol::log_key(id_, protocol::now_ms()), log_lines_); st) log_lines_.clear();
}

void Worker::wait_for_version(int64_t v, const std::atomic<bool>& stop) {
  beater_->update([](protocol::Heartbeat& h) { h.state = "waiting"; });
  const auto tw = Clock::now();
  // As often as the proxy polls (at most every 100 ms): the barrier then costs at most one
  // poll interval on each side, and a benchmark can make both short.
  const auto poll = std::chrono::duration<double>(std::clamp(cfg_.proxy.poll_interval_s, 0.005, 0.1));
  while (!stop.load()) {
    if (auto nv = protocol::newest_version(*store_); nv && *nv > v) break;
    std::this_thread::sleep_for(poll);
  }
  sum_.waited_s += seconds_since(tw);
}

bool Worker::sync(const std::atomic<bool>& stop) {
  const bool uploaded = upload_and_adopt(stop);
  last_sync_ = Clock::now();  // the next time trigger counts from the end of this one
  return uploaded;
}

bool Worker::upload_and_adopt(const std::atomic<bool>& stop) {
  if (win_.steps() == 0) return false;
  beater_->update([](protocol::Heartbeat& h) { h.state = "uploading"; });
  auto cur = snapshot(ses_->model);
  auto delta = subtract(cur, anchor_);
  codec::ErrorFeedback trial = feedback_;  // committed only if the upload lands
  std::vector<codec::Tensor> sent;         // the delta as the proxy will decode it
  std::string payload;
  if (cfg_.sync.error_feedback) {
    payload = trial.encode(delta, codec_, &sent);
  } else {
    payload = codec::encode(delta, codec_);
    sent = codec::decode(payload).value();
  }
  last_ms_ = std::max(protocol::now_ms(), last_ms_ + 1);
  const auto h = protocol::make_update_header(id_, protocol::make_update_id(last_ms_, rng_()), version_, win_.stats(),
                                              cfg_.sync.codec, protocol::now_ms());
  std::string obj = protocol::encode_update(h, payload, key_ ? &*key_ : nullptr);
  store::PutOptions once;
  once.create_only = true;
  const auto tu = Clock::now();
  Status st = store_->put(protocol::update_key(id_, h.id), obj, once);
  const double upload_s = seconds_since(tu);
  if (!st) {
    // The progress stays in the model: the next sync's delta includes it.
    ++sum_.failed_uploads;
    sum_.last_error = st.to_string();
    LOG_WARN("worker {}: upload of update {} failed ({}); keeping the progress for the next sync", id_, h.id,
             st.to_string());
    beater_->update([&](protocol::Heartbeat& hb) {
      hb.state = "training";
      hb.last_error = st.to_string();
    });
    return false;
  }
  feedback_ = std::move(trial);
  anchor_ = std::move(cur);
  unfolded_.push_back({h.id, std::move(sent)});
  // A proxy away for long must not make this list grow without end: merged, the older delta
  // leaves with the newer one's id, so in the rare version that holds the older but not the
  // newer one it counts twice until the next adoption.
  if (unfolded_.size() > kMaxUnfolded) {
    add_into(unfolded_[1].delta, unfolded_[0].delta);
    unfolded_.erase(unfolded_.begin());
  }
  ++sum_.updates;
  sum_.bytes_uploaded += obj.size();
  LOG_INFO("worker {}: uploaded {} (base v{}, {} steps, {} samples, reward {:.3f}, {} bytes {} in {:.3f} s)", id_, h.id,
           version_, h.steps, h.samples, h.reward_mean, obj.size(), h.codec, upload_s);
  win_ = RewardWindow{};
  flush_logs();
  if (cfg_.sync.mode == SyncMode::sync) wait_for_version(version_, stop);
  if (auto nv = protocol::newest_version(*store_); nv && *nv > version_) {
    try {
      adopt(*nv);
      if (cfg_.sync.optimizer_state == OptimizerState::reset)
        trainer_->reset_optimizer();  // see SyncConfig::optimizer_state
      if (cfg_.sync.optimizer_state == OptimizerState::reset_momentum) trainer_->reset_momentum();
      ++sum_.adopted;
      LOG_INFO("worker {}: adopted global version {}", id_, version_);
    } catch (const UserError& e) {
      LOG_WARN("worker {}: cannot adopt version {} yet: {}", id_, *nv, e.what());
    }
  }
  save_state();
  beater_->update([&](protocol::Heartbeat& hb) {
    hb.state = "training";
    hb.updates = sum_.updates;
    hb.bytes_uploaded = sum_.bytes_uploaded;
  });
  return true;
}

WorkerSummary Worker::run(const std::atomic<bool>& stop) {
  while (!stop.load()) {
    if (opt_.max_steps > 0 && sum_.steps >= opt_.max_steps) break;
    if (opt_.time_limit_s > 0 && seconds_since(start_) > opt_.time_limit_s) break;
    const auto ts = Clock::now();
    const double waited_before = sum_.waited_s;
    step();
    if (sync_due()) sync(stop);
    // A straggler for benchmarks: every busy second (the step and any upload, not the time
    // waited at a barrier) is followed by slowdown - 1 idle ones, so its throughput is
    // 1 / slowdown of what it would be (sleeping after the step alone made a 4x straggler ~2.7x).
    if (opt_.slowdown > 1)
      std::this_thread::sleep_for(
          std::chrono::duration<double>((opt_.slowdown - 1) * (seconds_since(ts) - (sum_.waited_s - waited_before))));
  }
  // A clean stop uploads what is left. When the bucket refuses it (disk full, access denied,
  // unreachable beyond the store's retries) more tries, 2 s apart for up to ~15 s, give a
  // full disk time to be freed (say, by the proxy's garbage collection); then the loss is
  // said plainly and the exit status shows it.
  int final_attempts = 0;
  for (auto tf = Clock::now(); win_.steps() > 0;) {
    sync(stop);
    ++final_attempts;
    if (win_.steps() == 0 || seconds_since(tf) > 13) break;
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
  if (win_.steps() > 0) {
    sum_.lost_steps = win_.steps();
    LOG_ERROR(
        "worker {}: could not upload the last {} steps ({} attempts; last error: {}); they are lost to the run, "
        "everything before them is in the bucket",
        id_, win_.steps(), final_attempts, sum_.last_error);
  }
  // A clean stop (a spot machine's notice) leaves the freshest copy in the bucket now, not on
  // the interval; the disk's is current since the last sync.
  if (!state_path_.empty()) upload_state(trainer_->portable_state());
  flush_logs();
  beater_->update([](protocol::Heartbeat& h) { h.state = "stopped"; });
  LOG_INFO(
      "worker {}: stopped after {} steps, {} updates ({} bytes, {} rejected), {} adoptions, {:.1f} s at the barrier",
      id_, sum_.steps, sum_.updates, sum_.bytes_uploaded, sum_.rejected, sum_.adopted, sum_.waited_s);
  return sum_;
}

WorkerSummary run_worker(const WorkerOptions& opt, const std::atomic<bool>& stop) { return Worker(opt).run(stop); }

}  // namespace brl::worker
