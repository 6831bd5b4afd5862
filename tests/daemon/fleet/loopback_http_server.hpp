// A plain-HTTP server on a free loopback port, for the tests of kilnd's HTTP client and
// etcd client: it plays a registry or an etcd gateway that misbehaves on purpose. A
// thread accepts connections one at a time and, for each request on one, reads the head
// and calls `answer` with the connection and the head; `answer` writes whatever it likes
// (or nothing) and returns whether the connection stays open for another request. Request
// bodies are not read (the tests' requests that have one get a reply and a close).
// Serving::concurrently gives each connection a thread of its own (a registry that hangs
// for many clients at once); the destructor then waits for every `answer` to return.
#pragma once

#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <string>

#include "loopback_acceptor.hpp"

namespace kiln::test {

class LoopbackHttpServer {
 public:
  using Answer = std::function<bool(int fd, const std::string& head)>;
  enum class Serving { one_at_a_time, concurrently };

  // Serves at most `max_connections` connections (0: any number), then accepts no more.
  explicit LoopbackHttpServer(Answer answer, int max_connections = 0, Serving serving = Serving::one_at_a_time)
      : answer_(std::move(answer)),
        acceptor_(
            [this, serving](int c) {
              connections_++;
              auto one = [this, c] {
                serve(c);
                ::close(c);
              };
              if (serving == Serving::concurrently) acceptor_.spawn(one);
              else one();
            },
            max_connections) {}
  LoopbackHttpServer(const LoopbackHttpServer&) = delete;
  LoopbackHttpServer& operator=(const LoopbackHttpServer&) = delete;

  std::string url() const { return acceptor_.url(); }
  int connections() const { return connections_; }
  int requests() const { return requests_; }

 private:
  void serve(int c) {
    std::string in;
    char buf[4096];
    for (;;) {
      while (in.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = ::read(c, buf, sizeof buf);
        if (n <= 0) return;  // the client closed it, or sent no whole head
        in.append(buf, static_cast<std::size_t>(n));
      }
      const auto end = in.find("\r\n\r\n") + 4;
      const std::string head = in.substr(0, end);
      in.erase(0, end);
      requests_++;
      if (!answer_(c, head)) return;
    }
  }

  Answer answer_;
  std::atomic<int> connections_{0}, requests_{0};
  LoopbackAcceptor acceptor_;  // last: stops first
};

// Writes `s` to the connection (a test's reply; a short write fails the client's test).
inline void say(int fd, const std::string& s) { (void)!::write(fd, s.data(), s.size()); }

// Answers nothing until the client closes the connection (true) or `release` is set (false).
inline bool hang(int fd, const std::atomic<bool>& release) {
  pollfd p{fd, POLLIN, 0};
  while (!release) {
    if (::poll(&p, 1, 20) > 0) {
      char b[512];
      if (::read(fd, b, sizeof b) <= 0) return true;
    }
  }
  return false;
}

}  // namespace kiln::test
