// A TCP proxy on 127.0.0.1 that forwards to a real server and, for a chosen fraction of
// requests, resets the connection, hangs (stops forwarding), or truncates the answer; stop()
// takes the "server" away mid-test (listener and live connections closed, later connects
// refused). Faults are rolled at the start of each request on a connection (first client
// bytes after a response), so keep-alive connections do not dodge them. Seeded.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
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
    double reset = 0, hang = 0, truncate = 0;  // probabilities per request
  };

  TcpFaultProxy(int upstream_port, Faults f, uint64_t seed = 1) : upstream_port_(upstream_port), faults_(f), rng_(seed) {
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
  int injected() const { return injected_.load(); }
  int requests() const { return requests_.load(); }

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
  enum class Action { kPass, kReset, kHang, kTruncate };

  Action roll(size_t* truncate_after) {
    std::lock_guard lk(mu_);
    *truncate_after = 1 + std::uniform_int_distribution<size_t>(0, 300)(rng_);
    double u = std::uniform_real_distribution<double>(0, 1)(rng_);
    if ((u -= faults_.reset) < 0) return Action::kReset;
    if ((u -= faults_.hang) < 0) return Action::kHang;
    if ((u -= faults_.truncate) < 0) return Action::kTruncate;
    return Action::kPass;
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
    size_t truncate_left = 0;
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
          ++requests_;
          action = roll(&truncate_left);
          if (action != Action::kPass) ++injected_;
          if (action == Action::kReset) break;
        }
        if (action == Action::kHang) continue;  // swallow the request, answer nothing
        if (!write_all(up, buf.data(), static_cast<size_t>(n))) break;
      }
      if (p[1].revents) {
        ssize_t n = ::read(up, buf.data(), buf.size());
        if (n <= 0) break;
        if (action == Action::kTruncate) {
          size_t k = std::min(truncate_left, static_cast<size_t>(n));
          write_all(client, buf.data(), k);
          break;  // cut the answer short
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
  std::atomic<int> injected_{0}, requests_{0};
  std::mutex mu_;
  std::thread acceptor_;
  std::vector<std::thread> conns_;
};

}  // namespace brl::testing
