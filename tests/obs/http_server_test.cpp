// The proxy's HTTP server: request parsing, routing (404, 405, HEAD), the /health route,
// and the token rule (loopback: open; elsewhere: Bearer or Basic token, constant-time check,
// refusal to start without one), over real sockets.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "http_client.h"
#include "obs/http_server.h"
#include "util/error.h"

using namespace brl;
using namespace brl::obs;

TEST(HttpParse, RequestLineAndHeaders) {
  auto r = parse_request("GET /status?x=1&y=2 HTTP/1.1\r\nHost: a\r\nAUTHORIZATION:  Bearer t0k \r\nX-Empty:\r\n\r\n");
  ASSERT_TRUE(r) << r.status().to_string();
  EXPECT_EQ(r->method, "GET");
  EXPECT_EQ(r->target, "/status?x=1&y=2");
  EXPECT_EQ(r->path, "/status");
  EXPECT_EQ(r->query, "x=1&y=2");
  EXPECT_EQ(r->version, "HTTP/1.1");
  EXPECT_EQ(r->header("authorization"), "Bearer t0k");  // names lower-cased, values trimmed
  EXPECT_EQ(r->header("x-empty"), "");
  EXPECT_EQ(r->headers.size(), 3u);
  // HTTP/1.0 needs no Host.
  EXPECT_TRUE(parse_request("HEAD / HTTP/1.0\r\n\r\n"));
}

TEST(HttpParse, MalformedRequestsAreRejectedWithAReason) {
  for (const char* bad : {"GET / HTTP/1.1",                          // no CRLF
                          "GET / HTTP/2.0\r\nHost: a\r\n\r\n",       // version
                          "GET /\r\nHost: a\r\n\r\n",                // two parts
                          "GET status HTTP/1.1\r\nHost: a\r\n\r\n",  // target without '/'
                          "GET / HTTP/1.1\r\n\r\n",                  // 1.1 without Host
                          "GET / HTTP/1.1\r\nHost a\r\n\r\n",        // header without ':'
                          "G(T / HTTP/1.1\r\nHost: a\r\n\r\n",       // method not a token
                          "GET / HTTP/1.1\r\nBad Name: x\r\nHost: a\r\n\r\n"}) {
    auto r = parse_request(bad);
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_NE(r.status().message().find("bad HTTP request"), std::string::npos);
    }
  }
}

TEST(HttpParse, ListenAddresses) {
  auto a = parse_listen_address("127.0.0.1:9470");
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, 9470);
  EXPECT_FALSE(a.off);
  EXPECT_EQ(parse_listen_address(":8080").host, "127.0.0.1");
  EXPECT_EQ(parse_listen_address("8080").port, 8080);
  EXPECT_EQ(parse_listen_address("localhost:0").host, "127.0.0.1");
  EXPECT_EQ(parse_listen_address("0.0.0.0:1").host, "0.0.0.0");
  EXPECT_TRUE(parse_listen_address("off").off);
  for (const char* bad : {"", "127.0.0.1:", "127.0.0.1:70000", "host.example:80", "1.2.3:80", "12ab"})
    EXPECT_THROW(parse_listen_address(bad), UserError) << bad;
  EXPECT_TRUE(is_loopback("127.0.0.1"));
  EXPECT_TRUE(is_loopback("127.1.2.3"));
  EXPECT_FALSE(is_loopback("0.0.0.0"));
  EXPECT_FALSE(is_loopback("10.0.0.1"));
}

TEST(HttpAuth, TokenComparison) {
  EXPECT_TRUE(constant_time_equal("s3cret-token", "s3cret-token"));
  EXPECT_FALSE(constant_time_equal("s3cret-token", "s3cret-tokeN"));
  EXPECT_FALSE(constant_time_equal("s3cret-token", "s3cret-token-longer"));
  EXPECT_FALSE(constant_time_equal("s3cret-token", "s3cret"));
  EXPECT_FALSE(constant_time_equal("", ""));  // an empty token never authorizes
  EXPECT_TRUE(authorization_matches("Bearer s3cret-token", "s3cret-token"));
  EXPECT_TRUE(authorization_matches("bearer   s3cret-token", "s3cret-token"));
  EXPECT_FALSE(authorization_matches("Bearer wrong", "s3cret-token"));
  EXPECT_FALSE(authorization_matches("s3cret-token", "s3cret-token"));
  // base64("ops:s3cret-token"), computed with Python's base64 module.
  EXPECT_TRUE(authorization_matches("Basic b3BzOnMzY3JldC10b2tlbg==", "s3cret-token"));
  EXPECT_FALSE(authorization_matches("Basic b3BzOnMzY3JldC10b2tlbg=", "s3cret-token"));   // bad padding
  EXPECT_FALSE(authorization_matches("Basic b3BzOnMzY3JldC10b2tlbA==", "s3cret-token"));  // ...-tokel
}

namespace {
// A server with /health (public, 503 until `ready`) and /data.
struct TestServer {
  std::atomic<bool> ready{false};
  HttpServer server;
  TestServer(const std::string& host, const std::string& token) : server({host, 0, false}, token) {
    server.route(
        "/health",
        [this](const HttpRequest&) -> HttpResponse {
          return ready ? HttpResponse{200, "text/plain", "ok\n", {}}
                       : HttpResponse{503, "text/plain", "starting\n", {}};
        },
        true);
    server.route("/data", [](const HttpRequest& r) -> HttpResponse {
      return {200, "application/json", "{\"q\":\"" + r.query + "\"}", {}};
    });
  }
};
}  // namespace

TEST(HttpServer, RoutesOnLoopbackWithoutToken) {
  TestServer t("127.0.0.1", "");
  ASSERT_TRUE(t.server.start());
  int port = t.server.port();
  ASSERT_GT(port, 0);
  EXPECT_EQ(t.server.url(), "http://127.0.0.1:" + std::to_string(port) + "/");

  auto h = test::http_get(port, "/health");
  EXPECT_EQ(h.status, 503);
  EXPECT_EQ(h.body, "starting\n");
  t.ready = true;
  h = test::http_get(port, "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_NE(h.head.find("Content-Length: 3"), std::string::npos) << h.head;
  EXPECT_NE(h.head.find("Connection: close"), std::string::npos);

  auto d = test::http_get(port, "/data?a=b");
  EXPECT_EQ(d.status, 200);
  EXPECT_EQ(d.body, "{\"q\":\"a=b\"}");
  EXPECT_NE(d.head.find("Content-Type: application/json"), std::string::npos);

  auto nf = test::http_get(port, "/nope");
  EXPECT_EQ(nf.status, 404);
  EXPECT_NE(nf.body.find("/nope"), std::string::npos);

  auto head = test::http_exchange(port, "HEAD /data HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.body, "");
  EXPECT_NE(head.head.find("Content-Length: 8"), std::string::npos) << head.head;

  EXPECT_EQ(test::http_exchange(port, "POST /data HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").status, 405);
  EXPECT_EQ(test::http_exchange(port, "hello\r\n\r\n").status, 400);
  EXPECT_EQ(test::http_exchange(port, "GET / HTTP/1.1\r\nX: " + std::string(20000, 'a') + "\r\n\r\n").status, 431);
  EXPECT_EQ(test::http_get(port, "/health").status, 200);  // still serving after the bad ones
  t.server.stop();
  EXPECT_EQ(test::http_get(port, "/health").status, 0);  // closed
}

TEST(HttpServer, BeyondLoopbackEveryRouteButHealthNeedsTheToken) {
  const std::string token = "s3cret-token";
  TestServer t("0.0.0.0", token);
  ASSERT_TRUE(t.server.requires_token());
  ASSERT_TRUE(t.server.start());
  int port = t.server.port();
  t.ready = true;
  EXPECT_EQ(test::http_get(port, "/health").status, 200);  // probes need no token

  auto missing = test::http_get(port, "/data");
  EXPECT_EQ(missing.status, 401);
  EXPECT_NE(missing.head.find("WWW-Authenticate: Bearer"), std::string::npos) << missing.head;
  EXPECT_NE(missing.head.find("WWW-Authenticate: Basic"), std::string::npos) << missing.head;
  EXPECT_EQ(missing.body.find(token), std::string::npos);
  EXPECT_EQ(test::http_get(port, "/data", "Authorization: Bearer wrong\r\n").status, 401);
  EXPECT_EQ(test::http_get(port, "/data", "Authorization: Bearer s3cret-tokeX\r\n").status, 401);
  EXPECT_EQ(test::http_get(port, "/data", "Authorization: s3cret-token\r\n").status, 401);
  // Unknown paths are 404 only for those who hold the token.
  EXPECT_EQ(test::http_get(port, "/nope").status, 404);

  auto ok = test::http_get(port, "/data", "Authorization: Bearer " + token + "\r\n");
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.body, "{\"q\":\"\"}");
  EXPECT_EQ(test::http_get(port, "/data", "Authorization: Basic b3BzOnMzY3JldC10b2tlbg==\r\n").status, 200);
}

TEST(HttpServer, RefusesToListenBeyondLoopbackWithoutAToken) {
  HttpServer s({"0.0.0.0", 0, false}, "");
  Status st = s.start();
  ASSERT_FALSE(st);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("BRL_PROXY_TOKEN"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("0.0.0.0"), std::string::npos) << st.message();
}

TEST(HttpServer, AnAddressInUseIsAnErrorNamingIt) {
  HttpServer a({"127.0.0.1", 0, false}, "");
  ASSERT_TRUE(a.start());
  HttpServer b({"127.0.0.1", a.port(), false}, "");
  Status st = b.start();
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("127.0.0.1:" + std::to_string(a.port())), std::string::npos) << st.message();
}

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
// What a connection reads until the server closes it (or the read times out).
std::string read_to_close(int fd) {
  std::string all;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) all.append(buf, static_cast<size_t>(n));
  return all;
}
}  // namespace

// Slowloris: clients that send a request head a byte at a time and never finish it, and
// clients that connect and send nothing. Handled one connection at a time with a timeout per
// recv(), the first such client held the server as long as it kept dripping.
TEST(HttpServer, SlowAndIdleClientsDoNotHoldOthers) {
  TestServer t("127.0.0.1", "");
  t.ready = true;
  ASSERT_TRUE(t.server.start());
  const int port = t.server.port();
  std::vector<int> slow, idle;
  for (int i = 0; i < 8; ++i) {
    slow.push_back(test::connect_loopback(port));
    idle.push_back(test::connect_loopback(port));
    ASSERT_GE(slow.back(), 0);
    ASSERT_GE(idle.back(), 0);
    ::send(slow.back(), "GET /health HTTP/1.1\r\nX-Slow: ", 30, MSG_NOSIGNAL);
  }
  std::atomic<bool> stop{false};
  std::thread drip([&] {
    while (!stop) {
      for (int fd : slow) ::send(fd, "a", 1, MSG_NOSIGNAL);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  for (int i = 0; i < 5; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(test::http_get(port, "/health").status, 200);
    EXPECT_LT(seconds_since(t0), 1.0) << "a normal request waited behind the slow clients";
  }
  stop = true;
  drip.join();
  for (int fd : slow) ::close(fd);
  for (int fd : idle) ::close(fd);
}

// Every connection has 5 s from its connect to the end of its head, however it drips: then
// 408 and closed.
TEST(HttpServer, AHeadNotCompleteWithinItsDeadlineGets408) {
  TestServer t("127.0.0.1", "");
  ASSERT_TRUE(t.server.start());
  int fd = test::connect_loopback(t.server.port(), 20);
  ASSERT_GE(fd, 0);
  const auto t0 = std::chrono::steady_clock::now();
  ::send(fd, "GET /health HTTP/1.1\r\nX-Slow: ", 30, MSG_NOSIGNAL);
  std::atomic<bool> stop{false};
  std::thread drip([&] {
    while (!stop && seconds_since(t0) < 15) {
      ::send(fd, "a", 1, MSG_NOSIGNAL);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  const std::string got = read_to_close(fd);
  const double took = seconds_since(t0);
  stop = true;
  drip.join();
  ::close(fd);
  EXPECT_EQ(got.rfind("HTTP/1.1 408 ", 0), 0u) << got;
  EXPECT_GT(took, 4.5);
  EXPECT_LT(took, 7.0);
}

// Past 128 waiting connections the oldest is dropped for the newcomer: a flood of idle
// connections cannot lock out a real client.
TEST(HttpServer, AFloodOfConnectionsDropsTheOldestNotTheNewest) {
  TestServer t("127.0.0.1", "");
  t.ready = true;
  ASSERT_TRUE(t.server.start());
  const int port = t.server.port();
  std::vector<int> flood;
  for (int i = 0; i < 300; ++i) {
    flood.push_back(test::connect_loopback(port, 3));
    ASSERT_GE(flood.back(), 0) << i;
  }
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(test::http_get(port, "/health").status, 200);
  EXPECT_LT(seconds_since(t0), 1.0);
  EXPECT_EQ(read_to_close(flood.front()), "");  // closed by the server, not timed out
  EXPECT_LT(seconds_since(t0), 2.0);
  for (int fd : flood) ::close(fd);
}
