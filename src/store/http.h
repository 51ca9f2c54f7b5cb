// A small libcurl wrapper for the S3 client: one reused CURL handle per thread (keep-alive
// connections), timeouts on every request, bodies from memory or streamed from a file range,
// responses into memory or streamed to a file. It knows nothing of S3 and never puts header
// values into messages (they may carry Authorization or X-Amz-Security-Token).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "util/status.h"

namespace brl::store::http {

struct Timeouts {
  long connect_ms = 5000;       // TCP (+TLS) connect
  long low_speed_bytes = 1024;  // abort when slower than this ...
  long low_speed_s = 20;        // ... for this long (catches hung servers)
  long total_ms = 0;            // whole request; 0 = no limit (large objects)
};

struct Request {
  std::string method = "GET";
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;
  // Body: either `body` (not owned; must outlive the call) or a range of a file.
  const std::string* body = nullptr;
  std::string upload_path;
  uint64_t upload_offset = 0, upload_length = 0;
  // Response body of a 2xx answer into this file descriptor (written from its current
  // position) instead of Response::body; error bodies still go to Response::body.
  int download_fd = -1;
  Timeouts timeouts;
};

struct Response {
  long status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // names lowercased
  std::string body;
  uint64_t downloaded = 0;  // bytes written to download_fd
  // First header with this (lowercase) name, or "".
  std::string header(const std::string& name) const;
};

// Performs one request (no retries). A transport failure (refused, reset, timeout, truncated
// body) is kTransient with curl's reason and the URL (query secrets redacted); local file
// errors are kIOError. Any HTTP status is a successful Result.
Result<Response> perform(const Request& req);

// The URL with X-Amz-Signature / X-Amz-Credential / X-Amz-Security-Token values replaced.
std::string redact_url(const std::string& url);

}  // namespace brl::store::http
