#include "util/status.h"

#include <cstdio>
#include <cstdlib>

namespace brl {

const char* status_code_name(StatusCode c) {
  switch (c) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kPreconditionFailed: return "precondition failed";
    case StatusCode::kAccessDenied: return "access denied";
    case StatusCode::kThrottled: return "throttled";
    case StatusCode::kTransient: return "transient error";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kCorrupt: return "corrupt data";
    case StatusCode::kIOError: return "I/O error";
    case StatusCode::kInternal: return "internal error";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + msg_;
}

[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "bucketrl internal error (a bug): %s:%d: assertion `%s` failed%s%s\n", file, line, expr,
               msg.empty() ? "" : ": ", msg.c_str());
  std::abort();
}

}  // namespace brl
