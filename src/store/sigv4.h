// AWS Signature Version 4 (header auth and presigned-URL query auth), on OpenSSL.
// Pure functions over a request description: no I/O, no clock (the caller passes the time),
// so the AWS test suite and botocore's S3 signer can check every intermediate string.
// Two URI rules exist: generic SigV4 normalizes the path and encodes it once more than it is
// on the wire ("double encoding"); S3 does neither — it signs the key exactly as sent.
#pragma once

#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace brl::store::sigv4 {

inline constexpr const char* kUnsignedPayload = "UNSIGNED-PAYLOAD";
inline constexpr const char* kEmptySha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

struct Credentials {
  std::string access_key;
  std::string secret_key;
  std::string session_token;  // empty unless temporary (STS) credentials
};

enum class UriMode {
  kGeneric,  // path normalized (., .., //) and each byte outside unreserved encoded again
  kS3,       // path = the decoded key; encoded once, '/' kept, never normalized
};

struct Request {
  std::string method;  // "GET"
  // kGeneric: the path as on the wire. kS3: the decoded path ("/bucket/my key"); the wire
  // path is canonical_uri(path, kS3).
  std::string path;
  std::vector<std::pair<std::string, std::string>> query;    // decoded names and values
  std::vector<std::pair<std::string, std::string>> headers;  // must include Host
  std::string payload_hash;                                  // hex sha256 of the body, or kUnsignedPayload
};

struct Scope {
  std::string region = "us-east-1";
  std::string service = "s3";
  std::string amz_date;  // "20150830T123600Z"
  UriMode mode = UriMode::kS3;
};

struct Signed {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signed_headers;  // "host;x-amz-date"
  std::string signature;       // hex
  std::string authorization;   // value of the Authorization header
};

// "YYYYMMDDTHHMMSSZ" for a UTC time.
std::string amz_date(std::time_t t);
// RFC 3986 encoding: unreserved A-Z a-z 0-9 - _ . ~ kept, everything else %XX (upper hex).
std::string uri_encode(std::string_view s, bool keep_slash);
std::string uri_decode(std::string_view s);
// Removes "." and ".." segments and empty segments, keeping a trailing slash.
std::string normalize_path(std::string_view path);
std::string canonical_uri(std::string_view path, UriMode mode);
std::string canonical_query(const std::vector<std::pair<std::string, std::string>>& query);
// Lowercased names, values trimmed with inner runs of spaces collapsed, duplicates joined
// with ',' in order, sorted by name. Returns {canonical header block, signed header list}.
std::pair<std::string, std::string> canonical_headers(const std::vector<std::pair<std::string, std::string>>& headers);
std::string canonical_request(const Request& req, UriMode mode);
std::string string_to_sign(const std::string& canonical_request, const Scope& scope);
// kSigning = HMAC(HMAC(HMAC(HMAC("AWS4"+secret, date), region), service), "aws4_request")
std::string signing_key(const std::string& secret, const std::string& date, const std::string& region,
                        const std::string& service);
std::string hmac_sha256(std::string_view key, std::string_view data);  // raw bytes

// Header auth. Signs exactly req.headers; callers add X-Amz-Date, X-Amz-Content-Sha256 and
// X-Amz-Security-Token first (add_auth_headers does that).
Signed sign(const Request& req, const Credentials& creds, const Scope& scope);
// Adds x-amz-date, x-amz-content-sha256 (S3 only) and x-amz-security-token, then signs and
// appends Authorization. Returns the intermediate strings for debugging/tests.
Signed add_auth_headers(Request& req, const Credentials& creds, const Scope& scope);

// Query auth (presigned URL): adds the X-Amz-* parameters to req.query, signs with
// UNSIGNED-PAYLOAD and returns the full query string (canonical order, signature last).
std::string presign_query(Request& req, const Credentials& creds, const Scope& scope, int expires_s,
                          Signed* out = nullptr);

}  // namespace brl::store::sigv4
