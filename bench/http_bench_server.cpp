// A server for bench/http_compare.py: the proxy's HTTP server (obs::HttpServer) or, built
// with BRL_HTTPLIB, Debian's cpp-httplib, with the same three routes: /health (public),
// /status (a small JSON) and /metrics (a ~20 KB body, the size of a proxy's /metrics).
// Prints "port N" once listening on 127.0.0.1; stops on SIGTERM/SIGINT or when stdin closes.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#ifdef BRL_HTTPLIB
#include <httplib.h>
#else
#include "obs/http_server.h"
#endif

namespace {
std::string metrics_body() {
  std::string s;
  for (int i = 0; s.size() < 20000; ++i) s += "bucketrl_bench_series{worker=\"w" + std::to_string(i) + "\"} 1\n";
  return s;
}
const char kStatus[] = "{\"newest_version\": 42, \"run_health\": {\"state\": \"ok\"}}\n";
}  // namespace

int main() {
  std::signal(SIGPIPE, SIG_IGN);
  const std::string metrics = metrics_body();
#ifdef BRL_HTTPLIB
  httplib::Server s;
  s.Get("/health", [](const httplib::Request&, httplib::Response& r) { r.set_content("ok\n", "text/plain"); });
  s.Get("/status", [](const httplib::Request&, httplib::Response& r) { r.set_content(kStatus, "application/json"); });
  s.Get("/metrics", [&](const httplib::Request&, httplib::Response& r) { r.set_content(metrics, "text/plain"); });
  int port = s.bind_to_any_port("127.0.0.1");
  if (port < 0) return 1;
  std::thread t([&] { s.listen_after_bind(); });
  std::printf("port %d\n", port);
  std::fflush(stdout);
  char c;
  while (::read(0, &c, 1) > 0) {
  }
  s.stop();
  t.join();
#else
  using namespace brl::obs;
  HttpServer s(parse_listen_address("127.0.0.1:0"), "");
  s.route(
      "/health",
      [](const HttpRequest&) {
        return HttpResponse{200, "text/plain", "ok\n", {}};
      },
      true);
  s.route("/status", [](const HttpRequest&) { return HttpResponse{200, "application/json", kStatus, {}}; });
  s.route("/metrics", [&](const HttpRequest&) { return HttpResponse{200, "text/plain", metrics, {}}; });
  if (!s.start()) return 1;
  std::printf("port %d\n", s.port());
  std::fflush(stdout);
  char c;
  while (::read(0, &c, 1) > 0) {
  }
  s.stop();
#endif
  return 0;
}
