// libcurl easy interface, one handle per thread: curl_easy_reset keeps the handle's
// connection cache, so consecutive requests from a thread reuse the TCP connection.
#include "store/http.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

namespace brl::store::http {

namespace {

struct Handle {
  CURL* curl = nullptr;
  pid_t pid = 0;
  Handle() { init(); }
  void init() {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
    curl = curl_easy_init();
    pid = ::getpid();
  }
  ~Handle() {
    if (curl && pid == ::getpid()) curl_easy_cleanup(curl);
  }
};

CURL* thread_handle() {
  thread_local Handle h;
  // After fork() the child inherits the parent's open keep-alive sockets: using them from
  // both processes interleaves two conversations on one connection. The child abandons the
  // inherited handle (cleaning it up could talk on the parent's connections) and starts fresh.
  if (h.pid != ::getpid()) h.init();
  curl_easy_reset(h.curl);
  return h.curl;
}

struct UploadState {
  const std::string* body = nullptr;
  int fd = -1;
  uint64_t offset = 0, remaining = 0, pos = 0;
  int err = 0;
};

size_t read_cb(char* buf, size_t size, size_t n, void* ud) {
  auto* u = static_cast<UploadState*>(ud);
  size_t want = size * n;
  if (u->body) {
    size_t left = u->body->size() - u->pos;
    size_t k = std::min(want, left);
    std::memcpy(buf, u->body->data() + u->pos, k);
    u->pos += k;
    return k;
  }
  if (u->remaining == 0) return 0;
  size_t k = static_cast<size_t>(std::min<uint64_t>(want, u->remaining));
  ssize_t got = ::pread(u->fd, buf, k, static_cast<off_t>(u->offset + u->pos));
  if (got <= 0) {  // file shrank or read error: abort rather than send a short body
    u->err = got < 0 ? errno : EIO;
    return CURL_READFUNC_ABORT;
  }
  u->pos += static_cast<uint64_t>(got);
  u->remaining -= static_cast<uint64_t>(got);
  return static_cast<size_t>(got);
}

struct DownloadState {
  CURL* curl;
  Response* resp;
  int fd;
  int err = 0;
};

size_t write_cb(char* data, size_t size, size_t n, void* ud) {
  auto* d = static_cast<DownloadState*>(ud);
  size_t len = size * n;
  long code = 0;
  curl_easy_getinfo(d->curl, CURLINFO_RESPONSE_CODE, &code);
  if (d->fd < 0 || code < 200 || code >= 300) {
    d->resp->body.append(data, len);
    return len;
  }
  size_t done = 0;
  while (done < len) {
    ssize_t w = ::write(d->fd, data + done, len - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      d->err = errno;
      return 0;  // makes curl fail with CURLE_WRITE_ERROR
    }
    done += static_cast<size_t>(w);
  }
  d->resp->downloaded += len;
  return len;
}

size_t header_cb(char* data, size_t size, size_t n, void* ud) {
  auto* resp = static_cast<Response*>(ud);
  size_t len = size * n;
  std::string line(data, len);
  if (line.rfind("HTTP/", 0) == 0) {
    resp->headers.clear();  // a new response (after 100 Continue or a redirect)
    return len;
  }
  size_t colon = line.find(':');
  if (colon == std::string::npos) return len;
  std::string name = line.substr(0, colon);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string value = line.substr(colon + 1);
  size_t b = value.find_first_not_of(" \t"), e = value.find_last_not_of(" \t\r\n");
  value = b == std::string::npos ? "" : value.substr(b, e - b + 1);
  resp->headers.emplace_back(std::move(name), std::move(value));
  return len;
}

}  // namespace

std::string Response::header(const std::string& name) const {
  for (const auto& [k, v] : headers)
    if (k == name) return v;
  return "";
}

std::string redact_url(const std::string& url) {
  std::string out = url;
  for (const char* key : {"X-Amz-Signature=", "X-Amz-Credential=", "X-Amz-Security-Token="}) {
    size_t p = 0;
    while ((p = out.find(key, p)) != std::string::npos) {
      size_t start = p + std::strlen(key);
      size_t end = out.find('&', start);
      if (end == std::string::npos) end = out.size();
      out.replace(start, end - start, "REDACTED");
      p = start;
    }
  }
  return out;
}

Result<Response> perform(const Request& req) {
  CURL* c = thread_handle();
  Response resp;
  curl_easy_setopt(c, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, req.timeouts.connect_ms);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, req.timeouts.low_speed_bytes);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, req.timeouts.low_speed_s);
  if (req.timeouts.total_ms > 0) curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, req.timeouts.total_ms);
  curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);

  struct curl_slist* hdrs = nullptr;
  for (const auto& [k, v] : req.headers) hdrs = curl_slist_append(hdrs, (k + ": " + v).c_str());
  hdrs = curl_slist_append(hdrs, "Expect:");  // no 100-continue round trip
  hdrs = curl_slist_append(hdrs, "Accept:");
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);

  UploadState up;
  int upload_fd = -1;
  bool sends_body = req.body || !req.upload_path.empty();
  if (req.method == "HEAD") {
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else if (sends_body) {
    if (!req.upload_path.empty()) {
      upload_fd = ::open(req.upload_path.c_str(), O_RDONLY | O_CLOEXEC);
      if (upload_fd < 0) {
        curl_slist_free_all(hdrs);
        return Status(StatusCode::kIOError,
                      "cannot open '" + req.upload_path + "' for upload: " + std::strerror(errno));
      }
      up.fd = upload_fd;
      up.offset = req.upload_offset;
      up.remaining = req.upload_length;
    } else {
      up.body = req.body;
    }
    uint64_t len = req.upload_path.empty() ? req.body->size() : req.upload_length;
    curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, read_cb);
    curl_easy_setopt(c, CURLOPT_READDATA, &up);
    curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(len));
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  } else if (req.method != "GET") {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  }

  DownloadState down{c, &resp, req.download_fd};
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write_cb);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &down);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, header_cb);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &resp);
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);

  CURLcode rc = curl_easy_perform(c);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp.status);
  curl_slist_free_all(hdrs);
  if (upload_fd >= 0) ::close(upload_fd);

  if (rc != CURLE_OK) {
    std::string where = req.method + " " + redact_url(req.url);
    if (down.err)
      return Status(StatusCode::kIOError, where + ": writing the download failed: " + std::strerror(down.err));
    if (up.err)
      return Status(StatusCode::kIOError,
                    where + ": reading '" + req.upload_path + "' failed: " + std::strerror(up.err));
    std::string why = errbuf[0] ? errbuf : curl_easy_strerror(rc);
    return Status(StatusCode::kTransient, where + ": " + why);
  }
  return resp;
}

}  // namespace brl::store::http
