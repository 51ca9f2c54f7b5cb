#include "obs/proxy_http.h"

#include <cstdlib>
#include <fstream>

#include "obs/dashboard.h"
#include "obs/prometheus.h"
#include "protocol/bucket.h"
#include "util/error.h"
#include "util/log.h"

namespace brl::obs {

std::string resolve_http_token(const std::string& token_file) {
  std::string token;
  if (!token_file.empty()) {
    std::ifstream f(token_file);
    if (!f) throw UserError("--http-token-file " + token_file + ": cannot read it");
    std::getline(f, token);
    size_t a = token.find_first_not_of(" \t\r"), b = token.find_last_not_of(" \t\r");
    token = a == std::string::npos ? "" : token.substr(a, b - a + 1);
    if (token.empty()) throw UserError("--http-token-file " + token_file + ": the first line is empty");
  } else if (const char* e = std::getenv(kTokenEnv)) {
    token = e;
  }
  return token;
}

void add_proxy_routes(HttpServer& server, const Monitor& monitor) {
  server.route(
      "/health",
      [&monitor](const HttpRequest&) -> HttpResponse {
        if (monitor.ready()) return {200, "text/plain; charset=utf-8", "ok\n", {}};
        return {503, "text/plain; charset=utf-8", "starting: the proxy has not read the run yet\n", {}};
      },
      /*is_public=*/true);
  server.route("/status", [&monitor](const HttpRequest&) -> HttpResponse {
    return {200, "application/json", monitor.status().dump() + "\n", {}};
  });
  server.route("/metrics", [&monitor](const HttpRequest&) -> HttpResponse {
    return {200, kPrometheusContentType, monitor.metrics(), {}};
  });
  server.route("/", [](const HttpRequest&) -> HttpResponse {
    return {200, "text/html; charset=utf-8", std::string(dashboard_html()), {}};
  });
}

std::unique_ptr<ProxyHttp> start_proxy_http(const std::string& bucket, const std::string& listen,
                                            const std::string& token_file) {
  ListenAddress addr = parse_listen_address(listen);
  if (addr.off) return nullptr;
  auto h = std::make_unique<ProxyHttp>();
  h->monitor = std::make_unique<Monitor>(protocol::open_bucket(bucket));
  h->server = std::make_unique<HttpServer>(addr, resolve_http_token(token_file));
  add_proxy_routes(*h->server, *h->monitor);
  if (Status st = h->server->start(); !st) {
    if (st.code() == StatusCode::kInvalidArgument) throw UserError("proxy: " + st.message());
    LOG_WARN("proxy: {}; going on without /status, /metrics and the dashboard (choose another with --http ADDR:PORT)",
             st.message());
    return nullptr;
  }
  h->monitor->start();
  LOG_INFO("proxy: dashboard at {} (/status, /metrics, /health){}", h->server->url(),
           h->server->requires_token() ? "; token required" : "");
  return h;
}

}  // namespace brl::obs
