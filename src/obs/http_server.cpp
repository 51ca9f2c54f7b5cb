#include "obs/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "util/clock.h"
#include "util/error.h"
#include "util/log.h"

namespace brl::obs {

namespace {

constexpr size_t kMaxHead = 16 * 1024;  // request line + headers
// A client gets this long from its connection to the end of its request head, and this long
// to take the answer: per connection in all, not per recv() (a byte a second must not keep a
// connection forever). Connections wait for their heads side by side, up to kMaxConnections;
// past that the oldest is dropped, so slow or idle clients cannot starve the others.
constexpr int kHeadDeadlineMs = 5000;
constexpr int kSendDeadlineMs = 3000;
constexpr size_t kMaxConnections = 128;

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool is_token_char(char c) {  // RFC 9110 tchar
  return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

// Base64 (RFC 4648, with padding); false on malformed input.
bool base64_decode(std::string_view in, std::string* out) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (in.size() % 4 != 0) return false;
  out->clear();
  for (size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      char c = in[i + k];
      if (c == '=' && i + 4 == in.size() && k >= 2) {
        v[k] = 0;
        ++pad;
      } else if (pad > 0 || (v[k] = val(c)) < 0) {
        return false;
      }
    }
    uint32_t n = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out->push_back(static_cast<char>(n >> 16));
    if (pad < 2) out->push_back(static_cast<char>((n >> 8) & 0xff));
    if (pad < 1) out->push_back(static_cast<char>(n & 0xff));
  }
  return true;
}

int ms_left(Clock::time_point deadline) {
  return static_cast<int>(
      std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()));
}

// On a non-blocking socket: everything, or false once the deadline passes or the peer is gone.
bool send_all(int fd, std::string_view data, int deadline_ms = kSendDeadlineMs) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(deadline_ms);
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) return false;
    pollfd p{fd, POLLOUT, 0};
    const int left = ms_left(deadline);
    if (left == 0 || ::poll(&p, 1, left) <= 0) return false;
  }
  return true;
}

}  // namespace

std::string HttpRequest::header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? "" : it->second;
}

Result<HttpRequest> parse_request(std::string_view head) {
  auto bad = [](const std::string& why) { return Status(StatusCode::kInvalidArgument, "bad HTTP request: " + why); };
  HttpRequest r;
  size_t eol = head.find("\r\n");
  if (eol == std::string_view::npos) return bad("no CRLF after the request line");
  std::string_view line = head.substr(0, eol);
  size_t s1 = line.find(' '), s2 = line.rfind(' ');
  if (s1 == std::string_view::npos || s2 == s1) return bad("request line is not 'METHOD TARGET VERSION'");
  r.method = std::string(line.substr(0, s1));
  r.target = std::string(line.substr(s1 + 1, s2 - s1 - 1));
  r.version = std::string(line.substr(s2 + 1));
  if (r.method.empty() || !std::all_of(r.method.begin(), r.method.end(), is_token_char)) return bad("bad method");
  if (r.version != "HTTP/1.1" && r.version != "HTTP/1.0") return bad("unsupported version " + r.version);
  if (r.target.empty() || r.target[0] != '/' || r.target.find(' ') != std::string::npos)
    return bad("target must start with '/'");
  size_t q = r.target.find('?');
  r.path = r.target.substr(0, q);
  if (q != std::string::npos) r.query = r.target.substr(q + 1);
  size_t pos = eol + 2;
  while (pos < head.size()) {
    size_t e = head.find("\r\n", pos);
    if (e == std::string_view::npos) e = head.size();
    std::string_view h = head.substr(pos, e - pos);
    pos = e + 2;
    if (h.empty()) break;  // the blank line ending the head
    size_t colon = h.find(':');
    if (colon == std::string_view::npos || colon == 0) return bad("header line without a name");
    std::string name(h.substr(0, colon));
    if (!std::all_of(name.begin(), name.end(), is_token_char)) return bad("bad header name");
    r.headers[lower(name)] = std::string(trim(h.substr(colon + 1)));
  }
  if (r.version == "HTTP/1.1" && !r.headers.count("host")) return bad("HTTP/1.1 request without Host");
  return r;
}

const char* status_reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Unknown";
  }
}

std::string format_response(const HttpResponse& r, bool head_only) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + status_reason(r.status) + "\r\n";
  out += "Content-Type: " + r.content_type + "\r\n";
  out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  out += "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n";
  for (auto& [k, v] : r.headers) out += k + ": " + v + "\r\n";
  out += "\r\n";
  if (!head_only) out += r.body;
  return out;
}

ListenAddress parse_listen_address(const std::string& text, const std::string& flag) {
  ListenAddress a;
  if (text == "off") {
    a.off = true;
    return a;
  }
  size_t colon = text.rfind(':');
  std::string host = colon == std::string::npos ? "" : text.substr(0, colon);
  std::string port = colon == std::string::npos ? text : text.substr(colon + 1);
  a.host = host.empty() ? "127.0.0.1" : host == "localhost" ? "127.0.0.1" : host;
  in_addr tmp{};
  char* end = nullptr;
  long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p < 0 || p > 65535 || inet_pton(AF_INET, a.host.c_str(), &tmp) != 1)
    throw UserError(flag + " " + text + ": not ADDR:PORT",
                    "e.g. " + flag + " 127.0.0.1:9470, " + flag + " 0.0.0.0:9470 (needs a token) or " + flag + " off");
  a.port = static_cast<int>(p);
  return a;
}

bool is_loopback(const std::string& host) {
  in_addr a{};
  return inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  // Loop over the longer one so the time does not reveal where the first mismatch is.
  size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0 && !a.empty();
}

bool authorization_matches(std::string_view header, std::string_view token) {
  header = trim(header);
  size_t sp = header.find(' ');
  if (sp == std::string_view::npos) return false;
  std::string scheme = lower(std::string(header.substr(0, sp)));
  std::string_view cred = trim(header.substr(sp + 1));
  if (scheme == "bearer") return constant_time_equal(cred, token);
  if (scheme == "basic") {  // user:password; the user name is not checked
    std::string plain;
    if (!base64_decode(cred, &plain)) return false;
    size_t colon = plain.find(':');
    return colon != std::string::npos && constant_time_equal(std::string_view(plain).substr(colon + 1), token);
  }
  return false;
}

HttpServer::HttpServer(ListenAddress addr, std::string token) : addr_(std::move(addr)), token_(std::move(token)) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::route(const std::string& path, Handler h, bool is_public) {
  routes_[path] = {std::move(h), is_public};
}

std::string HttpServer::url() const { return "http://" + addr_.host + ":" + std::to_string(port_) + "/"; }

Status HttpServer::start() {
  const std::string where = addr_.host + ":" + std::to_string(addr_.port);
  if (requires_token() && token_.empty())
    return {StatusCode::kInvalidArgument,
            "HTTP on " + where +
                " would be reachable from other machines, and no token is set: set BRL_PROXY_TOKEN "
                "(or --http-token-file FILE), or bind to 127.0.0.1"};
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);  // accept() drains the queue
  if (fd < 0) return {StatusCode::kIOError, "HTTP " + where + ": socket: " + std::strerror(errno)};
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // a restarted proxy rebinds at once
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(addr_.port));
  inet_pton(AF_INET, addr_.host.c_str(), &sa.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(fd, 512) != 0) {
    std::string err = std::strerror(errno);
    ::close(fd);
    return {StatusCode::kIOError, "HTTP " + where + ": cannot listen: " + err};
  }
  socklen_t len = sizeof sa;
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  port_ = ntohs(sa.sin_port);
  listen_fd_ = fd;
  stop_ = false;
  thread_ = std::thread([this] { serve(); });
  return Status::ok();
}

void HttpServer::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
}

void HttpServer::serve() {
  struct Conn {
    int fd;
    Clock::time_point deadline;
    std::string head;
  };
  std::vector<Conn> conns;  // oldest first
  std::vector<pollfd> p;
  auto drop = [&](size_t i) {
    ::close(conns[i].fd);
    conns.erase(conns.begin() + static_cast<std::ptrdiff_t>(i));
  };
  while (!stop_.load()) {
    p.assign(1, pollfd{listen_fd_, POLLIN, 0});
    int wait_ms = 200;
    for (auto& c : conns) {
      p.push_back({c.fd, POLLIN, 0});
      wait_ms = std::min(wait_ms, ms_left(c.deadline));
    }
    if (::poll(p.data(), p.size(), wait_ms) < 0 && errno != EINTR) continue;
    // Newest first, so that erasing keeps the indexes of those not yet visited.
    for (size_t i = conns.size(); i-- > 0;) {
      Conn& c = conns[i];
      bool done = false;
      if (p[i + 1].revents != 0) done = read_head(c.fd, c.head);
      if (!done && ms_left(c.deadline) == 0) {
        send_all(c.fd, format_response({408, "text/plain; charset=utf-8", "request head not complete in time\n", {}}),
                 100);
        done = true;
      }
      if (done) drop(i);
    }
    if (p[0].revents & POLLIN) {
      for (;;) {  // everything queued; the oldest waiting clients make room
        int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        std::string head;
        if (read_head(fd, head)) {  // most clients send their head with the connect
          ::close(fd);
          continue;
        }
        if (conns.size() >= kMaxConnections) drop(0);
        conns.push_back({fd, Clock::now() + std::chrono::milliseconds(kHeadDeadlineMs), std::move(head)});
      }
    }
  }
  while (!conns.empty()) drop(conns.size() - 1);
}

bool HttpServer::read_head(int fd, std::string& head) {
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;  // more later
    if (n <= 0) return true;                                               // closed before a whole head arrived
    // Only the new bytes (and the 3 before them) can complete the blank line.
    const size_t from = head.size() < 3 ? 0 : head.size() - 3;
    head.append(buf, static_cast<size_t>(n));
    const size_t end = head.find("\r\n\r\n", from);
    if ((end == std::string::npos ? head.size() : end) > kMaxHead) {
      send_all(fd, format_response({431, "text/plain; charset=utf-8", "request head over 16 KiB\n", {}}));
      return true;
    }
    if (end == std::string::npos) continue;
    auto req = parse_request(std::string_view(head).substr(0, end + 4));
    if (!req) {
      send_all(fd, format_response({400, "text/plain; charset=utf-8", req.status().message() + "\n", {}}));
      return true;
    }
    try {
      send_all(fd, format_response(respond(*req), req->method == "HEAD"));
    } catch (const std::exception& e) {  // a bug in answering must not end the server's thread
      LOG_WARN("http: {}", e.what());
    }
    return true;
  }
}

HttpResponse HttpServer::respond(const HttpRequest& req) const {
  auto it = routes_.find(req.path);
  if (it == routes_.end()) return {404, "text/plain; charset=utf-8", "no such endpoint: " + req.path + "\n", {}};
  if (!it->second.is_public && requires_token() && !authorization_matches(req.header("authorization"), token_))
    return {401,
            "text/plain; charset=utf-8",
            "this endpoint needs Authorization: Bearer <token>\n",
            {{"WWW-Authenticate", "Bearer realm=\"bucketrl\""}, {"WWW-Authenticate", "Basic realm=\"bucketrl\""}}};
  if (req.method != "GET" && req.method != "HEAD")
    return {405, "text/plain; charset=utf-8", req.method + " is not supported: use GET\n", {{"Allow", "GET, HEAD"}}};
  try {
    return it->second.handler(req);
  } catch (const std::exception& e) {
    LOG_WARN("http: {} failed: {}", req.path, e.what());
    return {500, "text/plain; charset=utf-8", std::string("internal error: ") + e.what() + "\n", {}};
  }
}

}  // namespace brl::obs
