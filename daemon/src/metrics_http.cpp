// Loopback Prometheus endpoint.
#include "metrics_http.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include "loopback_endpoint.hpp"

namespace kiln::daemon {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;

MetricsHttp::MetricsHttp(asio::io_context& io, Render render) : io_(io), acceptor_(io), render_(std::move(render)) {}

Result<std::unique_ptr<MetricsHttp>> MetricsHttp::start(asio::io_context& io, const std::string& listen, Render render) {
  auto ep = parse_loopback_endpoint("metrics_listen", listen, "127.0.0.1:9464");
  if (!ep) return std::move(ep).error();
  boost::system::error_code ec;
  std::unique_ptr<MetricsHttp> m(new MetricsHttp(io, std::move(render)));
  m->acceptor_.open(ep->protocol(), ec);
  if (!ec) m->acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) m->acceptor_.bind(*ep, ec);
  if (!ec) m->acceptor_.listen(64, ec);
  if (ec) return make_error(Errc::io_error, "metrics endpoint: cannot listen on " + listen + ": " + ec.message());
  m->url_ = "http://" + endpoint_text(m->acceptor_.local_endpoint()) + "/metrics";
  asio::co_spawn(io, m->accept_loop(), asio::detached);
  return m;
}

std::string MetricsHttp::url() const { return url_; }

void MetricsHttp::stop() {
  asio::post(io_, [this] {
    boost::system::error_code ec;
    acceptor_.close(ec);
  });
}

asio::awaitable<void> MetricsHttp::accept_loop() {
  for (;;) {
    boost::system::error_code ec;
    tcp::socket socket = co_await acceptor_.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (!acceptor_.is_open()) co_return;
      continue;
    }
    asio::co_spawn(io_, serve(std::move(socket)), asio::detached);
  }
}

asio::awaitable<void> MetricsHttp::serve(tcp::socket socket) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  http::request<http::string_body> req;
  boost::system::error_code ec;
  stream.expires_after(std::chrono::seconds(5));
  co_await http::async_read(stream, buffer, req, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return;
  http::response<http::string_body> res;
  res.version(req.version());
  res.keep_alive(false);
  res.set(http::field::server, "kilnd");
  if (req.method() != http::verb::get && req.method() != http::verb::head) {
    res.result(http::status::method_not_allowed);
    res.body() = "only GET\n";
  } else if (req.target() != "/metrics") {
    res.result(http::status::not_found);
    res.body() = "kilnd serves /metrics only\n";
  } else {
    res.result(http::status::ok);
    res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    res.body() = co_await render_();
  }
  res.prepare_payload();
  stream.expires_after(std::chrono::seconds(5));
  co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
}

}  // namespace kiln::daemon
