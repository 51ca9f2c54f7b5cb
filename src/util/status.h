// Status / Result<T>: expected failures on storage and network paths, returned as values
// (RocksDB's Status, STYLE.md). Callers branch on code(); retryable() says whether trying
// again later can help.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "util/error.h"

namespace brl {

enum class StatusCode {
  kOk = 0,
  kNotFound,            // no such object / file
  kPreconditionFailed,  // create-only put on an existing key, If-Match mismatch
  kAccessDenied,        // bad credentials, permission denied
  kThrottled,           // 429 / SlowDown: retry with backoff
  kTransient,           // 5xx, connection reset, timeout: retry with backoff
  kInvalidArgument,     // caller error (bad key, bad range)
  kCorrupt,             // integrity check failed (checksum, truncated body)
  kIOError,             // local disk errors (ENOSPC, EIO, ...)
  kInternal,
};

const char* status_code_name(StatusCode c);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string msg) : code_(code), msg_(std::move(msg)) {}
  static Status ok() { return {}; }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return msg_; }
  bool retryable() const { return code_ == StatusCode::kThrottled || code_ == StatusCode::kTransient; }
  bool is_not_found() const { return code_ == StatusCode::kNotFound; }
  std::string to_string() const;
  // Turn a failure into a UserError at a process/command boundary.
  void throw_if_error() const {
    if (!is_ok()) throw UserError(to_string());
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string msg_;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Status st) : v_(std::move(st)) { BRL_ASSERT(!std::get<Status>(v_).is_ok(), "Result from OK status"); }

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & {
    if (!is_ok()) status().throw_if_error();
    return std::get<T>(v_);
  }
  // By value: `for (auto& x : f().value())` must not iterate a destroyed temporary.
  T value() && {
    if (!is_ok()) status().throw_if_error();
    return std::get<T>(std::move(v_));
  }
  T* operator->() { return &value(); }
  T& operator*() { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace brl
