// kiln/daemon/server.hpp — the kilnd socket server: a Unix socket speaking
// schema/protocol.md in front of a Store.
//
// Threads (Boost.Asio, C++20 coroutines): Config::io_threads threads serve client
// connections, of both the kiln socket and the torch cache socket; each runs its own event
// loop, and a connection stays on the one it was given at accept, so a request is read,
// answered and replied to on one thread. The thread that calls run() accepts, handles
// signals, drains and serves the metrics endpoint. A pool of Config::store_threads does
// store work, so disk and SQLite never block a loop.
// Lifecycle: create() binds the socket (or adopts a systemd socket, LISTEN_FDS); run()
// serves until request_stop() or SIGTERM/SIGINT (with RunOptions::handle_signals), then
// drains: stops accepting, answers new requests with `unavailable`, finishes requests in
// flight (at most limits.drain_timeout), removes the socket file it created, and returns.
// SIGHUP (or reload()) re-reads the config file: access lists, limits, log level and the
// hot-set size take effect at once; socket, store and thread counts need a restart.
//
// Thread safety: request_stop() and reload() may be called from any thread; run() once.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "kiln/daemon/build_service.hpp"
#include "kiln/daemon/config.hpp"
#include "kiln/daemon/fleet_service.hpp"
#include "kiln/result.hpp"
#include "kiln/storage/store.hpp"

namespace kiln::daemon {

struct RunOptions {
  bool handle_signals = true;   // SIGTERM/SIGINT drain, SIGHUP reload
};

class Server {
 public:
  // Binds the socket (creating its folder; replacing a stale socket file; busy if
  // another kilnd answers on it) or, when `listen_fd` >= 0, adopts that listening socket.
  // Starts the metrics endpoint if configured. `store` and `builds` are not owned and must
  // outlive the Server; `builds` may be null (build operations answer `unsupported`).
  // `fleet` (not owned, may be null): a GET miss that is not to be built looks in the
  // fleet's registry before answering "not found"; STATUS and /metrics include it.
  // Errors: invalid_argument (config, unknown user/group in [access]), busy, io_error,
  // permission_denied (cannot create the socket or chown it).
  static Result<std::unique_ptr<Server>> create(const Config& config, storage::Store& store,
                                                BuildService* builds = nullptr, int listen_fd = -1,
                                                FleetService* fleet = nullptr);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Serves until stopped and drained (see above). Returns ok after a clean drain.
  Status run(const RunOptions& options = {});
  // Starts a drain, like SIGTERM. Safe from any thread and from signal-free contexts.
  void request_stop();
  // Re-reads the config file, like SIGHUP. The old configuration stays on error.
  Status reload();

  // For a Server created with config.builds_probing: the build service's start-up probes
  // have ended, and `node` is what they found (kilnd's own detection fills what they left
  // empty). Requests that waited for them go on. Any thread; once.
  void builds_probed(const NodeFields& node);

  const std::filesystem::path& socket_path() const;
  // "http://127.0.0.1:9464/metrics" with the bound port, or "" when metrics are off.
  std::string metrics_url() const;

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Node fields of the machine kilnd runs on: host fields detected (platform, machine,
// cpu_isa), the rest from `configured` ([node] in kilnd.toml); configured values win.
NodeFields detect_node_fields(const NodeFields& configured);

// systemd socket activation: the listening fd passed in LISTEN_FDS for this pid, or -1.
// invalid_argument when LISTEN_FDS passes more than one socket.
Result<int> systemd_listen_fd();

}  // namespace kiln::daemon
