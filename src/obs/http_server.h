// A small HTTP/1.1 server on POSIX sockets for the proxy's observability endpoints
// (/health, /status, /metrics, the dashboard). Dependency-free and deliberately modest:
// GET and HEAD only, one request per connection (Connection: close), all on the server's own
// thread: connections wait for their request heads side by side (poll), each within a
// deadline of its own, and handlers run one at a time, never on the caller's thread. Slow,
// idle or oversized clients cannot hold it (BENCHMARKS.md "The proxy's HTTP server" measures
// this beside cpp-httplib).
//
// Auth: on a loopback address nothing is required. Bound to any other address, every route
// not registered as public needs `Authorization: Bearer <token>` (or HTTP Basic with the
// token as password, which is what a browser sends after its login prompt); the server
// refuses to start there without a token. Tokens are compared in constant time and never
// logged. Non-goals: TLS (put a reverse proxy in front), keep-alive, request bodies.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "util/status.h"

namespace brl::obs {

struct HttpRequest {
  std::string method, target, path, query, version;  // target = path[?query]
  std::map<std::string, std::string> headers;        // names lower-cased
  std::string header(const std::string& lower_name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
};

// Parses a request head (request line + headers, up to the blank line). kInvalidArgument
// with the reason for anything malformed (the server answers 400).
Result<HttpRequest> parse_request(std::string_view head);
// The response as bytes on the wire; head_only: headers without the body (HEAD).
std::string format_response(const HttpResponse& r, bool head_only = false);
const char* status_reason(int status);

struct ListenAddress {
  std::string host;  // numeric IPv4 ("127.0.0.1", "0.0.0.0")
  int port = 0;      // 0 = any free port
  bool off = false;
};
// "ADDR:PORT", ":PORT" (= 127.0.0.1), "PORT", or "off". Throws UserError naming `flag`.
ListenAddress parse_listen_address(const std::string& text, const std::string& flag = "--http");
bool is_loopback(const std::string& host);

// Equal strings, in time that depends only on the lengths (no early exit on a mismatch).
bool constant_time_equal(std::string_view a, std::string_view b);
// Whether an Authorization header value carries `token` (Bearer, or Basic with it as password).
bool authorization_matches(std::string_view header, std::string_view token);

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  // token: "" = none (allowed only on loopback: start() refuses otherwise).
  HttpServer(ListenAddress addr, std::string token);
  ~HttpServer();  // stops
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Register before start(). Public routes skip the token check (/health, for probes).
  void route(const std::string& path, Handler h, bool is_public = false);
  // Binds, listens and starts the serving thread. Errors (address in use, ...) name the address.
  Status start();
  void stop();
  int port() const { return port_; }  // the bound port (after start)
  std::string url() const;            // http://host:port/
  bool requires_token() const { return !is_loopback(addr_.host); }

  // Handles one parsed request (routing + auth); what the serving thread does per connection.
  HttpResponse respond(const HttpRequest& req) const;

 private:
  struct Route {
    Handler handler;
    bool is_public = false;
  };
  void serve();
  // Reads what a connection has sent; once its head is whole (or too big, or the client is
  // gone) answers it and returns true: the connection is done.
  bool read_head(int fd, std::string& head);

  ListenAddress addr_;
  std::string token_;  // never logged
  std::map<std::string, Route> routes_;
  int listen_fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace brl::obs
