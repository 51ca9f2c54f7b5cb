// What `bucketrl proxy --http ADDR:PORT` serves:
//   /health   200 once the proxy has read the run, 503 before (public: no token needed)
//   /status   JSON: run, newest version, workers, rejected updates, recent versions
//   /metrics  Prometheus text format 0.0.4
//   /         the dashboard (obs/dashboard.h), which polls /status
// The token (for addresses other than loopback) comes from --http-token-file or the
// environment variable BRL_PROXY_TOKEN, never from run.json: that lives in the bucket.
#pragma once

#include <memory>
#include <string>

#include "obs/http_server.h"
#include "obs/monitor.h"

namespace brl::obs {

inline constexpr const char* kDefaultProxyHttp = "127.0.0.1:9470";
inline constexpr const char* kTokenEnv = "BRL_PROXY_TOKEN";

// The token from the file (first line, whitespace trimmed) or else from BRL_PROXY_TOKEN; "" if none.
std::string resolve_http_token(const std::string& token_file);

void add_proxy_routes(HttpServer& server, const Monitor& monitor);

struct ProxyHttp {
  std::unique_ptr<Monitor> monitor;
  std::unique_ptr<HttpServer> server;  // destroyed first: no request sees a dead monitor
};
// Starts the monitor and the server. Null for "off", and (with a warning) when the address
// cannot be bound: the proxy's work does not depend on it. Throws UserError for a bad
// address, and for one beyond loopback without a token.
std::unique_ptr<ProxyHttp> start_proxy_http(const std::string& bucket, const std::string& listen,
                                            const std::string& token_file);

}  // namespace brl::obs
