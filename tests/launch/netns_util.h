// Several hosts on one machine, for tests: each "host" is a network namespace joined to the
// test's own namespace by a veth pair on a /30 of its own (10.S.k.0/30, S picked so that no
// address or route of this machine is in 10.S/16). A namespace has no other route, so hosts
// cannot reach one another, only the addresses on the test's side of their own link; there a
// TcpRelay forwards to the S3 server (which listens on loopback only). A link can be cut
// (`ip link set down` on the test's side: packets vanish, as in a real partition) and restored.
// Needs root and iproute2 (`ip netns`); netns_unavailable() says why not otherwise.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <atomic>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "async_util.h"

namespace brl::test {

// Runs a shell command line; its exit status (0 = success).
inline int sh(const std::string& cmd) {
  int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}
inline std::string sh_out(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char b[4096];
    size_t n;
    while ((n = std::fread(b, 1, sizeof b, p)) > 0) out.append(b, n);
    pclose(p);
  }
  return out;
}

// Why namespaces cannot be made here ("" when they can).
inline std::string netns_unavailable() {
  if (geteuid() != 0) return "not root: network namespaces and veth pairs need root (CAP_NET_ADMIN, CAP_SYS_ADMIN)";
  if (sh("ip -V >/dev/null 2>&1") != 0) return "`ip` (iproute2) is missing: apt-get install iproute2";
  std::string probe = "brlprobe" + std::to_string(getpid());
  if (sh("ip netns add " + probe + " 2>/dev/null") != 0) return "`ip netns add` fails here (no CAP_SYS_ADMIN?)";
  sh("ip netns del " + probe);
  return "";
}

// Whether a TCP connection to addr:port opens within timeout_ms, tried from inside netns
// ("" = the test's own namespace). In a child process, so the test's threads stay where they are.
inline bool reachable(const std::string& netns, const std::string& addr, int port, int timeout_ms = 1500) {
  pid_t pid = fork();
  if (pid == 0) {
    if (!netns.empty()) {
      int fd = open(("/var/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) _exit(2);
    }
    int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (s < 0 || inet_pton(AF_INET, addr.c_str(), &a.sin_addr) != 1) _exit(2);
    if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) _exit(0);
    if (errno != EINPROGRESS) _exit(1);
    pollfd p{s, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof err;
    if (poll(&p, 1, timeout_ms) == 1 && getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) _exit(0);
    _exit(1);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

// Whether process pid lives in network namespace netns (same namespace inode).
inline bool in_netns(pid_t pid, const std::string& netns) {
  struct stat a {
  }, b{};
  return stat(("/proc/" + std::to_string(pid) + "/ns/net").c_str(), &a) == 0 &&
         stat(("/var/run/netns/" + netns).c_str(), &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

struct Host {
  std::string name, netns;
  std::string veth_root, veth_ns;  // the pair's ends: in the test's namespace, in the host's
  std::string root_addr, ns_addr;  // 10.S.k.1 and 10.S.k.2
};

// The hosts, made in the constructor and removed (with their veths) in the destructor.
class Network {
 public:
  explicit Network(const std::vector<std::string>& names) {
    sweep_dead();
    tag_ = "brlnet" + std::to_string(getpid());
    int s = pick_subnet();
    try {
      for (size_t k = 0; k < names.size(); ++k) {
        Host h;
        h.name = names[k];
        h.netns = tag_ + "-" + names[k];
        h.veth_root = "brl" + std::to_string(getpid()) + "r" + std::to_string(k);  // <= 15 characters
        h.veth_ns = "brl" + std::to_string(getpid()) + "n" + std::to_string(k);
        std::string net = "10." + std::to_string(s) + "." + std::to_string(k) + ".";
        h.root_addr = net + "1";
        h.ns_addr = net + "2";
        hosts_.push_back(h);
        must("ip netns add " + h.netns);
        must("ip link add " + h.veth_root + " type veth peer name " + h.veth_ns + " netns " + h.netns);
        must("ip addr add " + h.root_addr + "/30 dev " + h.veth_root);
        must("ip link set " + h.veth_root + " up");
        must("ip -n " + h.netns + " addr add " + h.ns_addr + "/30 dev " + h.veth_ns);
        must("ip -n " + h.netns + " link set " + h.veth_ns + " up");
        must("ip -n " + h.netns + " link set lo up");
      }
    } catch (...) {
      remove();
      throw;
    }
  }
  ~Network() { remove(); }
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;

  const Host& host(const std::string& name) const {
    for (auto& h : hosts_)
      if (h.name == name) return h;
    throw std::invalid_argument("no host " + name);
  }
  const std::vector<Host>& hosts() const { return hosts_; }
  // The cable pulled on the test's side: the host's packets are dropped, its connections hang.
  void cut(const std::string& name) { must("ip link set " + host(name).veth_root + " down"); }
  // Plugged back; the kernel re-adds the link's route with the address.
  void restore(const std::string& name) { must("ip link set " + host(name).veth_root + " up"); }

 private:
  static void must(const std::string& cmd) {
    if (sh(cmd) != 0) throw std::runtime_error("failed: " + cmd);
  }
  // A second octet S in 200..249 with nothing of this machine in 10.S/16, starting from one
  // derived from the pid so that tests running at once pick different ones.
  static int pick_subnet() {
    std::string used = " " + sh_out("ip -4 -o addr show; ip -4 route show table all");
    for (int i = 0; i < 50; ++i) {
      int s = 200 + (static_cast<int>(getpid()) + i) % 50;
      std::string p = "10." + std::to_string(s) + ".";
      bool taken = false;
      for (size_t at = used.find(p); at != std::string::npos && !taken; at = used.find(p, at + 1))
        taken = !std::isdigit(static_cast<unsigned char>(used[at - 1]));
      if (!taken) return s;
    }
    throw std::runtime_error("no free 10.S/16 (S in 200..249) for the test's links");
  }
  // Namespaces and links left by an earlier test process killed before its destructor ran
  // (a namespace may outlive its deletion while its sockets time out, and its link with it).
  static void sweep_dead() {
    auto dead = [](const std::string& pid) {
      return !pid.empty() && pid.find_first_not_of("0123456789") == std::string::npos &&
             !std::filesystem::exists("/proc/" + pid);
    };
    std::error_code ec;
    for (auto& e : std::filesystem::directory_iterator("/var/run/netns", ec)) {
      std::string n = e.path().filename().string();
      if (n.rfind("brlnet", 0) == 0 && dead(n.substr(6, n.find('-') - 6))) sh("ip netns del " + n + " 2>/dev/null");
    }
    std::string links = sh_out("ip -o link show");  // "7: brl123r0@if6: <...> ..."
    for (size_t at = links.find(": brl"); at != std::string::npos; at = links.find(": brl", at + 1)) {
      std::string name = links.substr(at + 2, links.find_first_of("@:", at + 2) - at - 2);
      if (dead(name.substr(3, name.find('r', 3) - 3))) sh("ip link del " + name + " 2>/dev/null");
    }
  }
  void remove() {
    // Deleting a namespace deletes the veth end in it, and with it the other end.
    for (auto& h : hosts_) sh("ip netns del " + h.netns + " 2>/dev/null; ip link del " + h.veth_root + " 2>/dev/null");
    hosts_.clear();
  }
  std::string tag_;
  std::vector<Host> hosts_;
};

// A TCP forwarder in the test's namespace: one listener per given address (a free port each),
// every connection relayed byte for byte to target:port (the S3 server on loopback). Bytes
// pass untouched, so SigV4 signatures (which cover the Host header) still verify.
class TcpRelay {
 public:
  TcpRelay(const std::vector<std::string>& addrs, const std::string& target, int target_port) {
    target_.sin_family = AF_INET;
    target_.sin_port = htons(static_cast<uint16_t>(target_port));
    if (inet_pton(AF_INET, target.c_str(), &target_.sin_addr) != 1)
      throw std::invalid_argument("relay target " + target);
    for (auto& a : addrs) {
      int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      int one = 1;
      setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      sockaddr_in sa{};
      sa.sin_family = AF_INET;
      inet_pton(AF_INET, a.c_str(), &sa.sin_addr);
      socklen_t len = sizeof sa;
      if (bind(s, reinterpret_cast<sockaddr*>(&sa), len) != 0 || listen(s, 64) != 0 ||
          getsockname(s, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
        close(s);
        close_all();
        throw std::runtime_error("relay: cannot listen on " + a);
      }
      listeners_.push_back(s);
      ports_.push_back(ntohs(sa.sin_port));
    }
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~TcpRelay() {
    stop_ = true;
    acceptor_.join();
    {
      std::lock_guard<std::mutex> l(mu_);
      for (int fd : open_) shutdown(fd, SHUT_RDWR);  // wakes pumps blocked on a cut link
    }
    for (auto& t : pumps_) t.join();
    close_all();
  }
  TcpRelay(const TcpRelay&) = delete;
  TcpRelay& operator=(const TcpRelay&) = delete;
  int port(size_t i) const { return ports_.at(i); }

 private:
  void accept_loop() {
    std::vector<pollfd> ps;
    for (int s : listeners_) ps.push_back({s, POLLIN, 0});
    while (!stop_) {
      if (poll(ps.data(), ps.size(), 100) <= 0) continue;
      for (auto& p : ps) {
        if (!(p.revents & POLLIN)) continue;
        int c = accept4(p.fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) continue;
        int u = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (u < 0 || connect(u, reinterpret_cast<const sockaddr*>(&target_), sizeof target_) != 0) {
          close(c);
          if (u >= 0) close(u);
          continue;
        }
        std::lock_guard<std::mutex> l(mu_);
        open_.insert(c);
        open_.insert(u);
        pumps_.emplace_back([this, c, u] { pump(c, u); });
      }
    }
  }
  // Both directions until either side closes or fails (HTTP clients do not half-close).
  void pump(int a, int b) {
    pollfd ps[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    char buf[65536];
    bool open = true;
    while (open && !stop_) {
      if (poll(ps, 2, 200) <= 0) continue;
      for (int i = 0; i < 2 && open; ++i) {
        if (!ps[i].revents) continue;
        ssize_t n = read(ps[i].fd, buf, sizeof buf);
        open = n > 0;
        for (ssize_t off = 0; open && off < n;) {
          ssize_t w = send(ps[1 - i].fd, buf + off, static_cast<size_t>(n - off), MSG_NOSIGNAL);
          open = w > 0;
          off += w > 0 ? w : 0;
        }
      }
    }
    std::lock_guard<std::mutex> l(mu_);
    for (int fd : {a, b}) {
      open_.erase(fd);
      close(fd);
    }
  }
  void close_all() {
    for (int s : listeners_) close(s);
    listeners_.clear();
  }
  sockaddr_in target_{};
  std::vector<int> listeners_, ports_;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::set<int> open_;              // relayed sockets still open (guarded by mu_)
  std::vector<std::thread> pumps_;  // one per connection, joined at the end
};

}  // namespace brl::test
