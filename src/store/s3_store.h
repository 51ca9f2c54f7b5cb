// S3 backend (AWS Signature Version 4 over libcurl). See s3_store.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "store/credentials.h"
#include "store/http.h"
#include "store/object_store.h"

namespace brl::store {

// url: "s3://bucket[/prefix]". Settings from the standard AWS environment variables and
// ~/.aws/{credentials,config}: AWS_ENDPOINT_URL (or AWS_ENDPOINT_URL_S3), AWS_REGION /
// AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE.
std::unique_ptr<ObjectStore> open_s3_store(const std::string& url);

// Retry and transfer settings. Defaults suit AWS and RGW; BRL_S3_MAX_ATTEMPTS,
// BRL_S3_MAX_RETRY_S and BRL_S3_PART_SIZE_MIB override them in open_s3_store(url).
struct S3Options {
  int max_attempts = 8;       // per operation (and per multipart part)
  double max_retry_s = 60;    // total time one operation may spend retrying
  int base_backoff_ms = 100;  // full jitter: sleep uniform(0, min(max, base * 2^attempt))
  int max_backoff_ms = 5000;
  http::Timeouts timeouts;
  uint64_t part_size = 8ull << 20;             // multipart part size (S3 minimum 5 MiB)
  uint64_t multipart_threshold = 16ull << 20;  // put_file uses multipart above this size
  int upload_threads = 4;                      // parts in flight at once
  // Whole-object GETs are checked against the ETag when it is a plain MD5 (single-part
  // uploads without SSE-KMS). BRL_S3_VERIFY_ETAG=0 turns it off.
  bool verify_etag_md5 = true;
};

S3Options s3_options_from_env(const EnvLookup& env = process_env());
std::unique_ptr<ObjectStore> open_s3_store(const std::string& url, const S3Options& opt,
                                           const EnvLookup& env = process_env());

// Exposed for unit tests of the response parsing (no server needed).
namespace s3_detail {
std::string xml_unescape(std::string_view s);
// Text of the first <name>...</name> at or after `from`, unescaped; "" if absent.
std::string xml_text(const std::string& xml, const std::string& name, size_t from = 0, size_t to = std::string::npos);
// A ListObjectsV2 result; keys have `strip_prefix` removed.
Result<ListPage> parse_list_v2(const std::string& xml, const std::string& strip_prefix);
int64_t parse_iso8601_ms(const std::string& s);    // "2024-01-02T03:04:05.678Z"; -1 if malformed
int64_t parse_http_date_ms(const std::string& s);  // "Tue, 02 Jan 2024 03:04:05 GMT"; -1 if malformed
}  // namespace s3_detail

}  // namespace brl::store
