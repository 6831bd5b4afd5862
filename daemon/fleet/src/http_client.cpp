// The registry's HTTP client. See kiln/fleet/http_client.hpp.
#include "kiln/fleet/http_client.hpp"

#include "http_proxy.hpp"
#include "kiln/base64.hpp"

#include <openssl/err.h>
#include <openssl/evp.h>

#include <cctype>

#include <algorithm>
#include <fstream>
#include <limits>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

namespace kiln::fleet {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using asio::use_awaitable;

std::string HttpResponse::header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? std::string() : it->second;
}

namespace {

Result<std::string> read_secret_file(const std::filesystem::path& file, const char* what) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return make_error(Errc::invalid_argument, std::string(what) + " file " + file.string() + " cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  if (s.empty() || s.find('\n') != std::string::npos) {
    return make_error(Errc::invalid_argument, std::string(what) + " file " + file.string() + " must hold one non-empty line");
  }
  return s;
}

}  // namespace

Result<std::string> basic_authorization_from_file(const std::filesystem::path& file) {
  auto s = read_secret_file(file, "basic auth");
  if (!s) return s;
  if (s->find(':') == std::string::npos || s->front() == ':') {
    return make_error(Errc::invalid_argument, "basic auth file " + file.string() + " must hold user:password");
  }
  return "Basic " + base64_encode(std::as_bytes(std::span(s->data(), s->size())));
}

Result<std::string> bearer_authorization_from_file(const std::filesystem::path& file) {
  auto s = read_secret_file(file, "bearer token");
  if (!s) return s;
  return "Bearer " + *s;
}

namespace {

struct Url {
  bool tls = false;
  std::string host, port, target;  // target: path and query, "/" at least
  bool same_origin(const Url& o) const { return tls == o.tls && host == o.host && port == o.port; }
  std::string origin() const { return (tls ? "https://" : "http://") + host + ":" + port; }
};

Result<Url> parse_url(std::string_view text) {
  Url u;
  std::string_view rest;
  if (text.starts_with("https://")) {
    u.tls = true;
    rest = text.substr(8);
  } else if (text.starts_with("http://")) {
    rest = text.substr(7);
  } else {
    return make_error(Errc::invalid_argument, "URL must start with https:// or http://");
  }
  std::size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  u.target = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  if (authority.find('@') != std::string_view::npos) {
    return make_error(Errc::invalid_argument, "URL must not carry credentials; use basic_auth_file or token_file");
  }
  if (authority.empty()) return make_error(Errc::invalid_argument, "URL has no host");
  if (authority.front() == '[') {  // [v6]:port
    std::size_t close = authority.find(']');
    if (close == std::string_view::npos) return make_error(Errc::invalid_argument, "URL has a malformed IPv6 host");
    u.host = std::string(authority.substr(1, close - 1));
    if (close + 1 < authority.size() && authority[close + 1] == ':') u.port = std::string(authority.substr(close + 2));
  } else {
    std::size_t colon = authority.rfind(':');
    u.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) u.port = std::string(authority.substr(colon + 1));
  }
  if (u.port.empty()) u.port = u.tls ? "443" : "80";
  if (u.host.empty() || !std::all_of(u.port.begin(), u.port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return make_error(Errc::invalid_argument, "URL has a malformed host or port");
  }
  return u;
}

// What went wrong, and where, for an error message: never headers.
struct Failure {
  std::string phase = "connect";
  Status status;          // set when a callback (sink or body source) failed
  bool reusable = false;  // the whole response was read and the server keeps the connection
};

bool connect_phase(const std::string& phase) {
  return phase == "resolve" || phase == "connect" || phase == "proxy CONNECT" || phase == "TLS handshake";
}

// Opens a tunnel to `to` through the proxy `stream` is connected to (RFC 9110 CONNECT).
asio::awaitable<void> proxy_tunnel(beast::tcp_stream& stream, const Url& to, const std::string& proxy_authorization,
                                   std::chrono::milliseconds timeout) {
  const std::string authority = to.host + ":" + to.port;
  http::request<http::empty_body> req{http::verb::connect, authority, 11};
  req.set(http::field::host, authority);
  req.set(http::field::user_agent, "kiln/0.1");
  if (!proxy_authorization.empty()) req.set(http::field::proxy_authorization, proxy_authorization);
  stream.expires_after(timeout);
  co_await http::async_write(stream, req, use_awaitable);
  beast::flat_buffer fb;
  http::response_parser<http::empty_body> p;
  p.skip(true);  // a CONNECT's answer has no body; the tunnel starts right after its head
  co_await http::async_read_header(stream, fb, p, use_awaitable);
  if (p.get().result_int() / 100 != 2) {
    throw std::runtime_error("the proxy answered HTTP " + std::to_string(p.get().result_int()) + " to CONNECT " + authority);
  }
}

template <class Stream>
asio::awaitable<void> exchange(Stream& stream, const HttpOptions& o, const Url& u, const HttpRequest& req,
                               const std::string& authorization, const BodySink* sink, std::uint64_t max_body,
                               HttpResponse& out, Failure& f) {
  auto& lowest = beast::get_lowest_layer(stream);
  const auto verb = http::string_to_verb(req.method);
  const std::string host_header = u.host + ":" + u.port;
  auto set_headers = [&](auto& hr) {
    hr.set(http::field::host, host_header);
    hr.set(http::field::user_agent, "kiln/0.1");
    if (!authorization.empty()) hr.set(http::field::authorization, authorization);
    for (const auto& [k, v] : req.headers) hr.set(k, v);
  };
  f.phase = "send";
  lowest.expires_after(o.io_timeout);
  if (req.body_source) {
    http::request<http::empty_body> hr{verb, u.target, 11};
    set_headers(hr);
    hr.content_length(req.body_size);
    http::request_serializer<http::empty_body> sr{hr};
    co_await http::async_write_header(stream, sr, use_awaitable);
    std::vector<std::byte> buf(256 << 10);
    std::uint64_t sent = 0;
    while (sent < req.body_size) {
      auto n = req.body_source(std::span(buf.data(), std::min<std::uint64_t>(buf.size(), req.body_size - sent)));
      if (!n) {
        f.status = std::move(n).error();
        co_return;
      }
      if (*n == 0) {
        f.status = make_error(Errc::internal, "request body ended after " + std::to_string(sent) + " of " +
                                                  std::to_string(req.body_size) + " bytes");
        co_return;
      }
      lowest.expires_after(o.io_timeout);
      co_await asio::async_write(stream, asio::buffer(buf.data(), *n), use_awaitable);
      sent += *n;
    }
  } else {
    http::request<http::string_body> hr{verb, u.target, 11};
    set_headers(hr);
    hr.body() = req.body;
    if (verb != http::verb::get && verb != http::verb::head) hr.prepare_payload();
    co_await http::async_write(stream, hr, use_awaitable);
  }

  f.phase = "response";
  beast::flat_buffer fb;
  http::response_parser<http::buffer_body> p;
  p.body_limit(std::numeric_limits<std::uint64_t>::max());
  if (verb == http::verb::head) p.skip(true);
  lowest.expires_after(o.io_timeout);
  co_await http::async_read_header(stream, fb, p, use_awaitable);
  out.status = p.get().result_int();
  for (const auto& field : p.get()) {
    std::string name(field.name_string());
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    out.headers[name] = std::string(field.value());
  }
  const bool ok = out.status / 100 == 2;
  const bool to_sink = sink != nullptr && ok;
  const std::uint64_t keep = ok ? max_body : 4096;
  std::vector<char> buf(256 << 10);
  f.phase = "response body";
  while (!p.is_done()) {
    p.get().body().data = buf.data();
    p.get().body().size = buf.size();
    lowest.expires_after(o.io_timeout);
    auto [ec, n] = co_await http::async_read(stream, fb, p, asio::as_tuple(use_awaitable));
    (void)n;
    if (ec == http::error::need_buffer) ec = {};
    if (ec) throw boost::system::system_error(ec);
    const std::size_t got = buf.size() - p.get().body().size;
    if (to_sink) {
      if (auto st = (*sink)(std::as_bytes(std::span(buf.data(), got))); !st) {
        f.status = std::move(st);
        co_return;
      }
    } else if (out.body.size() + got > keep) {
      if (ok) {
        f.status = make_error(Errc::io_error, "response body larger than the " + std::to_string(max_body) + " bytes expected");
        co_return;
      }
      out.body.append(buf.data(), static_cast<std::size_t>(keep - out.body.size()));
    } else {
      out.body.append(buf.data(), got);
    }
  }
  f.phase = "done";
  f.reusable = p.keep_alive();
}

class Client final : public HttpClient {
 public:
  Client(HttpOptions o, Url base, std::unique_ptr<ssl::context> ctx)
      : o_(std::move(o)), base_(std::move(base)), ctx_(std::move(ctx)) {
    if (o_.proxy_from_environment) proxies_ = proxy_environment();
  }
  const HttpOptions& options() const override { return o_; }

  Result<HttpResponse> send(const HttpRequest& request, const BodySink* sink, std::uint64_t max_body) const override {
    std::string target = request.target;
    for (int hop = 0;; ++hop) {
      if (auto st = still_wanted(request); !st) return std::move(st).error();
      Url u;
      if (target.starts_with("http://") || target.starts_with("https://")) {
        auto parsed = parse_url(target);
        if (!parsed) return make_error(Errc::io_error, "registry redirected to an unusable URL");
        u = *parsed;
      } else {
        u = base_;
        u.target = target;
      }
      if (u.tls && !ctx_) return make_error(Errc::invalid_argument, "registry redirected to https without TLS set up");
      // Credentials go to the registry only, never to where it redirects.
      const std::string& auth = u.same_origin(base_) ? o_.authorization : kNone;
      auto r = send_once(u, request, auth, sink, max_body);
      if (!r) return r;
      const bool redirect = r->status == 301 || r->status == 302 || r->status == 303 || r->status == 307 || r->status == 308;
      if (!redirect || (request.method != "GET" && request.method != "HEAD")) return r;
      std::string location = r->header("location");
      if (location.empty()) return r;
      if (hop >= 4) {
        return make_error(Errc::protocol_error, request.method + " " + u.origin() + u.target.substr(0, u.target.find('?')) +
                                                    ": a redirect loop (more than 4 redirects in a row)");
      }
      target = location.starts_with("/") ? u.origin() + location : location;
    }
  }

 private:
  inline static const std::string kNone;

  // One connection, used by one request at a time: its own io_context (a pooled stream
  // keeps the executor it was made with), TCP or TLS.
  struct Conn {
    explicit Conn(Url o) : origin(std::move(o)) {}
    Url origin;
    asio::io_context ioc;
    std::optional<beast::tcp_stream> tcp;
    std::optional<beast::ssl_stream<beast::tcp_stream>> tls;
    std::chrono::steady_clock::time_point idle_since{};
    bool connected() const { return tcp.has_value() || tls.has_value(); }
  };

  struct Attempt {
    Result<HttpResponse> result = HttpResponse{};
    bool reusable = false;  // the connection may serve another request
    bool stale = false;     // failed before any of the response arrived (a reused connection the server closed)
  };

  // How often a request with a cancel flag looks at it.
  static constexpr std::chrono::milliseconds kCancelPoll{50};

  static Status still_wanted(const HttpRequest& req) {
    const std::string what = req.method + " " + req.target.substr(0, req.target.find('?'));
    if (req.cancel && req.cancel->load()) return make_error(Errc::cancelled, what + ": cancelled before it was sent");
    if (std::chrono::steady_clock::now() >= req.deadline) {
      return make_error(Errc::timeout, what + ": its deadline passed before it was sent");
    }
    return {};
  }

  static constexpr std::size_t kMaxIdle = 8;
  static constexpr std::chrono::seconds kMaxIdleAge{15};

  std::unique_ptr<Conn> take_idle(const Url& u) const {
    std::lock_guard lock(pool_mu_);
    const auto now = std::chrono::steady_clock::now();
    std::erase_if(idle_, [&](const std::unique_ptr<Conn>& c) { return now - c->idle_since > kMaxIdleAge; });
    for (auto it = idle_.rbegin(); it != idle_.rend(); ++it) {
      if (!(*it)->origin.same_origin(u)) continue;
      auto c = std::move(*it);
      idle_.erase(std::next(it).base());
      return c;
    }
    return nullptr;
  }

  void put_idle(std::unique_ptr<Conn> c) const {
    c->idle_since = std::chrono::steady_clock::now();
    std::lock_guard lock(pool_mu_);
    if (idle_.size() >= kMaxIdle) idle_.erase(idle_.begin());  // the oldest goes
    idle_.push_back(std::move(c));
  }

  // A request whose body is streamed from a source goes on a new connection: it cannot be
  // sent again if a pooled one turns out closed. Others take an idle connection to the
  // same origin when there is one, and are sent once more on a new one if it was closed
  // before any of the response arrived.
  Result<HttpResponse> send_once(const Url& u, const HttpRequest& req, const std::string& auth, const BodySink* sink,
                                 std::uint64_t max_body) const {
    if (!req.body_source) {
      if (auto conn = take_idle(u)) {
        Attempt a = attempt(*conn, u, req, auth, sink, max_body);
        if (a.reusable) put_idle(std::move(conn));
        if (a.result || !a.stale) return std::move(a.result);
      }
    }
    auto conn = std::make_unique<Conn>(u);
    Attempt a = attempt(*conn, u, req, auth, sink, max_body);
    if (a.reusable) put_idle(std::move(conn));
    return std::move(a.result);
  }

  Attempt attempt(Conn& c, const Url& u, const HttpRequest& req, const std::string& auth, const BodySink* sink,
                  std::uint64_t max_body) const {
    const bool reused = c.connected();
    Attempt a;
    HttpResponse out;
    asio::ip::tcp::resolver resolver(c.ioc);  // here, so that the watchdog below can cancel it
    Failure f;
    std::exception_ptr eptr;
    // Through a proxy: https tunnelled by CONNECT; http sent to it in absolute form.
    const auto route = proxy_for(proxies_, u.tls, u.host);
    std::optional<Url> proxy;
    if (route) {
      auto p = parse_url(route->url);
      if (!p) {
        a.result = make_error(Errc::invalid_argument, "proxy from the environment: " + p.error().message);
        return a;
      }
      proxy = *p;
    }
    Url sent = u;
    HttpRequest proxied;
    if (proxy && !u.tls) {
      sent.target = u.origin() + u.target;
      proxied = req;
      if (!route->authorization.empty()) proxied.headers.emplace_back("Proxy-Authorization", route->authorization);
    }
    const HttpRequest& r = proxy && !u.tls ? proxied : req;
    auto run = [&]() -> asio::awaitable<void> {
      if (!c.connected()) {
        auto ex = co_await asio::this_coro::executor;
        f.phase = "resolve";
        const Url& peer = proxy ? *proxy : u;
        auto endpoints = co_await resolver.async_resolve(peer.host, peer.port, use_awaitable);
        c.tcp.emplace(ex);
        f.phase = "connect";
        c.tcp->expires_after(o_.connect_timeout);
        co_await c.tcp->async_connect(endpoints, use_awaitable);
        if (proxy && u.tls) {
          f.phase = "proxy CONNECT";
          co_await proxy_tunnel(*c.tcp, u, route->authorization, o_.connect_timeout);
        }
        if (u.tls) {
          c.tls.emplace(std::move(*c.tcp), *ctx_);
          c.tcp.reset();
          f.phase = "TLS handshake";
          if (!SSL_set_tlsext_host_name(c.tls->native_handle(), u.host.c_str())) {
            throw boost::system::system_error(boost::system::error_code(static_cast<int>(::ERR_get_error()),
                                                                        asio::error::get_ssl_category()));
          }
          c.tls->set_verify_callback(ssl::host_name_verification(u.host));
          beast::get_lowest_layer(*c.tls).expires_after(o_.connect_timeout);
          co_await c.tls->async_handshake(ssl::stream_base::client, use_awaitable);
        }
      }
      if (c.tls) co_await exchange(*c.tls, o_, sent, r, auth, sink, max_body, out, f);
      else co_await exchange(*c.tcp, o_, sent, r, auth, sink, max_body, out, f);
    };
    // The deadline and the cancel flag: a watchdog beside the exchange closes whatever the
    // request has open once either trips (each step's own timer is io_timeout's).
    enum class Stop { no, deadline, cancelled } stopped = Stop::no;
    bool finished = false;
    asio::steady_timer watch(c.ioc);
    auto watchdog = [&]() -> asio::awaitable<void> {
      while (!finished) {
        const auto now = std::chrono::steady_clock::now();
        if (stopped == Stop::no && req.cancel && req.cancel->load()) stopped = Stop::cancelled;
        if (stopped == Stop::no && now >= req.deadline) stopped = Stop::deadline;
        if (stopped != Stop::no) {
          boost::system::error_code ignored;
          resolver.cancel();
          if (c.tcp) c.tcp->socket().close(ignored);
          if (c.tls) beast::get_lowest_layer(*c.tls).socket().close(ignored);
        }
        auto next = req.deadline;
        if (req.cancel || stopped != Stop::no) next = std::min(next, now + kCancelPoll);
        watch.expires_at(next);
        co_await watch.async_wait(asio::as_tuple(use_awaitable));
      }
    };
    c.ioc.restart();
    asio::co_spawn(c.ioc, run(), [&](std::exception_ptr e) {
      eptr = e;
      finished = true;
      watch.cancel();
    });
    if (req.cancel || req.deadline != std::chrono::steady_clock::time_point::max()) {
      asio::co_spawn(c.ioc, watchdog(), asio::detached);
    }
    c.ioc.run();
    const std::string where = req.method + " " + u.origin() + u.target.substr(0, u.target.find('?'));
    if (eptr && stopped != Stop::no) {
      a.result = stopped == Stop::cancelled ? make_error(Errc::cancelled, where + ": cancelled in " + f.phase)
                                            : make_error(Errc::timeout, where + ": its deadline passed in " + f.phase);
      return a;
    }
    if (eptr) {
      a.stale = reused && out.status == 0 && (f.phase == "send" || f.phase == "response");
      try {
        std::rethrow_exception(eptr);
      } catch (const boost::system::system_error& e) {
        const auto ec = e.code();
        if (ec == beast::error::timeout) {
          a.result = make_error(Errc::timeout, where + ": no progress in " + f.phase + " within " +
                                                   std::to_string((connect_phase(f.phase) ? o_.connect_timeout : o_.io_timeout).count()) + " ms");
          a.stale = false;  // a server that does not answer is not a closed connection
          return a;
        }
        const Errc code = connect_phase(f.phase) ? Errc::unavailable : Errc::io_error;
        std::string what = ec == http::error::partial_message ? "connection closed before the whole body arrived"
                                                               : ec.message();
        a.result = make_error(code, where + ": " + f.phase + ": " + what);
      } catch (const std::exception& e) {
        a.result = make_error(Errc::io_error, where + ": " + f.phase + ": " + e.what());
      }
      return a;
    }
    if (!f.status) {
      a.result = make_error(f.status.error().code, where + ": " + f.status.error().message);
      return a;
    }
    a.reusable = f.reusable && f.phase == "done";
    a.result = std::move(out);
    return a;
  }

  HttpOptions o_;
  Url base_;
  std::unique_ptr<ssl::context> ctx_;
  ProxyEnvironment proxies_;  // empty unless proxy_from_environment
  mutable std::mutex pool_mu_;
  mutable std::vector<std::unique_ptr<Conn>> idle_;  // guarded by pool_mu_; newest last
};

}  // namespace

Status check_base_url(std::string_view url) {
  auto base = parse_url(url);
  if (!base) {
    // A URL with user:password in it is not echoed: the message must not carry the secret.
    const bool secret = url.find('@') != std::string_view::npos;
    return make_error(Errc::invalid_argument,
                      "registry URL" + (secret ? std::string() : " '" + std::string(url) + "'") + ": " + base.error().message);
  }
  if (base->target != "/" && !base->target.empty()) {
    return make_error(Errc::invalid_argument, "registry URL must have no path (the repository is configured apart)");
  }
  return {};
}

Result<std::shared_ptr<const HttpClient>> HttpClient::create(const HttpOptions& options) {
  KILN_TRY(check_base_url(options.base_url));
  auto base = parse_url(options.base_url);
  if (!base) return std::move(base).error();
  std::unique_ptr<ssl::context> ctx;
  if (base->tls || !options.ca_file.empty()) {
    ctx = std::make_unique<ssl::context>(ssl::context::tls_client);
    boost::system::error_code ec;
    ctx->set_verify_mode(ssl::verify_peer, ec);
    if (!options.ca_file.empty()) {
      ctx->load_verify_file(options.ca_file.string(), ec);
      if (ec) return make_error(Errc::invalid_argument, "CA file " + options.ca_file.string() + ": " + ec.message());
    } else {
      ctx->set_default_verify_paths(ec);
    }
    if (!options.client_cert_file.empty()) {
      ctx->use_certificate_chain_file(options.client_cert_file.string(), ec);
      if (ec) return make_error(Errc::invalid_argument, "client certificate " + options.client_cert_file.string() + ": " + ec.message());
      ctx->use_private_key_file(options.client_key_file.string(), ssl::context::pem, ec);
      if (ec) return make_error(Errc::invalid_argument, "client key " + options.client_key_file.string() + ": " + ec.message());
    }
  }
  return std::shared_ptr<const HttpClient>(std::make_shared<Client>(options, std::move(*base), std::move(ctx)));
}

}  // namespace kiln::fleet
