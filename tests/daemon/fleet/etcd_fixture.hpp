// Debian's etcd (etcd-server, /usr/bin/etcd) on loopback for the fleet's coordination
// tests: its own data folder in the test's folder, client and peer ports chosen free (never
// the system service's 2379/2380), stopped at the end. And a TCP proxy that can be frozen,
// to cut one node off from etcd (a partition) while the others reach it.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <list>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kiln/fleet/etcd_client.hpp"
#include "registry_fixture.hpp"

extern char** environ;

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
    std::vector<std::string> args{"/usr/bin/etcd",
                                  "--name", "kiln-test",
                                  "--data-dir", (dir_ / "data").string(),
                                  "--listen-client-urls", client,
                                  "--advertise-client-urls", client,
                                  "--listen-peer-urls", peer,
                                  "--initial-advertise-peer-urls", peer,
                                  "--initial-cluster", "kiln-test=" + peer,
                                  "--log-outputs", "stderr"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    const std::string log = (dir_ / "etcd.log").string();
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (::posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ) != 0) {
      throw std::runtime_error("cannot start /usr/bin/etcd (apt-get install etcd-server)");
    }
    posix_spawn_file_actions_destroy(&fa);
    // Ready when its gateway answers a range (it listens before it has a leader).
    auto c = fleet::EtcdClient::create({{url()}, std::chrono::milliseconds(500)});
    if (!c) throw std::runtime_error(c.error().to_string());
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!(*c)->range_prefix("kiln-test-ready").has_value()) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error("etcd did not answer within 30 s:\n" + slurp(dir_ / "etcd.log"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }

 private:
  std::filesystem::path dir_;
  int port_, peer_port_;
  pid_t pid_ = -1;
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
  std::thread accepter_;
  std::mutex mu_;
  std::list<std::thread> pumps_;  // guarded by mu_
};

}  // namespace kiln::test
