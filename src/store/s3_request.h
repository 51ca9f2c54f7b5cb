// One S3 request with signing, retries and status mapping: the part of the S3 backend that
// is not about objects. S3Store (s3_store.cpp) describes each operation as an S3Call and
// S3Client::execute sends it, re-signing every attempt (fresh X-Amz-Date).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "store/credentials.h"
#include "store/http.h"
#include "store/s3_store.h"

namespace brl::store {

struct S3Call {
  std::string method;
  std::string path;  // decoded: "/bucket/key" (path-style) or "/key" (virtual-hosted)
  std::string what;  // for messages: "PUT s3://bucket/key"
  std::vector<std::pair<std::string, std::string>> query;    // decoded
  std::vector<std::pair<std::string, std::string>> headers;  // without Host / auth headers
  std::string payload_hash = sigv4::kEmptySha256;
  bool has_body = false;
  const std::string* body = nullptr;  // not owned
  std::string upload_path;
  uint64_t upload_offset = 0, upload_length = 0;
  int download_fd = -1;
  std::function<bool()> before_attempt;  // e.g. truncate the download file; false = I/O error
  // Out: set by execute() when an attempt failed retryably and was retried (a PUT may then
  // have been applied already, its answer lost).
  bool retried = false;
};

class S3Client {
 public:
  S3Client(std::string bucket, S3Config cfg, S3Options opt);

  const std::string& bucket() const { return bucket_; }
  std::string endpoint() const { return cfg_.scheme + "://" + cfg_.endpoint_host; }
  std::string url_of(const std::string& full_key) const { return "s3://" + bucket_ + "/" + full_key; }

  S3Call object_call(const std::string& method, const std::string& full_key) const;
  S3Call bucket_call(const std::string& method, const std::string& what) const;

  // Sends with retries. Success: a 2xx/304 answer. Failure: the mapped Status with a message naming the call, never a secret.
  Result<http::Response> execute(S3Call& call) const;

 private:
  Status classify(const http::Response& r, const S3Call& call) const;

  std::string bucket_;
  S3Config cfg_;
  S3Options opt_;
};

}  // namespace brl::store
