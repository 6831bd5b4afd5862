// The event loops that serve kilnd's client connections: a fixed number of loops, each an
// io_context run by exactly one thread of its own. Internal to kiln_daemon.
//
// A connection is given one loop when it is accepted (next(), round robin) and lives there
// until it ends: reading a request, answering it (a hit held in memory is answered right
// there) and writing the reply all run on that loop's one thread, so a connection needs no
// strand and a request never waits for a hand-off between threads (a 4 KiB hit takes tens
// of microseconds, about as long as such a hand-off). Work that must run elsewhere (the
// store pool, builds, the server's own strand) posts its completion back to the
// connection's executor, which is its loop.
//
// Both of kilnd's listeners share one IoLoops: the kiln socket (server.cpp) and the
// torch.compile cache socket (torch_cache_listener.cpp). Config::io_threads loops in all.
//
// Lifecycle and threads: start() once, from the thread that owns the IoLoops; next() from
// any thread after start(); stop_when_idle() from any thread; join() once, not from a loop.
// Until stop_when_idle(), a loop keeps running even with nothing to do. After it, each
// loop's thread returns as soon as its loop has no handlers left to run and no I/O
// pending, so closed connections end first. Handlers still queued on a loop whose thread
// has returned (a completion posted back by the store pool after the fact) are destroyed,
// not run, when the IoLoops is destroyed: destroy it before what those handlers refer to.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

namespace kiln::daemon {

namespace asio = boost::asio;

class IoLoops {
 public:
  IoLoops() = default;
  IoLoops(const IoLoops&) = delete;
  IoLoops& operator=(const IoLoops&) = delete;
  // stop_when_idle() and join() if the caller did not.
  ~IoLoops();

  // Starts `threads` loops (at least one), their threads named "<name>-<n>". A loop that
  // just ran a handler keeps checking for ready I/O (without sleeping) for up to
  // `poll_before_sleep` before it blocks in epoll_wait: the next request of a client that
  // sends one after another is then picked up without waking a sleeping thread, which
  // costs about as much as a small hit itself. The price is that CPU time while traffic
  // flows; an idle loop sleeps. Zero: block at once.
  void start(unsigned threads, const std::string& name = "kilnd-io",
             std::chrono::microseconds poll_before_sleep = std::chrono::microseconds(0));
  // The loop for a new connection: round robin over the loops. Only after start().
  asio::io_context& next();
  std::size_t size() const { return loops_.size(); }
  // Lets every loop's thread return once it runs out of work. Posted to each loop, so
  // handlers queued before this call still run. Idempotent.
  void stop_when_idle();
  // Waits for every loop's thread (after stop_when_idle()). Idempotent.
  void join();

 private:
  struct Loop {
    asio::io_context io{1};  // one thread runs it: no locking inside Asio's scheduler
    std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard{io.get_executor()};
    std::thread thread;
  };
  std::vector<std::unique_ptr<Loop>> loops_;  // set by start(), then read-only
  std::atomic<std::size_t> next_{0};
  std::atomic<bool> stopping_{false};
};

}  // namespace kiln::daemon
