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
#include <string>

#include "loopback_acceptor.hpp"

namespace kiln::test {

class LoopbackProxy {
 public:
  LoopbackProxy() : acceptor_([this](int c) { acceptor_.spawn([this, c] { serve(c); }); }) {}
  ~LoopbackProxy() { stopping_ = true; }  // tunnels end; then acceptor_ joins them
  LoopbackProxy(const LoopbackProxy&) = delete;
  LoopbackProxy& operator=(const LoopbackProxy&) = delete;

  std::string url() const { return acceptor_.url(); }
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

  std::atomic<bool> stopping_{false};
  std::atomic<int> tunnels_{0}, forwards_{0};
  LoopbackAcceptor acceptor_;  // last: stops first
};

}  // namespace kiln::test
