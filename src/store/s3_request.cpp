// S3 request execution (retry with full jitter, status mapping) and the small XML reader for
// S3's answers (error bodies, ListObjectsV2, CreateMultipartUpload): S3 XML is flat and
// regular, so finding elements by name within a bounded range is enough; entity escapes are
// decoded (keys may contain & < > ' ").
#include "store/s3_request.h"

#include <chrono>
#include <ctime>
#include <random>
#include <thread>

#include "util/clock.h"
#include "util/log.h"

namespace brl::store {

namespace s3_detail {

namespace {
void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}
}  // namespace

std::string xml_unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    size_t semi = s.find(';', i);
    if (semi == std::string_view::npos || semi - i > 10) {
      out += s[i];
      continue;
    }
    std::string_view ent = s.substr(i + 1, semi - i - 1);
    if (ent == "amp") out += '&';
    else if (ent == "lt") out += '<';
    else if (ent == "gt") out += '>';
    else if (ent == "quot") out += '"';
    else if (ent == "apos") out += '\'';
    else if (ent.size() > 1 && ent[0] == '#') {
      bool hexa = ent[1] == 'x' || ent[1] == 'X';
      std::string digits(ent.substr(hexa ? 2 : 1));
      char* end = nullptr;
      unsigned long cp = std::strtoul(digits.c_str(), &end, hexa ? 16 : 10);
      if (digits.empty() || *end != '\0' || cp > 0x10FFFF) {
        out += s[i];
        continue;
      }
      append_utf8(out, static_cast<uint32_t>(cp));
    } else {
      out += s[i];
      continue;
    }
    i = semi;
  }
  return out;
}

namespace {
// [open, close) of the next <name>...</name> element in [from, to); open = after the start tag.
bool find_element(const std::string& xml, const std::string& name, size_t from, size_t to, size_t* open,
                  size_t* close) {
  const std::string start = "<" + name, end = "</" + name + ">";
  size_t p = from;
  while ((p = xml.find(start, p)) != std::string::npos && p < to) {
    char next = p + start.size() < xml.size() ? xml[p + start.size()] : '\0';
    if (next == '>' || next == ' ' || next == '/') {
      size_t gt = xml.find('>', p);
      if (gt == std::string::npos || gt >= to) return false;
      if (xml[gt - 1] == '/') {  // <Name/>: empty
        *open = *close = gt + 1;
        return true;
      }
      size_t e = xml.find(end, gt + 1);
      if (e == std::string::npos || e > to) return false;
      *open = gt + 1;
      *close = e;
      return true;
    }
    p += start.size();
  }
  return false;
}
}  // namespace

std::string xml_text(const std::string& xml, const std::string& name, size_t from, size_t to) {
  size_t open, close;
  if (to == std::string::npos) to = xml.size();
  if (!find_element(xml, name, from, to, &open, &close)) return "";
  return xml_unescape(std::string_view(xml).substr(open, close - open));
}

Result<ListPage> parse_list_v2(const std::string& xml, const std::string& strip_prefix) {
  if (xml.find("<ListBucketResult") == std::string::npos)
    return Status(StatusCode::kInternal, "the answer is not a ListBucketResult: " + xml.substr(0, 200));
  ListPage page;
  size_t pos = 0, open, close;
  while (find_element(xml, "Contents", pos, xml.size(), &open, &close)) {
    ObjectInfo o;
    std::string key = xml_text(xml, "Key", open, close);
    pos = close;
    if (key.compare(0, strip_prefix.size(), strip_prefix) != 0) continue;
    o.key = key.substr(strip_prefix.size());
    o.size = std::strtoull(xml_text(xml, "Size", open, close).c_str(), nullptr, 10);
    o.etag = xml_text(xml, "ETag", open, close);
    if (o.etag.size() >= 2 && o.etag.front() == '"' && o.etag.back() == '"')
      o.etag = o.etag.substr(1, o.etag.size() - 2);
    o.mtime_ms = std::max<int64_t>(0, parse_iso8601_ms(xml_text(xml, "LastModified", open, close)));
    page.objects.push_back(std::move(o));
  }
  if (xml_text(xml, "IsTruncated") == "true") {
    page.next = xml_text(xml, "NextContinuationToken");
    if (page.next.empty()) return Status(StatusCode::kInternal, "truncated listing without NextContinuationToken");
  }
  return page;
}

int64_t parse_iso8601_ms(const std::string& s) {
  std::tm tm{};
  int ms = 0;
  int n = std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                      &tm.tm_min, &tm.tm_sec, &ms);
  if (n < 6) return -1;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<int64_t>(timegm(&tm)) * 1000 + (n == 7 ? ms : 0);
}

int64_t parse_http_date_ms(const std::string& s) {
  std::tm tm{};
  const char* end = strptime(s.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (!end) return -1;
  return static_cast<int64_t>(timegm(&tm)) * 1000;
}

}  // namespace s3_detail

S3Client::S3Client(std::string bucket, S3Config cfg, S3Options opt)
    : bucket_(std::move(bucket)), cfg_(std::move(cfg)), opt_(opt) {}

S3Call S3Client::object_call(const std::string& method, const std::string& full_key) const {
  S3Call c;
  c.method = method;
  c.path = (cfg_.path_style ? "/" + bucket_ + "/" : "/") + full_key;
  c.what = method + " " + url_of(full_key);
  return c;
}

S3Call S3Client::bucket_call(const std::string& method, const std::string& what) const {
  S3Call c;
  c.method = method;
  c.path = cfg_.path_style ? "/" + bucket_ : "/";
  c.what = what;
  return c;
}

Status S3Client::classify(const http::Response& r, const S3Call& call) const {
  long s = r.status;
  if ((s >= 200 && s < 300) || s == 304) return Status::ok();
  std::string code = s3_detail::xml_text(r.body, "Code");
  std::string msg = s3_detail::xml_text(r.body, "Message");
  std::string detail = "HTTP " + std::to_string(s) + (code.empty() ? "" : " " + code) + (msg.empty() ? "" : ": " + msg);
  std::string where = call.what + ": ";
  if (s == 404) {
    if (code == "NoSuchBucket")
      return {StatusCode::kNotFound,
              where + "bucket '" + bucket_ + "' does not exist at " + endpoint() + " (" + detail + ")"};
    return {StatusCode::kNotFound, where + "no such object (" + detail + ")"};
  }
  if (s == 403) {
    std::string why;
    if (code == "SignatureDoesNotMatch") why = "the secret key does not match the access key id. ";
    else if (code == "InvalidAccessKeyId") why = "the server does not know the access key id. ";
    else if (code == "RequestTimeTooSkewed") why = "this machine's clock is too far off; fix the clock (NTP). ";
    else if (code == "ExpiredToken" || code == "InvalidToken")
      why = "the session token (AWS_SESSION_TOKEN) is expired or invalid. ";
    return {StatusCode::kAccessDenied, where + "access denied (" + detail + ") for bucket '" + bucket_ + "' at " +
                                           endpoint() + ": " + why +
                                           "Check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (credentials from " +
                                           cfg_.creds_source + ") and that they may access this bucket"};
  }
  if (s == 416)
    return {StatusCode::kInvalidArgument, where + "the range starts at or past the end of the object (" + detail + ")"};
  if (s == 412)
    return {StatusCode::kPreconditionFailed, where + "precondition failed, the object already exists (" + detail + ")"};
  if (s == 429 || s == 503 || code == "SlowDown") return {StatusCode::kThrottled, where + detail};
  if (s >= 500 || s == 408 || code == "RequestTimeout" || code == "OperationAborted" ||
      code == "ConditionalRequestConflict")
    return {StatusCode::kTransient, where + detail};
  if (code == "XAmzContentSHA256Mismatch" || code == "BadDigest" || code == "IncompleteBody")
    return {StatusCode::kCorrupt,
            where + "the server received a body that does not match its checksum (" + detail + ")"};
  if (s == 301 || s == 307 || code == "PermanentRedirect" || code == "AuthorizationHeaderMalformed")
    return {StatusCode::kInvalidArgument, where + detail + " (wrong region? set AWS_REGION to the bucket's region)"};
  return {StatusCode::kInvalidArgument, where + detail};
}

Result<http::Response> S3Client::execute(S3Call& call) const {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(static_cast<int64_t>(opt_.max_retry_s * 1000));
  thread_local std::mt19937_64 rng(std::random_device{}());
  const std::string host = cfg_.path_style ? cfg_.endpoint_host : bucket_ + "." + cfg_.endpoint_host;
  Status last;
  int attempt = 0;
  for (attempt = 1; attempt <= opt_.max_attempts; ++attempt) {
    if (call.before_attempt && !call.before_attempt())
      return Status(StatusCode::kIOError, call.what + ": cannot reset the local file for a retry");
    sigv4::Request sreq;
    sreq.method = call.method;
    sreq.path = call.path;
    sreq.query = call.query;
    sreq.headers = call.headers;
    sreq.headers.emplace_back("Host", host);
    sreq.payload_hash = call.payload_hash;
    sigv4::Scope scope{cfg_.region, "s3", sigv4::amz_date(std::time(nullptr)), sigv4::UriMode::kS3};
    sigv4::add_auth_headers(sreq, cfg_.creds, scope);

    http::Request hreq;
    hreq.method = call.method;
    hreq.url = cfg_.scheme + "://" + host + sigv4::canonical_uri(call.path, sigv4::UriMode::kS3);
    if (!call.query.empty()) hreq.url += "?" + sigv4::canonical_query(call.query);
    for (auto& h : sreq.headers)
      if (h.first != "Host") hreq.headers.push_back(std::move(h));
    if (call.has_body) hreq.body = call.body;
    hreq.upload_path = call.upload_path;
    hreq.upload_offset = call.upload_offset;
    hreq.upload_length = call.upload_length;
    hreq.download_fd = call.download_fd;
    hreq.timeouts = opt_.timeouts;

    auto r = http::perform(hreq);
    Status st = r ? classify(*r, call) : Status(r.status().code(), call.what + ": " + r.status().message());
    if (st.is_ok()) return r;
    bool retry = st.retryable() || st.code() == StatusCode::kCorrupt;
    if (!retry) return st;
    last = st;
    if (attempt == opt_.max_attempts) break;
    // Full jitter (AWS Architecture Blog, "Exponential Backoff And Jitter").
    int64_t cap =
        std::min<int64_t>(opt_.max_backoff_ms, static_cast<int64_t>(opt_.base_backoff_ms) << std::min(attempt - 1, 20));
    auto sleep = std::chrono::milliseconds(std::uniform_int_distribution<int64_t>(0, std::max<int64_t>(cap, 1))(rng));
    if (Clock::now() + sleep >= deadline) break;
    call.retried = true;
    LOG_DEBUG("{} (attempt {}/{}), retrying in {} ms", st.to_string(), attempt, opt_.max_attempts, sleep.count());
    std::this_thread::sleep_for(sleep);
  }
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f", secs);
  return Status(last.code(), "gave up after " + std::to_string(std::min(attempt, opt_.max_attempts)) + " attempts in " +
                                 buf + " s: " + last.message());
}

}  // namespace brl::store
