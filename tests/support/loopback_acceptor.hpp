// A listening TCP socket on 127.0.0.1, on a port the kernel chose, and the thread that
// accepts on it: the one shape of the tests' loopback servers (a registry or etcd gateway
// that misbehaves on purpose, a token issuer, a proxy). Each connection is handed to
// `on_accept` on the accepting thread, which serves it there (one at a time) or gives it a
// thread of its own with spawn(). Destroying it shuts the listener down (the accept loop
// ends), then joins the accepting thread and every spawned one: handlers must end by
// themselves once their peers go. Make it its owner's last member, so it stops first,
// while what the handlers use still exists.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include <doctest/doctest.h>

namespace kiln::test {

class LoopbackAcceptor {
 public:
  using OnAccept = std::function<void(int fd)>;

  // Accepts at most `max_connections` connections (0: any number), then no more.
  explicit LoopbackAcceptor(OnAccept on_accept, int max_connections = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof a;
    const bool ok = ::bind(fd_, reinterpret_cast<sockaddr*>(&a), size) == 0 && ::listen(fd_, 16) == 0 &&
                    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &size) == 0;
    REQUIRE_MESSAGE(ok, "cannot listen on a loopback port");
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, on_accept = std::move(on_accept), max_connections] {
      for (int n = 0; max_connections == 0 || n < max_connections; ++n) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;  // the destructor shut the listener down
        on_accept(c);
      }
    });
  }
  ~LoopbackAcceptor() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
    std::lock_guard lock(mu_);
    for (auto& t : spawned_) t.join();
  }
  LoopbackAcceptor(const LoopbackAcceptor&) = delete;
  LoopbackAcceptor& operator=(const LoopbackAcceptor&) = delete;

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Runs `work` (one connection's) on a thread of its own, joined by the destructor.
  void spawn(std::function<void()> work) {
    std::lock_guard lock(mu_);
    spawned_.emplace_back(std::move(work));
  }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::mutex mu_;
  std::list<std::thread> spawned_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace kiln::test
