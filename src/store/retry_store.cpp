// Retry decorator (see retry_store.h for the policy).
#include "store/retry_store.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <thread>
#include <type_traits>

#include "util/hash.h"
#include "util/log.h"

namespace brl::store {

namespace {
const Status& status_of(const Status& s) { return s; }
template <class T>
const Status& status_of(const Result<T>& r) {
  return r.status();
}
}  // namespace

RetryStore::RetryStore(std::shared_ptr<ObjectStore> inner, RetryOptions opt)
    : inner_(std::move(inner)), opt_(std::move(opt)), rng_(opt_.seed ? opt_.seed : std::random_device{}()) {
  BRL_ASSERT(opt_.max_attempts >= 1);
  if (!opt_.sleep) opt_.sleep = [](std::chrono::milliseconds d) { std::this_thread::sleep_for(d); };
}

RetryCounts RetryStore::counts() const {
  std::lock_guard<std::mutex> lk(mu_);
  return counts_;
}

std::chrono::milliseconds RetryStore::backoff(int retry) {
  // base * 2^retry, capped (and the shift bounded so it cannot overflow).
  int64_t cap = opt_.base_delay.count() << std::min(retry, 30);
  cap = std::min<int64_t>(cap, opt_.max_delay.count());
  std::lock_guard<std::mutex> lk(mu_);
  std::uniform_int_distribution<int64_t> u(0, std::max<int64_t>(cap, 0));
  return std::chrono::milliseconds(u(rng_));
}

template <class R, class F>
R RetryStore::run(const char* op, const std::string& key, F&& attempt, bool* retried_after_transient) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    ++counts_.calls;
  }
  const auto start = std::chrono::steady_clock::now();
  std::chrono::milliseconds slept{0};  // fake sleeps in tests advance this, not the clock
  for (int i = 0;; ++i) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      ++counts_.attempts;
    }
    R r = attempt();
    const Status& st = status_of(r);
    if (!st.retryable()) return r;
    if (retried_after_transient) *retried_after_transient = true;
    auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    elapsed = std::max(elapsed, slept);
    auto delay = backoff(i);
    if (i + 1 >= opt_.max_attempts || elapsed + delay > opt_.total_time) {
      {
        std::lock_guard<std::mutex> lk(mu_);
        ++counts_.gave_up;
      }
      Status final(st.code(), st.message() + " (gave up on " + op + " '" + key + "' after " + std::to_string(i + 1) +
                                  " attempts in " + std::to_string(elapsed.count()) + " ms)");
      if constexpr (std::is_same_v<R, Status>) return final;
      else return R(final);
    }
    LOG_DEBUG("{} '{}' on {}: {}; retry {} in {} ms", op, key, inner_->describe(), st.to_string(), i + 1,
              delay.count());
    opt_.sleep(delay);
    slept += delay;
    std::lock_guard<std::mutex> lk(mu_);
    counts_.slept += delay;
  }
}

Status RetryStore::put(const std::string& key, const std::string& data, const PutOptions& opt) {
  bool ambiguous = false;
  Status st = run<Status>(
      "put", key, [&] { return inner_->put(key, data, opt); }, &ambiguous);
  if (opt.create_only && ambiguous && st.code() == StatusCode::kPreconditionFailed) {
    auto got = run<Result<std::string>>("get", key, [&] { return inner_->get(key); });
    if (got && *got == data) return Status::ok();  // an earlier attempt of ours landed
  }
  return st;
}

Status RetryStore::put_file(const std::string& key, const std::string& path, const PutOptions& opt) {
  bool ambiguous = false;
  Status st = run<Status>(
      "put_file", key, [&] { return inner_->put_file(key, path, opt); }, &ambiguous);
  if (opt.create_only && ambiguous && st.code() == StatusCode::kPreconditionFailed) {
    namespace fs = std::filesystem;
    std::string tmp = (fs::temp_directory_path() / ("brl-verify-" + std::to_string(::getpid()) + "-" +
                                                    std::to_string(std::hash<std::string>{}(key))))
                          .string();
    Status g = run<Status>("get_file", key, [&] { return inner_->get_file(key, tmp); });
    bool same = false;
    try {
      same = g && sha256_file_hex(tmp) == sha256_file_hex(path);
    } catch (const UserError&) {
    }
    std::error_code ec;
    fs::remove(tmp, ec);
    if (same) return Status::ok();
  }
  return st;
}

Result<std::string> RetryStore::get(const std::string& key, const GetOptions& opt) {
  return run<Result<std::string>>("get", key, [&] { return inner_->get(key, opt); });
}

Status RetryStore::get_file(const std::string& key, const std::string& path) {
  return run<Status>("get_file", key, [&] { return inner_->get_file(key, path); });
}

Result<ObjectInfo> RetryStore::head(const std::string& key) {
  return run<Result<ObjectInfo>>("head", key, [&] { return inner_->head(key); });
}

Result<ListPage> RetryStore::list(const ListOptions& opt) {
  return run<Result<ListPage>>("list", opt.prefix, [&] { return inner_->list(opt); });
}

Status RetryStore::remove(const std::string& key) {
  return run<Status>("remove", key, [&] { return inner_->remove(key); });
}

}  // namespace brl::store
