// A TCP proxy on 127.0.0.1 that forwards to a real HTTP server and, for a chosen fraction of
// requests, injects a fault: resets the connection, hangs (stops forwarding), truncates the
// answer (inside the body when it has one, else inside the header), answers an S3 error
// itself (500 InternalError or 503 SlowDown, the request never reaches the server), or
// forwards the request only after a delay (a slow server). stop() takes the "server" away
// mid-test (listener and live connections closed, later connects refused). Faults are rolled
// at the start of each request on a connection (first client bytes after a response), so
// keep-alive connections do not dodge them. Seeded; counts what it did, by kind.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace brl::testing {

class TcpFaultProxy {
 public:
  struct Faults {
    double reset = 0, hang = 0, truncate = 0, error = 0, slow = 0;  // probabilities per request
    int slow_min_ms = 200, slow_max_ms = 1500;                      // a slow request's delay
    int max_faults = -1;  // pass everything once this many were injected (-1: no limit)
  };
  struct Counts {
    int requests = 0, reset = 0, hang = 0, truncate = 0, error = 0, slow = 0;
    int injected() const { return reset + hang + truncate + error + slow; }
  };

  TcpFaultProxy(int upstream_port, Faults f, uint64_t seed = 1)
      : upstream_port_(upstream_port), faults_(f), rng_(seed) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listen_fd_, 64) != 0)
      throw std::runtime_error("proxy: bind/listen failed");
    socklen_t len = sizeof a;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    if (::pipe(stop_pipe_) != 0) throw std::runtime_error("proxy: pipe failed");
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~TcpFaultProxy() { stop(); }

  int port() const { return port_; }
  void set_faults(Faults f) {
    std::lock_guard lk(mu_);
    faults_ = f;
  }
  Counts counts() const {
    std::lock_guard lk(mu_);
    return counts_;
  }
  int injected() const { return counts().injected(); }
  int requests() const { return counts().requests; }

  void stop() {
    if (stopped_.exchange(true)) return;
    (void)!::write(stop_pipe_[1], "x", 1);
    acceptor_.join();
    std::vector<std::thread> conns;
    {
      std::lock_guard lk(mu_);
      conns.swap(conns_);
    }
    for (auto& t : conns) t.join();
    ::close(listen_fd_);
    ::close(stop_pipe_[0]);
    ::close(stop_pipe_[1]);
  }

 private:
  enum class Action { kPass, kReset, kHang, kTruncate, kError, kSlow };

  Action roll(std::mt19937_64::result_type* draw, int* slow_ms) {
    std::lock_guard lk(mu_);
    ++counts_.requests;
    *draw = rng_();
    *slow_ms =
        faults_.slow_min_ms + static_cast<int>(*draw % (std::max(0, faults_.slow_max_ms - faults_.slow_min_ms) + 1));
    double u = std::uniform_real_distribution<double>(0, 1)(rng_);
    Action a = Action::kPass;
    if ((u -= faults_.reset) < 0) a = Action::kReset;
    else if ((u -= faults_.hang) < 0) a = Action::kHang;
    else if ((u -= faults_.truncate) < 0) a = Action::kTruncate;
    else if ((u -= faults_.error) < 0) a = Action::kError;
    else if ((u -= faults_.slow) < 0) a = Action::kSlow;
    if (a == Action::kPass || (faults_.max_faults >= 0 && rolled_ >= faults_.max_faults)) return Action::kPass;
    ++rolled_;
    return a;
  }
  void count(int Counts::*kind) {
    std::lock_guard lk(mu_);
    ++(counts_.*kind);
  }

  // Where to cut an answer whose header is complete in `head` (`header_end` bytes, up to the
  // blank line): inside the body when Content-Length says there is one (never for HEAD),
  // else inside the header. `draw` is the request's random number.
  static size_t cut_point(const std::string& head, size_t header_end, uint64_t draw, bool head_request) {
    std::string lower(head.substr(0, header_end));
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    size_t p = lower.find("\r\ncontent-length:");
    uint64_t body = p == std::string::npos ? 0 : std::strtoull(lower.c_str() + p + 17, nullptr, 10);
    if (body > 0 && !head_request) return header_end + draw % body;  // 0 .. body-1 bytes of the body
    return 1 + draw % (header_end - 1);
  }

  // Answers the request with an S3 error itself, then closes once the client is done sending.
  static void answer_error(int client, bool throttle) {
    const std::string code = throttle ? "SlowDown" : "InternalError";
    const std::string body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>" + code +
                             "</Code><Message>injected by TcpFaultProxy</Message></Error>";
    const std::string resp = std::string(throttle ? "HTTP/1.1 503 Slow Down" : "HTTP/1.1 500 Internal Server Error") +
                             "\r\nContent-Type: application/xml\r\nContent-Length: " + std::to_string(body.size()) +
                             "\r\nConnection: close\r\n\r\n" + body;
    write_all(client, resp.data(), resp.size());
    ::shutdown(client, SHUT_WR);
    // Drain what the client still sends (an upload's body) so that closing does not turn
    // the answer into a reset before the client has read it.
    char buf[1 << 14];
    for (auto t0 = std::chrono::steady_clock::now(); std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2);) {
      pollfd p{client, POLLIN, 0};
      if (::poll(&p, 1, 200) > 0 && ::read(client, buf, sizeof buf) <= 0) break;
    }
    ::close(client);
  }

  static void hard_close(int fd) {  // RST instead of FIN
    linger l{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    ::close(fd);
  }

  void accept_loop() {
    for (;;) {
      pollfd p[2] = {{listen_fd_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
      if (::poll(p, 2, -1) < 0) continue;
      if (p[1].revents) return;
      int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      std::lock_guard lk(mu_);
      conns_.emplace_back([this, c] { serve(c); });
    }
  }

  void serve(int client) {
    int up = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(upstream_port_));
    if (::connect(up, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      hard_close(client);
      ::close(up);
      return;
    }
    bool new_request = true;
    Action action = Action::kPass;
    std::mt19937_64::result_type draw = 0;
    int slow_ms = 0;
    bool head_request = false;
    std::string held;                // a truncated answer's bytes held back until its header is complete
    size_t cut = std::string::npos;  // ... then the answer's length after the cut
    size_t answered = 0;             // bytes of the current answer forwarded
    std::vector<char> buf(1 << 16);
    for (;;) {
      pollfd p[3] = {{client, POLLIN, 0}, {up, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
      if (::poll(p, 3, -1) < 0) continue;
      if (p[2].revents) break;
      if (p[0].revents) {
        ssize_t n = ::read(client, buf.data(), buf.size());
        if (n <= 0) break;
        if (new_request) {
          new_request = false;
          action = roll(&draw, &slow_ms);
          head_request = n >= 5 && std::memcmp(buf.data(), "HEAD ", 5) == 0;
          held.clear();
          cut = std::string::npos;
          answered = 0;
          if (action == Action::kReset) {
            count(&Counts::reset);
            break;
          }
          if (action == Action::kHang) count(&Counts::hang);
          if (action == Action::kError) {
            count(&Counts::error);
            ::close(up);
            return answer_error(client, draw % 2 == 0);
          }
          if (action == Action::kSlow) {
            count(&Counts::slow);
            std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
          }
        }
        if (action == Action::kHang) continue;  // swallow the request, answer nothing
        if (!write_all(up, buf.data(), static_cast<size_t>(n))) break;
      }
      if (p[1].revents) {
        ssize_t n = ::read(up, buf.data(), buf.size());
        if (n <= 0) break;
        if (action == Action::kTruncate) {
          if (cut == std::string::npos) {
            held.append(buf.data(), static_cast<size_t>(n));
            size_t end = held.find("\r\n\r\n");
            if (end == std::string::npos && held.size() < 65536) continue;  // the header is not complete yet
            cut = end == std::string::npos ? held.size() / 2 : cut_point(held, end + 4, draw, head_request);
            size_t k = std::min(cut, held.size());
            if (!write_all(client, held.data(), k)) break;
            answered = k;
          } else {
            size_t k = std::min(cut - answered, static_cast<size_t>(n));
            if (!write_all(client, buf.data(), k)) break;
            answered += k;
          }
          if (answered >= cut) {
            count(&Counts::truncate);
            break;  // cut the answer short
          }
          continue;  // a body still under way: no new request yet
        }
        if (!write_all(client, buf.data(), static_cast<size_t>(n))) break;
        new_request = true;
      }
    }
    hard_close(client);
    ::close(up);
  }

  static bool write_all(int fd, const char* p, size_t n) {
    while (n > 0) {
      ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
      if (w <= 0) return false;
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }

  int upstream_port_;
  Faults faults_;
  std::mt19937_64 rng_;
  int listen_fd_ = -1, port_ = 0;
  int stop_pipe_[2] = {-1, -1};
  std::atomic<bool> stopped_{false};
  Counts counts_;
  int rolled_ = 0;  // faults drawn (for max_faults)
  mutable std::mutex mu_;
  std::thread acceptor_;
  std::vector<std::thread> conns_;
};

}  // namespace brl::testing
