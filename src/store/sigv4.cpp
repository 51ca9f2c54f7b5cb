// AWS Signature Version 4: canonical request -> string to sign -> HMAC chain -> signature.
// Spec: "Create a canonical request for Signature Version 4" (AWS General Reference) and the
// S3 variant ("Authenticating Requests: Using the Authorization Header", Amazon S3 API).
#include "store/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <map>

#include "util/hash.h"

namespace brl::store::sigv4 {

namespace {

bool is_unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.' || c == '~';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Trim both ends and collapse runs of spaces/tabs to one space (the spec's "Trimall").
std::string trim_all(std::string_view v) {
  std::string out;
  bool in_space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      in_space = true;
      continue;
    }
    if (in_space && !out.empty()) out += ' ';
    in_space = false;
    out += c;
  }
  return out;
}

std::string hex(const std::string& raw) {
  return to_hex(reinterpret_cast<const unsigned char*>(raw.data()), raw.size());
}

}  // namespace

std::string amz_date(std::time_t t) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string uri_encode(std::string_view s, bool keep_slash) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size() * 3 / 2);
  for (unsigned char c : s) {
    if (is_unreserved(c) || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string uri_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

std::string normalize_path(std::string_view path) {
  std::vector<std::string_view> segs;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    std::string_view seg = path.substr(i, j - i);
    if (seg == "..") {
      if (!segs.empty()) segs.pop_back();
    } else if (!seg.empty() && seg != ".") {
      segs.push_back(seg);
    }
    i = j + 1;
  }
  std::string out;
  for (auto s : segs) {
    out += '/';
    out += s;
  }
  bool trailing = !path.empty() && path.back() == '/';
  if (out.empty() || (trailing && !segs.empty())) out += '/';
  return out;
}

std::string canonical_uri(std::string_view path, UriMode mode) {
  if (path.empty()) return "/";
  if (mode == UriMode::kS3) return uri_encode(path, /*keep_slash=*/true);
  return uri_encode(normalize_path(path), /*keep_slash=*/true);
}

std::string canonical_query(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> enc;
  enc.reserve(query.size());
  for (const auto& [k, v] : query) enc.emplace_back(uri_encode(k, false), uri_encode(v, false));
  std::sort(enc.begin(), enc.end());  // by encoded name, then encoded value (byte order)
  std::string out;
  for (const auto& [k, v] : enc) {
    if (!out.empty()) out += '&';
    out += k;
    out += '=';
    out += v;
  }
  return out;
}

std::pair<std::string, std::string> canonical_headers(const std::vector<std::pair<std::string, std::string>>& headers) {
  std::map<std::string, std::string> merged;  // sorted by lowercase name
  for (const auto& [name, value] : headers) {
    std::string key = to_lower(trim_all(name));
    auto [it, fresh] = merged.try_emplace(key, trim_all(value));
    if (!fresh) it->second += "," + trim_all(value);
  }
  std::string block, names;
  for (const auto& [k, v] : merged) {
    block += k + ":" + v + "\n";
    if (!names.empty()) names += ';';
    names += k;
  }
  return {block, names};
}

std::string canonical_request(const Request& req, UriMode mode) {
  auto [block, names] = canonical_headers(req.headers);
  return req.method + "\n" + canonical_uri(req.path, mode) + "\n" + canonical_query(req.query) + "\n" + block + "\n" +
         names + "\n" + req.payload_hash;
}

std::string string_to_sign(const std::string& creq, const Scope& scope) {
  std::string date = scope.amz_date.substr(0, 8);
  return "AWS4-HMAC-SHA256\n" + scope.amz_date + "\n" + date + "/" + scope.region + "/" + scope.service +
         "/aws4_request\n" + sha256_hex(creq);
}

std::string hmac_sha256(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), out, &n);
  return std::string(reinterpret_cast<char*>(out), n);
}

std::string signing_key(const std::string& secret, const std::string& date, const std::string& region,
                        const std::string& service) {
  std::string k = hmac_sha256("AWS4" + secret, date);
  k = hmac_sha256(k, region);
  k = hmac_sha256(k, service);
  return hmac_sha256(k, "aws4_request");
}

Signed sign(const Request& req, const Credentials& creds, const Scope& scope) {
  Signed s;
  s.canonical_request = canonical_request(req, scope.mode);
  s.signed_headers = canonical_headers(req.headers).second;
  s.string_to_sign = string_to_sign(s.canonical_request, scope);
  std::string date = scope.amz_date.substr(0, 8);
  s.signature = hex(hmac_sha256(signing_key(creds.secret_key, date, scope.region, scope.service), s.string_to_sign));
  s.authorization = "AWS4-HMAC-SHA256 Credential=" + creds.access_key + "/" + date + "/" + scope.region + "/" +
                    scope.service + "/aws4_request, SignedHeaders=" + s.signed_headers + ", Signature=" + s.signature;
  return s;
}

Signed add_auth_headers(Request& req, const Credentials& creds, const Scope& scope) {
  req.headers.emplace_back("x-amz-date", scope.amz_date);
  if (scope.mode == UriMode::kS3) req.headers.emplace_back("x-amz-content-sha256", req.payload_hash);
  if (!creds.session_token.empty()) req.headers.emplace_back("x-amz-security-token", creds.session_token);
  Signed s = sign(req, creds, scope);
  req.headers.emplace_back("Authorization", s.authorization);
  return s;
}

std::string presign_query(Request& req, const Credentials& creds, const Scope& scope, int expires_s, Signed* out) {
  std::string date = scope.amz_date.substr(0, 8);
  req.query.emplace_back("X-Amz-Algorithm", "AWS4-HMAC-SHA256");
  req.query.emplace_back("X-Amz-Credential",
                         creds.access_key + "/" + date + "/" + scope.region + "/" + scope.service + "/aws4_request");
  req.query.emplace_back("X-Amz-Date", scope.amz_date);
  req.query.emplace_back("X-Amz-Expires", std::to_string(expires_s));
  if (!creds.session_token.empty()) req.query.emplace_back("X-Amz-Security-Token", creds.session_token);
  req.query.emplace_back("X-Amz-SignedHeaders", canonical_headers(req.headers).second);
  req.payload_hash = kUnsignedPayload;
  Signed s = sign(req, creds, scope);
  if (out) *out = s;
  return canonical_query(req.query) + "&X-Amz-Signature=" + s.signature;
}

}  // namespace brl::store::sigv4
