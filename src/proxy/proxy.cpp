#include "proxy/proxy.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <thread>

#include "protocol/bucket.h"
#include "protocol/health.h"
#include "protocol/layout.h"
#include "protocol/update.h"
#include "store/local_store.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/hash.h"
#include "util/host.h"
#include "util/log.h"

namespace brl::proxy {

namespace {

double median_of(std::deque<double> v) {
  size_t n = v.size(), mid = n / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  if (n % 2) return v[mid];
  return 0.5 * (v[mid] + *std::max_element(v.begin(), v.begin() + mid));
}
}  // namespace

struct Proxy::Pending {
  protocol::FoldedUpdate meta;
  std::vector<codec::Tensor> delta;
  bool sparse = false;  // a topk payload: its zeros were not sent
};

Proxy::Proxy(ProxyOptions opt) : opt_(std::move(opt)), store_(protocol::open_bucket(opt_.bucket)) {
  if (opt_.id.empty()) opt_.id = process_id("proxy-", "proxy");
  load();
}

Proxy::~Proxy() = default;

void Proxy::load() {
  run_ = protocol::read_run(*store_).value();
  cfg_ = RunConfig{};
  cfg_.apply_json(run_.config, "run.json");
  cfg_.validate();
  if (cfg_.aggregation.mode == AggregationMode::exact && opt_.factorizer == nullptr)
    throw UserError(
        store_->describe() + "/" + protocol::run_key() +
        ": [aggregation] mode = \"exact\" needs the dense "
        "factorization of libtorch, which this build of the proxy does not link (run the bucketrl executable)");
  version_ = protocol::newest_version(*store_).value();
  auto ver = protocol::read_version(*store_, version_).value();
  const protocol::Manifest& m = ver.manifest;
  global_ = std::move(ver.adapter);
  cursors_ = m.cursors;
  best_reward_ = m.stats.value("best_reward", nlohmann::json());
  // Without the state the manifest names, momentum would silently restart from zero: fail.
  outer_ = {};
  if (m.outer_state) {
    const std::string& key = m.outer_state->key;
    std::string body = store_->get(key).value();
    if (sha256_hex(body) != m.outer_state->sha256)
      throw UserError(store_->describe() + "/" + key + ": does not match manifest v" + std::to_string(version_) +
                      " (sha256)");
    outer_ = protocol::decode_outer_state(body, store_->describe() + "/" + key).value();
    if (!outer_.master.empty()) {
      // The master must be what the payload was rounded from, or the chain would fork.
      bool same = outer_.master.size() == global_.size();
      for (size_t i = 0; same && i < global_.size(); ++i) {
        same = outer_.master[i].name == global_[i].name && outer_.master[i].data.size() == global_[i].data.size();
        for (size_t j = 0; same && j < global_[i].data.size(); ++j)
          same = codec::round_bf16(outer_.master[i].data[j]) == global_[i].data[j];
      }
      if (!same)
        throw UserError(store_->describe() + "/" + key + ": its master copy does not round to version " +
                        std::to_string(version_) + "'s payload");
      global_ = std::move(outer_.master);
      outer_.master.clear();
    }
  } else if (cfg_.aggregation.server_momentum > 0 && version_ > 0) {
    LOG_WARN("proxy: manifest v{} names no outer optimizer state; server momentum starts from zero", version_);
  }
  allowed_keys_ = cfg_.security.public_keys();
  // Ids and deltas considered within the staleness window: a replay of one of them would
  // otherwise pass (older ones are stale). And the norms of the last accepted updates.
  seen_payloads_.clear();
  seen_ids_.clear();
  std::vector<double> norms;  // newest first
  const int64_t window = cfg_.aggregation.max_staleness + 1, n_norms = cfg_.aggregation.update_norm_window;
  for (int64_t v = version_; v >= 0 && v >= version_ - std::max(window, n_norms); --v) {
    if (v < version_ - window && static_cast<int64_t>(norms.size()) >= n_norms) break;
    auto old = v == version_ ? Result<protocol::Manifest>(m) : protocol::read_manifest(*store_, v);
    if (!old) break;
    if (v >= version_ - window) {
      for (auto& u : old->updates)
        seen_payloads_[u.payload_sha256] = u.worker + "/" + u.id, seen_ids_[u.worker + "/" + u.id] = v;
      for (auto& r : old->rejected) seen_ids_[r.worker + "/" + r.id] = v;
    }
    for (auto u = old->updates.rbegin(); u != old->updates.rend() && static_cast<int64_t>(norms.size()) < n_norms; ++u)
      if (u->norm > 0) norms.push_back(u->norm);
  }
  recent_norms_.assign(norms.rbegin(), norms.rend());
  accepted_.clear();
  rejected_.clear();
  // A proxy that died between manifest and LATEST (or could not write it: disk full): finish
  // its publish. Not fatal when it fails again: the manifest is the commit point, readers
  // take the newest manifest (newest_version), and the next publish writes LATEST.
  if (auto l = protocol::read_latest(*store_); !l || *l < version_)
    if (Status st = store_->put(protocol::latest_key(), std::to_string(version_) + "\n"); !st)
      LOG_WARN("proxy {}: cannot bring LATEST up to version {} ({}); the next publish will", opt_.id, version_,
               st.to_string());
  LOG_INFO("proxy {}: run {} at version {} ({} workers seen)", opt_.id, run_.run_id, version_, cursors_.size());
}

void Proxy::check_health() {
  auto beats = store_->list_all(protocol::heartbeats_prefix());
  if (!beats) {
    LOG_WARN("proxy: cannot list heartbeats: {}", beats.status().to_string());
    return;
  }
  int64_t now = protocol::now_ms();
  std::map<std::string, protocol::Heartbeat> hbs;
  for (auto& o : *beats) {
    auto body = store_->get(o.key);
    if (!body) continue;
    auto hb = protocol::Heartbeat::parse(*body, o.key);
    if (!hb) {
      LOG_WARN("proxy: {}", hb.status().to_string());
      continue;
    }
    hbs[hb->worker] = *hb;
  }
  auto health = protocol::classify_health(hbs, now, {cfg_.proxy.heartbeat_timeout_s, cfg_.proxy.straggler_ratio});
  for (auto& [name, hb] : hbs) {
    WorkerHealth& w = health_[name];
    w.beat = hb;
    w.age_s = (now - hb.time_ms) / 1000.0;
    const protocol::Health h = health[name];
    if (h != w.health && (w.health || h != protocol::Health::alive))
      LOG_INFO("proxy: worker {} is {} (last heartbeat {:.0f} s ago, {:.1f} samples/s)", name,
               protocol::kHealthNames(h), w.age_s, hb.samples_per_s);
    w.health = h;
  }
}

std::vector<std::string> Proxy::known_workers() {
  std::set<std::string> ws;
  for (auto& [w, c] : cursors_) ws.insert(w);
  for (auto& [w, h] : health_) ws.insert(w);
  // Now and then a full listing finds workers that upload without heartbeats.
  if (counters_.polls % 20 == 0)
    if (auto all = store_->list_all(protocol::updates_prefix()); all)
      for (auto& o : *all)
        if (auto k = protocol::parse_update_key(o.key)) ws.insert(k->first);
  return {ws.begin(), ws.end()};
}

bool Proxy::consider(const std::string& worker, const store::ObjectInfo& obj) {
  auto k = protocol::parse_update_key(obj.key);
  const std::string id = k ? k->second : obj.key;
  using K = protocol::RejectionKind;
  auto reject = [&](K kind, std::string detail) {
    const protocol::Rejection r{kind, std::move(detail)};
    cursors_[worker] = id;
    seen_ids_[worker + "/" + id] = version_ + 1;
    rejected_.push_back({worker, id, r.reason()});
    ++counters_.rejected;
    ++counters_.rejected_by_reason[protocol::kRejectionKinds(kind)];
    LOG_WARN("proxy: rejected update {}/{}: {}", worker, id, r.reason());
    return true;
  };
  if (!k) return reject(K::malformed, "key " + obj.key + " is not updates/<worker>/<id>.upd");
  auto body = store_->get(obj.key);
  if (!body) {
    if (body.status().is_not_found()) return reject(K::missing, "deleted before it was read");
    LOG_WARN("proxy: cannot read {} ({}); next poll", obj.key, body.status().to_string());
    return false;
  }
  auto p = protocol::parse_update(*body, obj.key);
  if (!p) return reject(K::corrupt, p.status().message());
  const auto& h = p->header;
  // Nothing in the header is trusted before this.
  if (auto why = protocol::check_update_signature(h, allowed_keys_)) return reject(why->kind, why->detail);
  // A (validly signed) update copied to another key names its original worker and id.
  if (auto it = seen_ids_.find(h.worker + "/" + h.id); it != seen_ids_.end())
    return reject(K::replay, "update " + it->first + " was already considered for v" + std::to_string(it->second));
  if (h.worker != worker || h.id != id)
    return reject(K::mismatch, "header says " + h.worker + "/" + h.id + ", the key " + worker + "/" + id);
  if (h.base_version > version_)
    return reject(K::future,
                  "base version " + std::to_string(h.base_version) + " is newer than " + std::to_string(version_));
  int64_t staleness = version_ - h.base_version;
  if (staleness > cfg_.aggregation.max_staleness)
    return reject(K::stale, "base version " + std::to_string(h.base_version) + " is " + std::to_string(staleness) +
                                " versions behind (max_staleness " + std::to_string(cfg_.aggregation.max_staleness) +
                                ")");
  codec::Kind kind = codec::Kind::fp32;
  auto delta = codec::decode(p->payload, 1ull << 32, &kind);
  if (!delta) return reject(K::corrupt, delta.status().message());
  if (delta->size() != global_.size())
    return reject(K::shape,
                  std::to_string(delta->size()) + " tensors, the adapter has " + std::to_string(global_.size()));
  for (size_t i = 0; i < global_.size(); ++i) {
    const auto& d = (*delta)[i];
    if (d.name != global_[i].name || d.shape != global_[i].shape)
      return reject(K::shape, "tensor " + d.name + " does not match the adapter's " + global_[i].name);
    for (float x : d.data)
      if (!std::isfinite(x)) return reject(K::nonfinite, "tensor " + d.name + " holds NaN or Inf");
  }
  // As the mode folds it: gauge-fixed for the robust modes and exact, as sent for fedavg.
  const double norm = update_norm(cfg_.aggregation, global_, *delta);
  // The same bytes under another id (a replay) must not count twice. A zero delta carries
  // nothing to replay, and two workers whose groups all had equal rewards send the very same
  // one: rejecting the second stalled the sync-mode barrier (it waits for every worker).
  if (auto it = seen_payloads_.find(h.payload_sha256); it != seen_payloads_.end() && norm > 0)
    return reject(K::replay, "the same delta as update " + it->second);
  const auto& agg = cfg_.aggregation;
  if (agg.max_update_norm > 0 && norm > agg.max_update_norm)
    return reject(K::norm, fmt::format("|delta| = {:.4g} exceeds max_update_norm = {:.4g}", norm, agg.max_update_norm));
  if (agg.max_update_norm_ratio > 0 && recent_norms_.size() >= kMinNormHistory) {
    double med = median_of(recent_norms_);
    if (norm > agg.max_update_norm_ratio * med)
      return reject(K::norm,
                    fmt::format("|delta| = {:.4g} exceeds max_update_norm_ratio {:.4g} x {:.4g}, the median of the "
                                "last {} accepted updates",
                                norm, agg.max_update_norm_ratio, med, recent_norms_.size()));
  }
  Pending u;
  u.meta = {worker,
            id,
            sha256_hex(*body),
            h.payload_sha256,
            body->size(),
            h.base_version,
            staleness,
            h.steps,
            h.samples,
            static_cast<double>(h.samples),
            std::pow(1.0 + staleness, -agg.staleness_exponent),
            h.reward_mean,
            h.accuracy,
            norm,
            h.signer,
            h.frac_reward_zero_std};
  u.delta = std::move(*delta);
  u.sparse = codec::is_sparse(kind);
  cursors_[worker] = id;
  seen_payloads_[h.payload_sha256] = worker + "/" + id;
  seen_ids_[worker + "/" + id] = version_ + 1;
  // A zero delta carries no scale information; a zero median would reject everything after it.
  if (norm > 0) recent_norms_.push_back(norm);
  while (static_cast<int64_t>(recent_norms_.size()) > agg.update_norm_window) recent_norms_.pop_front();
  ++counters_.accepted;
  accepted_.push_back(std::move(u));
  return true;
}

bool Proxy::publish() {
  auto t0 = Clock::now();
  AggregateInput in;
  in.factorizer = opt_.factorizer;
  in.global = &global_;
  for (auto& u : accepted_) {
    in.deltas.push_back(&u.delta);
    in.weights.push_back(u.meta.weight);
    in.discounts.push_back(u.meta.discount);
    in.sparse.push_back(u.sparse);
  }
  OuterState outer = outer_;  // becomes the state only if this version is published
  AggregateResult agg;
  if (in.deltas.empty()) {  // a sync round whose deltas were all rejected: no outer step
    agg.next = global_;
    agg.stats = {{"mode", cfg_.aggregation.mode}, {"updates", 0}};
  } else {
    agg = aggregate(cfg_.aggregation, in, &outer);
  }
  std::vector<codec::Tensor>& next = agg.next;
  protocol::Manifest m;
  m.version = version_ + 1;
  m.parent = version_;
  m.created_ms = protocol::now_ms();
  m.proxy = opt_.id;
  double rw = 0, acc = 0, zero_std = 0;
  int64_t samples = 0, zero_std_samples = 0;
  for (auto& u : accepted_) {
    m.updates.push_back(u.meta);
    rw += u.meta.reward_mean * u.meta.samples;
    acc += u.meta.accuracy * u.meta.samples;
    samples += u.meta.samples;
    if (u.meta.frac_reward_zero_std >= 0)
      zero_std += u.meta.frac_reward_zero_std * u.meta.samples, zero_std_samples += u.meta.samples;
  }
  m.rejected = rejected_;
  m.cursors = cursors_;
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  m.stats = agg.stats;
  m.stats.update({{"aggregate_seconds", secs},
                  {"samples", samples},
                  {"reward_mean", samples ? rw / samples : 0.0},
                  {"accuracy", samples ? acc / samples : 0.0}});
  // Over the updates that report it, and the best reward so far (run health: protocol/health.h).
  if (zero_std_samples > 0) m.stats["frac_reward_zero_std"] = zero_std / zero_std_samples;
  nlohmann::json best = best_reward_;
  if (samples > 0 && (!best.is_object() || rw / samples > best.value("reward_mean", 0.0)))
    best = {{"version", m.version}, {"reward_mean", rw / samples}};
  if (best.is_object()) m.stats["best_reward"] = best;
  const bool bf16 = cfg_.aggregation.publish_bf16();
  m.payload_dtype = kPublishDtypes(cfg_.aggregation.publish_dtype);
  Status st;
  if (cfg_.aggregation.server_momentum > 0 || bf16) {
    if (bf16) outer.master = next;
    std::string body = protocol::encode_outer_state(outer);
    outer.master.clear();  // global_ is the master copy in memory
    std::string sha = sha256_hex(body);
    // Next to the payload, content-addressed like it: racing proxies never overwrite each other's.
    m.outer_state = protocol::OuterStateRef{protocol::outer_state_key(m.version, sha), sha, body.size()};
    st = store_->put(m.outer_state->key, body);  // before the manifest that names it
  }
  if (st)
    st = protocol::publish_version(*store_, m, protocol::encode_adapter(next, bf16 ? st::DType::BF16 : st::DType::F32));
  if (!st) {
    if (st.code() == StatusCode::kPreconditionFailed)
      LOG_WARN("proxy {}: version {} was published by another proxy; reloading", opt_.id, m.version);
    else
      LOG_WARN("proxy {}: publishing version {} failed ({}); reloading and retrying", opt_.id, m.version,
               st.to_string());
    load();
    return false;
  }
  version_ = m.version;
  global_ = std::move(next);
  outer_ = std::move(outer);
  best_reward_ = m.stats.value("best_reward", nlohmann::json());
  ++counters_.published;
  LOG_INFO("proxy: published v{}: {} updates, {} rejected, reward {:.3f}, |delta| {:.4f}", version_, accepted_.size(),
           rejected_.size(), samples ? rw / samples : 0.0, m.stats.value("delta_norm", 0.0));
  accepted_.clear();
  rejected_.clear();
  return true;
}

bool Proxy::poll_once() {
  check_health();
  size_t budget = static_cast<size_t>(cfg_.proxy.max_updates);
  for (auto& w : known_workers()) {
    if (accepted_.size() >= budget) break;
    auto c = cursors_.find(w);
    std::string after = c == cursors_.end() || c->second.empty() ? "" : protocol::update_key(w, c->second);
    auto objs = store_->list_all(protocol::updates_prefix() + w + "/", after);
    if (!objs) {
      LOG_WARN("proxy: cannot list updates of {}: {}", w, objs.status().to_string());
      continue;
    }
    for (auto& o : *objs) {
      if (accepted_.size() >= budget) break;
      if (!consider(w, o)) break;  // transient read failure: come back next poll
    }
  }
  ++counters_.polls;
  bool published = false;
  // In sync mode a round in which every worker's delta was rejected still ends in a version
  // (the same adapter, the rejections recorded): the workers wait for one.
  const bool rejected_round = cfg_.sync.mode == SyncMode::sync && accepted_.empty() && !rejected_.empty();
  if ((static_cast<int>(accepted_.size()) >= cfg_.proxy.min_updates || rejected_round) && barrier_ready())
    published = publish();
  if (published && version_ % 5 == 0) collect_garbage();
  return published;
}

void Proxy::collect_garbage() {
  int64_t keep_from = version_ - cfg_.proxy.keep_versions + 1;
  std::set<int64_t> pinned;
  for (auto& [w, h] : health_)
    if (h.health != protocol::Health::lost && h.health != protocol::Health::stopped) pinned.insert(h.beat.version);
  auto objs = store_->list_all(protocol::global_prefix());
  if (!objs) return;
  std::map<int64_t, std::vector<std::string>> payloads;
  for (auto& o : *objs)
    if (auto k = protocol::parse_version_key(o.key); k && k->object != protocol::VersionObject::manifest)
      payloads[k->version].push_back(o.key);
  // A version is done only when its manifest was read and every removal succeeded; the first
  // that is not stays in the range of the next pass (a failed read or remove is retried, not
  // skipped for good), and each failure is counted (bucketrl_proxy_gc_failures_total).
  int64_t first_incomplete = INT64_MAX;
  auto remove = [&](const std::string& key, int64_t v, bool count) {
    if (auto st = store_->remove(key); !st) {
      ++counters_.gc_failures;
      first_incomplete = std::min(first_incomplete, v);
      LOG_WARN("proxy: garbage collection could not remove {} (retried at the next collection): {}", key,
               st.to_string());
      return;
    }
    if (count) ++counters_.collected;
  };
  for (auto& [v, keys] : payloads) {
    if (v > gc_through_ && v < keep_from && !pinned.count(v)) {
      auto m = protocol::read_manifest(*store_, v);
      if (!m) {
        ++counters_.gc_failures;
        first_incomplete = std::min(first_incomplete, v);
        LOG_WARN("proxy: garbage collection could not read manifest v{} (retried at the next collection): {}", v,
                 m.status().to_string());
        continue;
      }
      // Updates folded (or rejected) into an old version are no longer needed: the manifest
      // keeps their ids and hashes.
      for (auto& u : m->updates) remove(protocol::update_key(u.worker, u.id), v, false);
      for (auto& r : m->rejected) remove(protocol::update_key(r.worker, r.id), v, false);
      for (auto& k : keys) remove(k, v, true);
    } else if (v < version_) {
      // Orphans: payloads of a version whose manifest names another (a lost publish race).
      auto m = protocol::read_manifest(*store_, v);
      if (m)
        for (auto& k : keys)
          if (k != m->payload_key && !(m->outer_state && k == m->outer_state->key)) remove(k, v, true);
    }
  }
  gc_through_ = std::max(gc_through_, std::min(keep_from, first_incomplete) - 1);
  // A writer killed mid-put leaves its temporary file in a directory bucket (never listed,
  // never read): without this they pile up, one per crash, payload-sized.
  if (opt_.bucket.rfind("s3://", 0) != 0)
    if (auto raw = store::open_store(opt_.bucket); auto* local = dynamic_cast<store::LocalStore*>(raw.get()))
      if (auto n = local->cleanup_stale_temp(); n && *n > 0) {
        LOG_INFO("proxy: removed {} temporary files older than an hour (writers killed mid-put)", *n);
        counters_.collected += *n;
      }
}

bool Proxy::barrier_ready() const {
  if (cfg_.sync.mode != SyncMode::sync) return true;
  // Every worker that is alive (or merely slow) must have sent its delta on the current
  // version; lost and stopped ones are not waited for, which is how a barrier survives them.
  // A worker whose delta this round was rejected (stale, norm, ...) is waiting at the barrier
  // too: waiting for it would stall every worker for good.
  for (auto& [name, w] : health_) {
    if (w.health == protocol::Health::lost || w.health == protocol::Health::stopped) continue;
    bool sent = false;
    for (auto& p : accepted_) sent = sent || (p.meta.worker == name && p.meta.base_version == version_);
    for (auto& r : rejected_) sent = sent || r.worker == name;
    if (!sent) return false;
  }
  return true;
}

void Proxy::run(const std::atomic<bool>& stop) {
  auto t0 = Clock::now();
  auto poll = std::chrono::duration<double>(cfg_.proxy.poll_interval_s);
  while (!stop.load()) {
    auto ts = Clock::now();
    poll_once();
    if (opt_.on_poll) opt_.on_poll(*this);
    if (opt_.max_version > 0 && version_ >= opt_.max_version) return;
    if (opt_.time_limit_s > 0 && std::chrono::duration<double>(Clock::now() - t0).count() > opt_.time_limit_s) break;
    while (!stop.load() && Clock::now() - ts < poll) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  poll_once();  // fold what the stopping workers uploaded last
  if (opt_.on_poll) opt_.on_poll(*this);
}

}  // namespace brl::proxy
