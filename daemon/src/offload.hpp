// Running blocking work (disk, SQLite, zstd) off the event loop, and waiting on
// callbacks from other threads, from inside a coroutine.
//
// GCC 12.2 destroys a lambda temporary with non-trivial captures twice when it appears in
// a co_await expression (seen as a shared_ptr released twice). So: these are plain
// functions (not coroutines) taking the callable by const reference and copying it, and
// callers pass a NAMED lambda: `auto job = [up] {...}; co_await offload(pool, job);`.
// Coroutines in kiln_daemon likewise take class-type parameters by reference.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
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

}  // namespace kiln::daemon
