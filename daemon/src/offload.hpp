// Running blocking work (disk, SQLite, zstd) off the event loop, and waiting on
// callbacks from other threads, from inside a coroutine.
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

// Runs f() on `pool` and resumes the calling coroutine on its own executor with the
// result. f must not throw.
template <class F>
auto offload(asio::thread_pool& pool, F f) -> asio::awaitable<std::invoke_result_t<F>> {
  using R = std::invoke_result_t<F>;
  auto result = co_await asio::async_initiate<const asio::use_awaitable_t<>, void(std::optional<R>)>(
      [&pool](auto handler, F fn) {
        auto ex = asio::get_associated_executor(handler);
        asio::post(pool, [fn = std::move(fn), handler = std::move(handler), ex]() mutable {
          std::optional<R> r(fn());
          asio::post(ex, [handler = std::move(handler), r = std::move(r)]() mutable { std::move(handler)(std::move(r)); });
        });
      },
      asio::use_awaitable, std::move(f));
  co_return std::move(*result);
}

// Calls start(callback) and suspends until callback(value) is invoked, from any thread.
// The callback must be invoked exactly once.
template <class T>
asio::awaitable<T> await_callback(std::function<void(std::function<void(T)>)> start) {
  auto result = co_await asio::async_initiate<const asio::use_awaitable_t<>, void(std::optional<T>)>(
      [](auto handler, std::function<void(std::function<void(T)>)> st) {
        auto ex = asio::get_associated_executor(handler);
        auto shared = std::make_shared<decltype(handler)>(std::move(handler));
        st([shared, ex](T value) {
          asio::post(ex, [shared, v = std::optional<T>(std::move(value))]() mutable { std::move(*shared)(std::move(v)); });
        });
      },
      asio::use_awaitable, std::move(start));
  co_return std::move(*result);
}

}  // namespace kiln::daemon
