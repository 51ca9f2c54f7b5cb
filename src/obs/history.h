// A run's history as the dashboard and `bucketrl plot` show it, built from the manifests in
// the bucket (so a restarted proxy shows the same curves): one point per global version
// (time, updates folded, reward mean and spread, bytes in, aggregation time, staleness),
// per-worker totals (updates folded and rejected, bytes, staleness), the newest rejected
// updates with their reasons, and held-out evaluations.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <deque>
#include <map>
#include <string>

#include "protocol/health.h"
#include "protocol/records.h"
#include "store/object_store.h"

namespace brl::obs {

struct VersionPoint {
  int64_t version = 0, created_ms = 0, samples = 0;
  int64_t updates = 0, rejected = 0;
  // Sample-weighted mean of the folded updates' train rewards, and their spread (weighted
  // standard deviation across the updates: how much the workers' batches disagree).
  double reward_mean = 0, reward_std = 0, accuracy = 0;
  uint64_t bytes_in = 0;      // sum of the folded update objects' sizes
  double aggregate_s = 0;     // the proxy's aggregation time
  double staleness_mean = 0;  // mean staleness of the folded updates
  double delta_norm = 0;
  double frac_reward_zero_std = -1;  // of its updates' prompt groups without reward variance (-1: unknown)
  int64_t best_version = -1;         // the run's best train reward up to it, as its proxy recorded it
  double best_reward = 0;
  std::string proxy;
  nlohmann::json to_json() const;
};
VersionPoint summarize_version(const protocol::Manifest& m);

struct WorkerTotals {
  int64_t folded = 0, rejected = 0, samples = 0, last_version = -1;
  uint64_t bytes = 0;
  double staleness_sum = 0;
  double staleness_mean() const { return folded ? staleness_sum / folded : 0; }
};

struct RejectedEntry {
  int64_t version = 0;
  std::string worker, id, reason;
};

struct RunHistory {
  size_t max_versions = 2000, max_rejected = 200;  // bounded memory on long runs
  std::deque<VersionPoint> versions;               // ascending
  std::map<std::string, WorkerTotals> workers;     // over the versions added
  std::deque<RejectedEntry> rejected;              // newest last
  std::map<int64_t, protocol::EvalRecord> evals;   // by version
  // The run's health by protocol/health.h's rule over the versions and evaluations held.
  protocol::RunHealth health(const protocol::RunHealthRule& rule) const;

  int64_t newest() const { return versions.empty() ? -1 : versions.back().version; }
  // Adds a version newer than newest() (older or repeated ones are ignored).
  void add(const protocol::Manifest& m);
  nlohmann::json to_json() const;  // {versions, workers, rejected, evals}
};

// Adds the manifests of versions (h.newest(), upto] to h, at most h.max_versions of the newest.
// Stops at the first manifest it cannot read (the status says which) so a later call resumes.
Status load_history(store::ObjectStore& s, RunHistory& h, int64_t upto);
// Adds evaluations not yet in h (evals/ listed after the newest one known).
Status load_evals(store::ObjectStore& s, RunHistory& h);

}  // namespace brl::obs
