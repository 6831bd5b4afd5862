// Waiting inside a coroutine for work on another thread, with and without a time limit
// (daemon/src/offload.hpp): the limit answers nullopt in time, and the work that ends
// later is dropped without touching the coroutine that has moved on.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include "offload.hpp"

using namespace std::chrono_literals;
using kiln::daemon::await_callback_within;
using kiln::daemon::offload_within;
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {

// Runs `body` as a coroutine on a fresh io_context until it ends.
template <class Body>
void run_coroutine(Body body) {
  asio::io_context io;
  asio::co_spawn(io, body, asio::detached);
  io.run();
}

}  // namespace

TEST_CASE("offload_within: work that ends in time gives its result") {
  asio::thread_pool pool(1);
  std::optional<int> got;
  run_coroutine([&]() -> asio::awaitable<void> {
    auto job = [] { return 42; };
    got = co_await offload_within(pool, 2000ms, job);
  });
  REQUIRE(got.has_value());
  CHECK(*got == 42);
  pool.join();
}

TEST_CASE("offload_within: past the limit the coroutine goes on with nullopt; the late result is dropped") {
  asio::thread_pool pool(1);
  std::atomic<bool> release{false}, finished{false};
  std::optional<int> got = 7;
  Clock::duration waited{};
  run_coroutine([&]() -> asio::awaitable<void> {
    auto job = [&release, &finished] {
      while (!release) std::this_thread::sleep_for(1ms);
      finished = true;
      return 1;
    };
    const auto t0 = Clock::now();
    got = co_await offload_within(pool, 100ms, job);
    waited = Clock::now() - t0;
  });
  CHECK_FALSE(got.has_value());
  CHECK(waited >= 100ms);
  CHECK_FALSE(finished);  // the coroutine did not wait for the work
  release = true;
  pool.join();            // the work ends; its result goes nowhere
  CHECK(finished);
}

TEST_CASE("await_callback_within: a zero limit waits for the callback however long it takes") {
  std::optional<bool> got;
  std::thread later;
  run_coroutine([&]() -> asio::awaitable<void> {
    auto start = [&later](std::function<void(bool)> done) {
      later = std::thread([done] {
        std::this_thread::sleep_for(200ms);
        done(true);
      });
    };
    got = co_await await_callback_within<bool>(0ms, start);
  });
  later.join();
  REQUIRE(got.has_value());
  CHECK(*got);
}

TEST_CASE("await_callback_within: a callback that never comes costs the limit, nothing more") {
  asio::io_context io;
  std::optional<bool> got = true;
  std::function<void(bool)> kept;  // held, uncalled, past the coroutine's end; gone before `io`
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto start = [&kept](std::function<void(bool)> done) { kept = std::move(done); };
        got = co_await await_callback_within<bool>(50ms, start);
      },
      asio::detached);
  io.run();
  CHECK_FALSE(got.has_value());
  kept(true);  // late: ignored
  kept = nullptr;
}
