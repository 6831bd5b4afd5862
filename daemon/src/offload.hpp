// Running blocking work (disk, SQLite, zstd) off the event loop, and waiting on
// callbacks from other threads, from inside a coroutine.
//
// GCC 12.2 destroys a lambda temporary with non-trivial captures twice when it appears in
// a co_await expression (seen as a shared_ptr released twice). So: these are plain
// functions (not coroutines) taking the callable by const reference and copying it, and
// callers pass a NAMED lambda: `auto job = [up] {...}; co_await offload(pool, job);`.
// Coroutines in kiln_daemon likewise take class-type parameters by reference.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace kiln::daemon {

namespace asio = boost::asio;

// co_await offload(pool, f): runs f() on `pool` and resumes the calling coroutine on its
// own executor with f's result. f must not throw.
template <class F>
auto offload(asio::thread_pool& pool, const F& f) {
  using R = std::invoke_result_t<F&>;
  return asio::async_initiate<const asio::use_awaitable_t<>, void(R)>(
      [&pool, fn = f](auto handler) mutable {
        auto ex = asio::get_associated_executor(handler);
        asio::post(pool, [fn = std::move(fn), handler = std::move(handler), ex]() mutable {
          auto r = std::make_shared<std::optional<R>>(fn());
          asio::post(ex, [handler = std::move(handler), r]() mutable { std::move(handler)(std::move(**r)); });
        });
      },
      asio::use_awaitable);
}

// co_await await_callback<T>(start): calls start(callback) and resumes once callback(value)
// is invoked, from any thread. The callback must be invoked exactly once.
template <class T, class Start>
auto await_callback(const Start& start) {
  return asio::async_initiate<const asio::use_awaitable_t<>, void(T)>(
      [st = start](auto handler) mutable {
        auto ex = asio::get_associated_executor(handler);
        auto shared = std::make_shared<decltype(handler)>(std::move(handler));
        st(std::function<void(T)>([shared, ex](T value) {
          auto v = std::make_shared<std::optional<T>>(std::move(value));
          asio::post(ex, [shared, v]() mutable { std::move(*shared)(std::move(**v)); });
        }));
      },
      asio::use_awaitable);
}

// co_await await_callback_within<T>(timeout, start): as await_callback, but resumes with
// nullopt once `timeout` has passed without the callback. The callback may still come
// later, from any thread, and is then ignored; so `start` and what it runs must own what
// they use (never the awaiting coroutine's locals). A zero timeout waits without a limit.
template <class T, class Start>
auto await_callback_within(std::chrono::milliseconds timeout, const Start& start) {
  return asio::async_initiate<const asio::use_awaitable_t<>, void(std::optional<T>)>(
      [st = start, timeout](auto handler) mutable {
        using Handler = decltype(handler);
        using Executor = asio::associated_executor_t<Handler>;
        Executor ex = asio::get_associated_executor(handler);
        // Whoever sets `answered` first resumes the coroutine; the timer is touched only on
        // the coroutine's executor.
        struct Race {
          Race(Handler h, const Executor& e) : handler(std::move(h)), timer(e) {}
          std::atomic<bool> answered{false};
          Handler handler;
          asio::steady_timer timer;
        };
        auto race = std::make_shared<Race>(std::move(handler), ex);
        if (timeout.count() > 0) {
          race->timer.expires_after(timeout);
          race->timer.async_wait([race](const boost::system::error_code& ec) {
            if (ec || race->answered.exchange(true)) return;
            std::move(race->handler)(std::optional<T>());
          });
        }
        st(std::function<void(T)>([race, ex](T value) {
          if (race->answered.exchange(true)) return;
          auto v = std::make_shared<std::optional<T>>(std::move(value));
          asio::post(ex, [race, v]() mutable {
            race->timer.cancel();
            std::move(race->handler)(std::move(*v));
          });
        }));
      },
      asio::use_awaitable);
}

// co_await offload_within(pool, timeout, f): runs f() on `pool`; its result, or nullopt
// once `timeout` has passed first (f still runs to its end, its result then dropped). f is
// copied and must own everything it touches that the caller's frame holds.
template <class F>
auto offload_within(asio::thread_pool& pool, std::chrono::milliseconds timeout, const F& f) {
  using R = std::invoke_result_t<F&>;
  auto start = [&pool, fn = f](std::function<void(R)> done) {
    asio::post(pool, [fn, done = std::move(done)]() mutable { done(fn()); });
  };
  return await_callback_within<R>(timeout, start);
}

}  // namespace kiln::daemon
