// Fault injection: a decorator over any ObjectStore that makes a chosen fraction of calls
// fail, hang or lose their response, from a seeded generator (a run is reproducible when
// calls come in a fixed order). Used to show that the retry layer and the callers above it
// recover; never in production paths.
//
// Kinds, each with its own probability, drawn once per call in this order:
//  - fail:      kTransient before the inner store is called (connection refused, 503);
//  - reset:     the inner call runs, then kTransient is returned (the response was lost:
//               a put may have been applied; a get's body was cut off after some bytes);
//  - hang:      sleeps hang_ms, then proceeds normally (a slow server).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <random>

#include "store/object_store.h"

namespace brl::store {

struct FaultOptions {
  double fail_rate = 0;
  double reset_rate = 0;
  double hang_rate = 0;
  int hang_ms = 200;
  uint64_t seed = 1;
};

struct FaultCounts {
  int calls = 0, failed = 0, reset = 0, hung = 0;
};

class FaultStore : public ObjectStore {
 public:
  FaultStore(std::shared_ptr<ObjectStore> inner, FaultOptions opt);

  Status put(const std::string& key, const std::string& data, const PutOptions& opt = {}) override;
  Status put_file(const std::string& key, const std::string& path, const PutOptions& opt = {}) override;
  Result<std::string> get(const std::string& key, const GetOptions& opt = {}) override;
  Status get_file(const std::string& key, const std::string& path) override;
  Result<ObjectInfo> head(const std::string& key) override;
  Result<ListPage> list(const ListOptions& opt) override;
  Status remove(const std::string& key) override;
  std::string describe() const override { return "faulty(" + inner_->describe() + ")"; }

  FaultCounts counts() const;
  void set_options(const FaultOptions& opt);  // e.g. turn faults off for verification

 private:
  enum class Fault { kNone, kFail, kReset };
  Fault draw(const char* op);  // also performs the hang
  static Status injected(const char* op, const char* what);

  std::shared_ptr<ObjectStore> inner_;
  mutable std::mutex mu_;
  FaultOptions opt_;
  std::mt19937_64 rng_;
  FaultCounts counts_;
};

}  // namespace brl::store
