// The kilnd server: listener, accept loop, signals, drain, reload, metrics endpoint.
//
// Threads: `io`, the control loop, is run by the thread that called run(): the accept
// loop, signals, the drain and its timer (all on `strand`), the torch cache listener's
// accepting and the metrics endpoint. Client connections never run there: each accepted
// connection is given one of `loops` (Config::io_threads loops of one thread each,
// io_loops.hpp) and lives on it until it ends. Server-level state a connection reaches
// (conns, the drain) is behind conns_mu or posted to `strand`.
#include "kiln/daemon/server.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <list>
#include <mutex>
#include <optional>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include "connection.hpp"
#include "io_loops.hpp"
#include "metrics_http.hpp"
#include "offload.hpp"
#include "sd_notify.hpp"
#include "server_state.hpp"
#include "torch_cache_backend.hpp"
#include "torch_cache_listener.hpp"
#include "unix_listener.hpp"

namespace kiln::daemon {

using asio::use_awaitable;
using boost::system::error_code;
namespace proto = kiln::protocol;

struct Server::Impl {
  Impl(const Config& c, AccessPolicy access, storage::Store& store, BuildService* builds)
      : state(std::make_shared<const Config>(c), std::move(access), store, builds),
        strand(asio::make_strand(io)),
        acceptor(strand),
        signals(strand),
        drain_timer(strand),
        io_guard(io.get_executor()) {}

  asio::io_context io{1};         // the control loop (see the top of this file)
  ServerState state;
  asio::strand<asio::io_context::executor_type> strand;  // server-level objects below live on it
  asio::local::stream_protocol::acceptor acceptor;
  asio::signal_set signals;
  asio::steady_timer drain_timer;
  // Keeps `io` running while connections (on `loops`, not on `io`) drain; reset by finish_drain.
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> io_guard;
  std::unique_ptr<MetricsHttp> metrics_http;
  std::unique_ptr<TorchCacheListener> torch_cache;  // null unless [torch_cache] names a socket or address
  std::filesystem::path socket_path;
  // READY=1 and the "builds ready" STATUS go out in that order (builds_probed may run on
  // the probing thread before or after run() says READY).
  std::mutex notify_mu;
  bool ready_sent = false;  // guarded by notify_mu
  bool created_socket = false;
  std::optional<gid_t> socket_group;  // the socket file's group: what access's "@socket" names
  bool draining = false;          // on `strand`
  bool drained = false;           // on `strand`: every connection closed after a drain
  std::uint64_t serial = 0;
  std::mutex conns_mu;
  std::list<std::weak_ptr<Connection>> conns;  // protected by conns_mu
  std::mutex reload_mu;           // one reload at a time
  // The connections' loops, shared with torch_cache. Declared last so it is destroyed
  // first: handlers left on a loop after run() (a store completion posted back late) are
  // destroyed while the connections they hold can still reach `state` and `torch_cache`.
  IoLoops loops;

  asio::awaitable<void> accept_loop();
  asio::awaitable<void> signal_loop();
  void begin_drain(const char* why);
  void finish_drain();
  Status reload();
  asio::awaitable<std::string> render_metrics();
};

namespace {
void refuse(int fd, const Error& e) {
  auto body = proto::encode(proto::to_error_body(e));
  auto frame = proto::encode_frame({proto::kVersion, proto::MsgType::error, 0, 0, 0}, body);
  (void)::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}
}  // namespace

asio::awaitable<void> Server::Impl::accept_loop() {
  for (;;) {
    error_code ec;
    // The connection's loop, for its whole life: the socket is registered with it at accept.
    Socket sock(loops.next());
    co_await acceptor.async_accept(sock, asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (!acceptor.is_open() || ec == asio::error::operation_aborted) co_return;
      spdlog::warn("accept failed: {}", ec.message());
      if (ec == asio::error::no_descriptors || ec.value() == ENFILE) {
        asio::steady_timer t(io, std::chrono::milliseconds(100));  // let descriptors free up
        co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
      }
      continue;
    }
    auto cred = peer_credentials(sock.native_handle());
    if (!cred) {
      spdlog::warn("connection refused: {}", cred.error().to_string());
      continue;
    }
    auto cfg = state.config();
    if (state.open_connections.load() >= cfg->limits.max_connections) {
      state.metrics.connection_refused();
      spdlog::warn("connection from uid={} pid={} refused: {} connections open (limits.max_connections)", cred->uid,
                   cred->pid, state.open_connections.load());
      refuse(sock.native_handle(),
             make_error(Errc::busy, "kilnd has too many connections (limit " +
                                        std::to_string(cfg->limits.max_connections) + "); retry later"));
      continue;
    }
    auto conn = std::make_shared<Connection>(std::move(sock), state, std::move(*cred), ++serial);
    {
      std::lock_guard lock(conns_mu);
      conns.remove_if([](const std::weak_ptr<Connection>& w) { return w.expired(); });
      conns.push_back(conn);
    }
    conn->start();
  }
}

asio::awaitable<void> Server::Impl::signal_loop() {
  for (;;) {
    error_code ec;
    int sig = co_await signals.async_wait(asio::redirect_error(use_awaitable, ec));
    if (ec) co_return;
    if (sig == SIGHUP) {
      sd_notify("RELOADING=1");
      auto st = co_await offload(state.pool, [this] { return reload(); });
      if (!st) spdlog::error("reload failed, keeping the old configuration: {}", st.error().to_string());
      sd_notify("READY=1");
      continue;
    }
    if (draining) {
      spdlog::warn("second stop signal: closing every connection now");
      std::lock_guard lock(conns_mu);
      for (auto& w : conns)
        if (auto c = w.lock()) c->force_close();
      continue;
    }
    begin_drain(sig == SIGTERM ? "SIGTERM" : "SIGINT");
    if (drained) co_return;  // nothing was in flight: do not wait for signals again
  }
}

void Server::Impl::begin_drain(const char* why) {
  if (draining) return;
  draining = true;
  state.draining = true;  // connections read it to refuse new requests
  sd_notify("STOPPING=1");
  error_code ec;
  acceptor.close(ec);
  if (created_socket) ::unlink(socket_path.c_str());  // new clients fail fast instead of hanging
  // Logged once the socket is gone: a reader of the log may rely on that order.
  spdlog::info("stopping ({}): draining {} connection(s)", why, state.open_connections.load());
  state.stop_waiting_for_builds();  // requests held for the build service's probes end now
  if (metrics_http) metrics_http->stop();
  if (torch_cache) torch_cache->stop();
  // Misses waiting on the registry are answered now, so the drain ends well inside
  // drain_timeout however the registry behaves.
  if (state.fleet) state.fleet->stop();
  std::vector<std::shared_ptr<Connection>> live;
  {
    std::lock_guard lock(conns_mu);
    for (auto& w : conns)
      if (auto c = w.lock()) live.push_back(std::move(c));
  }
  for (auto& c : live) c->begin_drain();
  live.clear();
  if (state.open_connections.load() == 0) {
    finish_drain();
    return;
  }
  drain_timer.expires_after(state.config()->limits.drain_timeout);
  drain_timer.async_wait([this](error_code e) {
    if (e) return;
    spdlog::warn("drain timeout: closing {} connection(s) with requests still in flight", state.open_connections.load());
    std::lock_guard lock(conns_mu);
    for (auto& w : conns)
      if (auto c = w.lock()) c->force_close();
  });
}

void Server::Impl::finish_drain() {
  drained = true;
  io_guard.reset();  // run() returns once the control loop has nothing left
  drain_timer.cancel();
  error_code ec;
  signals.cancel(ec);
  signals.clear(ec);
}

Status Server::Impl::reload() {
  std::lock_guard lock(reload_mu);
  auto cur = state.config();
  if (!cur->config_file) {
    spdlog::info("reload: no config file in use; nothing to re-read");
    return {};
  }
  Config next = *cur;
  // Re-read from the defaults, so options removed from the file go back to them; the
  // paths given on the command line (socket, store) are kept.
  Config fresh = default_config();
  fresh.socket = cur->socket;
  fresh.store = cur->store;
  KILN_TRY(apply_toml_file(fresh, *cur->config_file));
  fresh.socket = cur->socket;
  fresh.store = cur->store;
  KILN_TRY(validate(fresh));
  auto access = AccessPolicy::make(fresh.access, socket_group);
  if (!access) return std::move(access).error();
  if (fresh.io_threads != cur->io_threads || fresh.io_poll_us != cur->io_poll_us ||
      fresh.store_threads != cur->store_threads || fresh.metrics_listen != cur->metrics_listen ||
      fresh.store_options.quota_bytes != cur->store_options.quota_bytes)
    spdlog::warn("reload: thread counts, io_poll_us, metrics_listen and [storage] take effect at the next restart");
  if (fresh.torch_cache.durability != cur->torch_cache.durability)
    spdlog::warn("reload: torch_cache.durability takes effect at the next restart (queued entries are kept and "
                 "written either way)");
  state.torch_queue.set_max_bytes(fresh.torch_cache.deferred_max_bytes);
  state.hot.set_capacity(fresh.hot_set_bytes);
  state.torch_values.set_capacity(fresh.torch_cache.memory_bytes);
  spdlog::set_level(spdlog::level::from_str(fresh.log_level));
  state.set_config(std::make_shared<const Config>(fresh),
                   std::make_shared<const AccessPolicy>(std::move(*access)));
  spdlog::info("reloaded configuration from {}", cur->config_file->string());
  return {};
}

asio::awaitable<std::string> Server::Impl::render_metrics() {
  auto stats = co_await offload(state.pool, [this] { return state.store.stats(); });
  std::vector<Metrics::Gauge> g;
  if (stats) {
    g.push_back({"kiln_store_entries", "Artifacts in the store.", double(stats->entries)});
    g.push_back({"kiln_store_stored_bytes", "Bytes the store takes on disk (compressed).", double(stats->stored_bytes)});
    g.push_back({"kiln_store_uncompressed_bytes", "Uncompressed bytes of the stored artifacts.", double(stats->uncompressed_bytes)});
    g.push_back({"kiln_store_evictions_total", "Artifacts evicted from the store.", double(stats->evictions), true});
    g.push_back({"kiln_store_quarantined_total", "Artifacts quarantined after failing verification.", double(stats->quarantined), true});
    g.push_back({"kiln_store_quota_bytes", "Soft quota of the store (0 = none).", double(stats->quota_bytes)});
  }
  g.push_back({"kiln_hot_set_bytes", "Bytes held as uncompressed hot copies.", double(state.hot.bytes())});
  g.push_back({"kiln_hot_set_entries", "Artifacts held as uncompressed hot copies.", double(state.hot.entries())});
  g.push_back({"kiln_torch_cache_memory_bytes", "Bytes of torch.compile cache values held in memory.",
               double(state.torch_values.bytes())});
  if (state.torch_deferred) {
    const auto q = state.torch_queue.stats();
    g.push_back({"kiln_torch_cache_deferred_queued_entries",
                 "torch.compile cache entries acknowledged and not yet stored (durability deferred).", double(q.entries)});
    g.push_back({"kiln_torch_cache_deferred_queued_bytes", "Bytes of the values queued (durability deferred).",
                 double(q.bytes)});
    g.push_back({"kiln_torch_cache_deferred_max_bytes", "torch_cache.deferred_max_bytes: past it a SET waits.",
                 double(q.max_bytes)});
    g.push_back({"kiln_torch_cache_deferred_written_total", "Queued torch.compile cache entries stored.",
                 double(q.written), true});
    g.push_back({"kiln_torch_cache_deferred_superseded_total",
                 "Queued entries replaced by a newer value of their key before their write.", double(q.superseded), true});
    g.push_back({"kiln_torch_cache_deferred_failed_total",
                 "Acknowledged entries the store refused (full disk, quota, read-only, I/O error): dropped.",
                 double(q.failed), true});
  }
  g.push_back({"kiln_uptime_seconds", "Seconds since kilnd started.", double(state.uptime_s())});
  protocol::GpuReport b;  // what the build service knows: its counters and durations
  if (state.builds) {
    b = state.builds->gpu_report();
    std::uint64_t queued = 0, running = 0;
    for (const auto& s : b.slots) {
      queued += s.queued;
      running += s.running;
    }
    g.push_back({"kiln_builds_queued", "Builds waiting for a build slot.", double(queued)});
    g.push_back({"kiln_builds_running", "Builds running now.", double(running)});
    g.push_back({"kiln_builds_started_total", "Builds started since kilnd started.", double(b.builds_started), true});
    g.push_back({"kiln_builds_succeeded_total", "Builds that stored their artifact.", double(b.builds_succeeded), true});
    g.push_back({"kiln_builds_failed_total", "Builds that failed (worker error, check against eager, timeout).",
                 double(b.builds_failed), true});
    g.push_back({"kiln_builds_cancelled_total", "Builds stopped because nobody waited for them any more.",
                 double(b.builds_cancelled), true});
    g.push_back({"kiln_builds_available", "1 when this node can build a miss, else 0 (kilnctl status says why).",
                 b.builds_note.empty() ? 1.0 : 0.0});
  }
  std::string text = state.metrics.render(g, state.builds ? &b.build_seconds : nullptr);
  if (state.fleet) {
    auto job = [this] { return state.fleet->metrics_text(); };
    text += co_await offload(state.pool, job);
  }
  co_return text;
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() {
  if (impl_ && impl_->created_socket && !impl_->draining) ::unlink(impl_->socket_path.c_str());
}

Result<std::unique_ptr<Server>> Server::create(const Config& config, storage::Store& store, BuildService* builds,
                                               int listen_fd, FleetService* fleet) {
  KILN_TRY(validate(config));
  auto access = AccessPolicy::make(config.access);
  if (!access) return std::move(access).error();
  auto impl = std::make_unique<Impl>(config, std::move(*access), store, builds);
  impl->state.set_node(detect_node_fields(config.node));
  if (config.builds_probing) impl->state.set_builds_probing();
  impl->state.builds_off_reason = config.builds_off_reason;
  impl->state.fleet = fleet;
  impl->socket_path = config.socket;
  UniqueFd fd;
  if (listen_fd >= 0) {
    fd.reset(listen_fd);
  } else {
    auto made = create_unix_listener(config.socket, config.access);
    if (!made) return std::move(made).error();
    fd = std::move(*made);
    impl->created_socket = true;
  }
  error_code ec;
  impl->acceptor.assign(asio::local::stream_protocol(), fd.get(), ec);
  if (ec) return make_error(Errc::io_error, "cannot use the listening socket: " + ec.message());
  // "@socket" in [access] names the socket file's group, known once the socket exists
  // (created here, or by systemd's SocketGroup=).
  impl->socket_group = socket_file_group(fd.get());
  if (impl->socket_group) {
    auto with_group = AccessPolicy::make(config.access, impl->socket_group);
    if (!with_group) return std::move(with_group).error();
    impl->state.set_config(impl->state.config(), std::make_shared<const AccessPolicy>(std::move(*with_group)));
  }
  fd.release();
  if (!config.metrics_listen.empty()) {
    Impl* raw = impl.get();
    auto m = MetricsHttp::start(impl->io, config.metrics_listen, [raw] { return raw->render_metrics(); });
    if (!m) return std::move(m).error();
    impl->metrics_http = std::move(*m);
    impl->state.metrics_url = impl->metrics_http->url();
  }
  if (config.torch_cache.enabled()) {
    auto t = TorchCacheListener::create(impl->io, impl->loops, impl->state, config);
    if (!t) return std::move(t).error();
    impl->torch_cache = std::move(*t);
  }
  if (impl->state.torch_deferred) {
    auto* state = &impl->state;
    impl->state.torch_queue.start(deferred_writer(impl->state),
                                  [state](const Digest& d, std::uint64_t n) { state->note_hot_hit(d, n); });
  }
  Impl* raw = impl.get();
  impl->state.reload = [raw] { return raw->reload(); };
  impl->state.on_last_connection_closed = [raw] {
    asio::post(raw->strand, [raw] {
      if (raw->draining && raw->state.open_connections.load() == 0) raw->finish_drain();
    });
  };
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Status Server::run(const RunOptions& options) {
  auto& im = *impl_;
  auto cfg = im.state.config();
  im.loops.start(cfg->io_threads, "kilnd-io", std::chrono::microseconds(cfg->io_poll_us));
  if (options.handle_signals) {
    im.signals.add(SIGTERM);
    im.signals.add(SIGINT);
    im.signals.add(SIGHUP);
    asio::co_spawn(im.strand, im.signal_loop(), asio::detached);
  }
  asio::co_spawn(im.strand, im.accept_loop(), asio::detached);
  if (im.torch_cache) im.torch_cache->start();
  spdlog::info("kilnd listening on {} (store {}, {} io threads, {} store threads{}{}{})", im.socket_path.string(),
               cfg->store.string(), cfg->io_threads, cfg->store_threads, im.state.builds ? "" : ", builds unavailable",
               im.state.metrics_url.empty() ? "" : ", metrics " + im.state.metrics_url,
               !cfg->torch_cache.enabled() ? ""
               : im.state.torch_deferred ? ", torch cache durability deferred"
                                         : ", torch cache durability sync");
  {
    std::lock_guard lock(im.notify_mu);
    im.ready_sent = true;
    sd_notify("READY=1\nSTATUS=serving on " + im.socket_path.string() +
              (im.state.builds_ready() ? "" : "; builds: probing the GPUs and the build worker"));
  }
  im.io.run();  // until drained: every kiln connection has ended (finish_drain)
  // Torch cache connections were closed by the drain; each loop's thread returns once
  // what is left on it has run.
  im.loops.stop_when_idle();
  im.loops.join();
  if (im.state.torch_deferred) {
    // Every acknowledged torch cache entry reaches the store before it is let go.
    const auto q = im.state.torch_queue.stats();
    if (q.entries) spdlog::info("torch cache: writing {} queued entries ({} bytes) before stopping", q.entries, q.bytes);
    im.state.torch_queue.stop();
  }
  im.state.pool.join();
  spdlog::info("kilnd stopped cleanly");
  return {};
}

void Server::request_stop() {
  asio::post(impl_->strand, [im = impl_.get()] { im->begin_drain("stop requested"); });
}

Status Server::reload() { return impl_->reload(); }

const std::filesystem::path& Server::socket_path() const { return impl_->socket_path; }

void Server::builds_probed(const NodeFields& node) {
  impl_->state.builds_probed(detect_node_fields(node));
  std::lock_guard lock(impl_->notify_mu);
  if (impl_->ready_sent) sd_notify("STATUS=serving on " + impl_->socket_path.string() + "; builds ready");
}

std::string Server::metrics_url() const { return impl_->state.metrics_url; }

}  // namespace kiln::daemon
