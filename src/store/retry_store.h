// Retries with exponential backoff and full jitter (AWS Architecture Blog, "Exponential
// Backoff and Jitter": sleep = uniform(0, min(max_delay, base * 2^retry))), bounded in
// attempts and in total time, and only for retryable() statuses (kTransient, kThrottled).
// A decorator over any ObjectStore, for the directory backend and for tests; the S3 client
// retries inside its HTTP layer as well.
//
// Create-only puts: when an earlier attempt failed transiently it may still have been
// applied (the response was lost), so a later kPreconditionFailed is ambiguous. The retry
// layer then reads the object back: same bytes -> OK (it was our write), else the
// precondition failure stands. Callers that arbitrate with create-only puts (leases,
// "publish version N once") must therefore put something unique to the writer in the body.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <random>

#include "store/object_store.h"

namespace brl::store {

struct RetryOptions {
  int max_attempts = 6;  // including the first
  std::chrono::milliseconds base_delay{50};
  std::chrono::milliseconds max_delay{2000};
  std::chrono::milliseconds total_time{30000};  // no retry sleeps past this since the first attempt
  uint64_t seed = 0;                            // 0: seeded from std::random_device
  // Replaceable for tests (fake time); default std::this_thread::sleep_for.
  std::function<void(std::chrono::milliseconds)> sleep;
};

struct RetryCounts {
  int calls = 0;     // operations started
  int attempts = 0;  // inner calls made
  int gave_up = 0;   // operations that returned a retryable status after all retries
  std::chrono::milliseconds slept{0};
};

class RetryStore : public ObjectStore {
 public:
  RetryStore(std::shared_ptr<ObjectStore> inner, RetryOptions opt = {});

  Status put(const std::string& key, const std::string& data, const PutOptions& opt = {}) override;
  Status put_file(const std::string& key, const std::string& path, const PutOptions& opt = {}) override;
  Result<std::string> get(const std::string& key, const GetOptions& opt = {}) override;
  Status get_file(const std::string& key, const std::string& path) override;
  Result<ObjectInfo> head(const std::string& key) override;
  Result<ListPage> list(const ListOptions& opt) override;
  Status remove(const std::string& key) override;
  std::string describe() const override { return inner_->describe(); }

  RetryCounts counts() const;

  // The delay before retry number `retry` (0-based), drawn with full jitter.
  std::chrono::milliseconds backoff(int retry);

 private:
  template <class R, class F>
  R run(const char* op, const std::string& key, F&& attempt, bool* retried_after_transient = nullptr);

  std::shared_ptr<ObjectStore> inner_;
  RetryOptions opt_;
  mutable std::mutex mu_;
  std::mt19937_64 rng_;
  RetryCounts counts_;
};

}  // namespace brl::store
