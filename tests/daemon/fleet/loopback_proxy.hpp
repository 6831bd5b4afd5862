// A tiny HTTP proxy on a free loopback port for the tests of HTTPS_PROXY / HTTP_PROXY: a
// CONNECT request opens a tunnel to its host:port ("200 Connection established"); a request
// in absolute form (GET http://host:port/...) is passed to that host as is, with the rest
// of its connection. Each connection gets a thread, and bytes are copied both ways until
// either side closes. It counts what it carried, so a test can tell that the client went
// through it, or did not.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>

#include <doctest/doctest.h>

namespace kiln::test {

// A listening TCP socket on 127.0.0.1 and a port the kernel chose; {fd, port}.
inline std::pair<int, int> listen_on_loopback() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof addr;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), size) == 0 && ::listen(fd, 16) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &size) == 0;
  REQUIRE_MESSAGE(ok, "cannot listen on a loopback port");
  return {fd, ntohs(addr.sin_port)};
}

class LoopbackProxy {
 public:
  LoopbackProxy() {
    std::tie(fd_, port_) = listen_on_loopback();
    acceptor_ = std::thread([this] {
      for (;;) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;  // the destructor shut the listener down
        std::lock_guard lock(mu_);
        threads_.emplace_back([this, c] { serve(c); });
      }
    });
  }
  ~LoopbackProxy() {
    stopping_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    acceptor_.join();
    std::lock_guard lock(mu_);
    for (auto& t : threads_) t.join();
  }
  LoopbackProxy(const LoopbackProxy&) = delete;
  LoopbackProxy& operator=(const LoopbackProxy&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int tunnels() const { return tunnels_; }    // CONNECTs answered 200
  int forwards() const { return forwards_; }  // connections of absolute-form requests

 private:
  // Only loopback hosts given as 127.0.0.1:port: all the tests need.
  static int connect_to(const std::string& authority) {
    const auto colon = authority.rfind(':');
    if (colon == std::string::npos || authority.substr(0, colon) != "127.0.0.1") return -1;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(std::stoi(authority.substr(colon + 1))));
    const int u = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(u, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(u);
      return -1;
    }
    return u;
  }

  void serve(int c) {
    std::string head;
    char buf[16384];
    while (head.find("\r\n\r\n") == std::string::npos) {
      const ssize_t n = ::read(c, buf, sizeof buf);
      if (n <= 0) {
        ::close(c);
        return;
      }
      head.append(buf, static_cast<std::size_t>(n));
    }
    const std::string line = head.substr(0, head.find("\r\n"));
    const auto sp1 = line.find(' '), sp2 = line.rfind(' ');
    const std::string method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    int u = -1;
    if (method == "CONNECT") {
      u = connect_to(target);
      if (u >= 0) {
        tunnels_++;
        const std::string ok = "HTTP/1.1 200 Connection established\r\n\r\n";
        (void)!::write(c, ok.data(), ok.size());
        head.erase(0, head.find("\r\n\r\n") + 4);  // anything after the head is the tunnel's
      }
    } else if (target.starts_with("http://")) {
      u = connect_to(target.substr(7, target.find('/', 7) - 7));
      if (u >= 0) forwards_++;
    }
    if (u < 0) {
      const std::string bad = "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
      (void)!::write(c, bad.data(), bad.size());
      ::close(c);
      return;
    }
    if (!head.empty()) (void)!::write(u, head.data(), head.size());
    pollfd fds[2] = {{c, POLLIN, 0}, {u, POLLIN, 0}};
    while (!stopping_) {
      if (::poll(fds, 2, 100) < 0) break;
      bool closed = false;
      for (int i = 0; i < 2 && !closed; ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
        if (n <= 0 || ::write(fds[1 - i].fd, buf, static_cast<std::size_t>(n)) != n) closed = true;
      }
      if (closed) break;
    }
    ::close(u);
    ::close(c);
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> tunnels_{0}, forwards_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::list<std::thread> threads_;  // guarded by mu_
};

}  // namespace kiln::test
