// The optional loopback HTTP endpoint serving Prometheus text at /metrics (Boost.Beast).
// One request per connection, 5 s to send it; anything but GET /metrics is 404/405.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "kiln/result.hpp"

namespace kiln::daemon {

class MetricsHttp {
 public:
  // Produces the page; runs as a coroutine on the event loop (it may offload).
  using Render = std::function<boost::asio::awaitable<std::string>()>;

  // Binds `listen` ("127.0.0.1:9464"; port 0 picks one). io_error if the bind fails.
  static Result<std::unique_ptr<MetricsHttp>> start(boost::asio::io_context& io, const std::string& listen, Render render);
  // "http://127.0.0.1:<port>/metrics"
  std::string url() const;
  // Stops accepting; connections being answered finish.
  void stop();

 private:
  MetricsHttp(boost::asio::io_context& io, Render render);
  boost::asio::awaitable<void> accept_loop();
  boost::asio::awaitable<void> serve(boost::asio::ip::tcp::socket socket);

  boost::asio::io_context& io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  Render render_;
  std::string url_;
};

}  // namespace kiln::daemon
