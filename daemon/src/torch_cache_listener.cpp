// The torch.compile cache listener (see torch_cache_listener.hpp).
#include "torch_cache_listener.hpp"

#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include "close_log.hpp"
#include "loopback_endpoint.hpp"
#include "make_room.hpp"
#include "unix_listener.hpp"

namespace kiln::daemon {

using boost::system::error_code;
namespace generic = asio::generic;

TorchCacheListener::TorchCacheListener(asio::io_context& io, IoLoops& loops, ServerState& state)
    : io_(io), loops_(loops), state_(state), backend_(state), strand_(asio::make_strand(io)), unix_(strand_), tcp_(strand_) {}

TorchCacheListener::~TorchCacheListener() {
  if (created_socket_ && !stopped_) ::unlink(socket_path_.c_str());
  stop();
}

Result<std::unique_ptr<TorchCacheListener>> TorchCacheListener::create(asio::io_context& io, IoLoops& loops,
                                                                      ServerState& state, const Config& config) {
  std::unique_ptr<TorchCacheListener> l(new TorchCacheListener(io, loops, state));
  const auto& tc = config.torch_cache;
  error_code ec;
  if (!tc.socket.empty()) {
    auto fd = create_unix_listener(tc.socket, config.access);
    if (!fd) return make_error(fd.error().code, "torch_cache.socket: " + fd.error().message);
    l->unix_.assign(asio::local::stream_protocol(), fd->get(), ec);
    if (ec) return make_error(Errc::io_error, "torch_cache.socket: " + ec.message());
    fd->release();
    l->socket_path_ = tc.socket;
    l->created_socket_ = true;
  }
  if (!tc.listen.empty()) {
    auto ep = parse_loopback_endpoint("torch_cache.listen", tc.listen, "127.0.0.1:6379");
    if (!ep) return std::move(ep).error();
    l->tcp_.open(ep->protocol(), ec);
    if (!ec) l->tcp_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) l->tcp_.bind(*ep, ec);
    if (!ec) l->tcp_.listen(512, ec);
    if (ec) return make_error(Errc::io_error, "torch_cache.listen " + tc.listen + ": " + ec.message());
    l->tcp_address_ = endpoint_text(l->tcp_.local_endpoint(ec));
  }
  return l;
}

void TorchCacheListener::start() {
  if (unix_.is_open()) {
    asio::co_spawn(strand_, accept_unix(), asio::detached);
    spdlog::info("torch cache (Redis protocol) listening on {}", socket_path_.string());
  }
  if (tcp_.is_open()) {
    asio::co_spawn(strand_, accept_tcp(), asio::detached);
    spdlog::info("torch cache (Redis protocol) listening on {}", tcp_address_);
  }
}

void TorchCacheListener::stop() {
  if (stopped_.exchange(true)) return;
  if (created_socket_) ::unlink(socket_path_.c_str());  // new clients fail fast
  asio::post(strand_, [this] {
    error_code ec;
    unix_.close(ec);
    tcp_.close(ec);
  });
  {
    std::lock_guard lock(conns_mu_);
    for (auto& w : conns_)
      if (auto c = w.lock()) c->close();
  }
}

void TorchCacheListener::serve(torch_cache::Socket socket, const PeerCred* cred, std::string peer) {
  auto cfg = state_.config();
  state_.metrics.client_memory.set_limit(cfg->limits.client_memory_bytes);
  if (open_.load() >= cfg->limits.max_connections) {
    // Room is made by closing whoever has kept kilnd waiting longest (this client is served
    // at once; the count is one over until that one's loop has closed it); a new client is
    // refused only when no connection has kept kilnd waiting long enough (make_room.hpp).
    auto victim = pick_eviction(conns_mu_, conns_, /*idle_too=*/true, std::chrono::steady_clock::now());
    if (!victim) {
      state_.metrics.connection_refused();
      log_closed_by_kilnd("torch cache connection", peer,
                          "refused: " + std::to_string(open_.load()) +
                              " connections open (limits.max_connections), none of them waiting on its client");
      return;  // closed by the socket's destructor
    }
    state_.metrics.connection_evicted();
    auto wait = victim->peer_wait();
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - wait.since);
    victim->close(std::string(wait.state == torch_cache::PeerWait::State::idle ? "idle" : "stalled") + " for " +
                  std::to_string(ms.count()) + " ms while limits.max_connections (" +
                  std::to_string(cfg->limits.max_connections) + ") were open: closed to let a new client in");
  }
  PeerCred anonymous{0, static_cast<uid_t>(-1), static_cast<gid_t>(-1), {}};
  auto role = state_.access()->role_of(cred ? *cred : anonymous);
  torch_cache::ConnectionOptions o;
  o.session.can_read = role >= protocol::Role::read;
  o.session.can_write = role >= protocol::Role::build;
  o.session.password = cfg->torch_cache.password;
  o.limits.max_bulk_bytes = cfg->torch_cache.max_value_bytes;
  o.idle_timeout = cfg->limits.idle_timeout;
  o.request_timeout = cfg->limits.request_timeout;
  o.memory = &state_.metrics.client_memory;
  ++open_;
  state_.metrics.torch_connection_opened();
  spdlog::debug("torch cache connection from {} (role {})", peer, protocol::role_name(role));
  // Who is asking, for whose entries it reads and writes; kept alive by the connection.
  auto client = std::make_shared<TorchCacheClient>(backend_, torch_cache_writer(cred, role));
  auto conn = std::make_shared<torch_cache::Connection>(std::move(socket), *client, std::move(o), std::move(peer),
                                                        [this, client] {
                                                          --open_;
                                                          state_.metrics.torch_connection_closed();
                                                        });
  {
    std::lock_guard lock(conns_mu_);
    conns_.remove_if([](const std::weak_ptr<torch_cache::Connection>& w) { return w.expired(); });
    conns_.push_back(conn);
  }
  if (stopped_) conn->close();
  conn->start();
}

asio::awaitable<void> TorchCacheListener::accept_unix() {
  for (;;) {
    error_code ec;
    asio::local::stream_protocol::socket sock(io_);
    co_await unix_.async_accept(sock, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (!unix_.is_open() || ec == asio::error::operation_aborted) co_return;
      spdlog::warn("torch cache accept failed: {}", ec.message());
      continue;
    }
    auto cred = peer_credentials(sock.native_handle());
    if (!cred) {
      spdlog::warn("torch cache connection refused: {}", cred.error().to_string());
      continue;
    }
    int fd = sock.release(ec);
    if (ec) continue;
    torch_cache::Socket gs(loops_.next(), generic::stream_protocol(AF_UNIX, SOCK_STREAM), fd);
    serve(std::move(gs), &*cred, "uid=" + std::to_string(cred->uid) + " pid=" + std::to_string(cred->pid));
  }
}

asio::awaitable<void> TorchCacheListener::accept_tcp() {
  for (;;) {
    error_code ec;
    asio::ip::tcp::socket sock(io_);
    co_await tcp_.async_accept(sock, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (!tcp_.is_open() || ec == asio::error::operation_aborted) co_return;
      spdlog::warn("torch cache accept failed: {}", ec.message());
      continue;
    }
    sock.set_option(asio::ip::tcp::no_delay(true), ec);
    auto remote = sock.remote_endpoint(ec);
    std::string peer = ec ? std::string("tcp") : remote.address().to_string() + ":" + std::to_string(remote.port());
    auto family = remote.protocol().family();
    int fd = sock.release(ec);
    if (ec) continue;
    torch_cache::Socket gs(loops_.next(), generic::stream_protocol(family, SOCK_STREAM), fd);
    serve(std::move(gs), nullptr, std::move(peer));
  }
}

}  // namespace kiln::daemon
