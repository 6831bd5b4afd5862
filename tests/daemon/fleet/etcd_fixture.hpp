// Debian's etcd (etcd-server, /usr/bin/etcd) on loopback for the fleet's coordination
// tests: its own data folder in the test's folder, client and peer ports chosen free (never
// the system service's 2379/2380), stopped at the end. And a TCP proxy that can be frozen,
// to cut one node off from etcd (a partition) while the others reach it.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <list>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kiln/fleet/etcd_client.hpp"
#include "server_process.hpp"

namespace kiln::test {

class Etcd {
 public:
  explicit Etcd(std::filesystem::path dir) : dir_(std::move(dir)), port_(free_port()), peer_port_(free_port()) {
    std::filesystem::create_directories(dir_);
    start();
  }
  ~Etcd() { stop(); }

  void start() {
    const std::string client = "http://127.0.0.1:" + std::to_string(port_);
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
    // Ready when its gateway answers a range (it listens before it has a leader).
    auto c = fleet::EtcdClient::create({{url()}, std::chrono::milliseconds(500)});
    if (!c) throw std::runtime_error(c.error().to_string());
    process_.start({"/usr/bin/etcd",
                    "--name", "kiln-test",
                    "--data-dir", (dir_ / "data").string(),
                    "--listen-client-urls", client,
                    "--advertise-client-urls", client,
                    "--listen-peer-urls", peer,
                    "--initial-advertise-peer-urls", peer,
                    "--initial-cluster", "kiln-test=" + peer,
                    "--log-outputs", "stderr"},
                   dir_ / "etcd.log", [&] { return (*c)->range_prefix("kiln-test-ready").has_value(); },
                   std::chrono::seconds(30), "etcd", "cannot start /usr/bin/etcd (apt-get install etcd-server)");
  }
  void stop() { process_.stop(SIGKILL); }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }

 private:
  std::filesystem::path dir_;
  int port_, peer_port_;
  ServerProcess process_;
};

// Forwards loopback TCP connections to `target_port`. freeze() stops moving bytes, both
// ways, on every connection, new ones included (they are accepted and left hanging): to
// the client it looks like a network that drops everything. thaw() resumes.
class TcpProxy {
 public:
  explicit TcpProxy(int target_port) : target_(target_port) {
    listen_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listen_, 64) != 0) {
      throw std::runtime_error("proxy: cannot listen");
    }
    socklen_t len = sizeof a;
    ::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    accepter_ = std::thread([this] { accept_loop(); });
  }
  ~TcpProxy() {
    stop_ = true;
    accepter_.join();
    std::lock_guard lock(mu_);
    for (auto& t : pumps_) t.join();
    ::close(listen_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void freeze() { frozen_ = true; }
  void thaw() { frozen_ = false; }
  // Holds back, for `d`, what a client sends when it contains `needle` (set before any
  // traffic): one slow request, the others on their own connections unaffected.
  void delay_requests_containing(std::string needle, std::chrono::milliseconds d) {
    delay_needle_ = std::move(needle);
    delay_ = d;
  }

 private:
  void accept_loop() {
    while (!stop_) {
      pollfd p{listen_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      int c = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(static_cast<std::uint16_t>(target_));
      if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(c);
        ::close(s);
        continue;
      }
      std::lock_guard lock(mu_);
      pumps_.emplace_back([this, c, s] { pump(c, s); });
    }
  }
  void pump(int a, int b) {
    char buf[16384];
    bool open = true;
    while (open && !stop_) {
      if (frozen_) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
      pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
      if (::poll(p, 2, 50) <= 0) continue;
      for (int i = 0; i < 2 && open; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t n = ::read(p[i].fd, buf, sizeof buf);
        if (n <= 0) {
          open = false;
          break;
        }
        const int to = i == 0 ? b : a;
        const std::string_view chunk(buf, static_cast<std::size_t>(n));
        if (i == 0 && !delay_needle_.empty() && chunk.find(delay_needle_) != std::string_view::npos) {
          std::this_thread::sleep_for(delay_);
        }
        for (ssize_t off = 0; off < n;) {
          ssize_t w = ::write(to, buf + off, static_cast<std::size_t>(n - off));
          if (w <= 0) {
            open = false;
            break;
          }
          off += w;
        }
      }
    }
    ::close(a);
    ::close(b);
  }

  int target_;
  int listen_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false}, frozen_{false};
  std::string delay_needle_;
  std::chrono::milliseconds delay_{0};
  std::thread accepter_;
  std::mutex mu_;
  std::list<std::thread> pumps_;  // guarded by mu_
};

}  // namespace kiln::test
