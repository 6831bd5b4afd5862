// The event loops that serve client connections (see io_loops.hpp).
#include "io_loops.hpp"

#include <pthread.h>

#include <algorithm>

#include <boost/asio/post.hpp>

namespace kiln::daemon {

IoLoops::~IoLoops() {
  stop_when_idle();
  join();
}

namespace {

// io.run(), but after each handler the loop keeps polling (epoll_wait with no timeout,
// through io.poll()) for up to `window` before it blocks.
void run_polling(asio::io_context& io, std::chrono::microseconds window) {
  using Clock = std::chrono::steady_clock;
  while (!io.stopped()) {
    const auto until = Clock::now() + window;
    std::size_t ran = 0;
    while (ran == 0 && !io.stopped() && Clock::now() < until) ran = io.poll();
    if (ran == 0 && !io.stopped()) io.run_one();  // returns 0 once out of work: stopped
  }
}

}  // namespace

void IoLoops::start(unsigned threads, const std::string& name, std::chrono::microseconds poll_before_sleep) {
  for (unsigned i = 0; i < std::max(1u, threads); ++i) {
    auto loop = std::make_unique<Loop>();
    Loop* raw = loop.get();
    // Linux limits a thread's name to 15 bytes.
    std::string thread_name = (name + "-" + std::to_string(i)).substr(0, 15);
    loop->thread = std::thread([raw, thread_name, poll_before_sleep] {
      ::pthread_setname_np(::pthread_self(), thread_name.c_str());
      if (poll_before_sleep.count() > 0) run_polling(raw->io, poll_before_sleep);
      else raw->io.run();
    });
    loops_.push_back(std::move(loop));
  }
}

asio::io_context& IoLoops::next() { return loops_[next_.fetch_add(1, std::memory_order_relaxed) % loops_.size()]->io; }

void IoLoops::stop_when_idle() {
  if (stopping_.exchange(true)) return;
  // The guard is reset on its own loop's thread: nothing else touches it then.
  for (auto& l : loops_) asio::post(l->io, [raw = l.get()] { raw->guard.reset(); });
}

void IoLoops::join() {
  for (auto& l : loops_)
    if (l->thread.joinable()) l->thread.join();
}

}  // namespace kiln::daemon
