// kilnd's main(): command line, configuration, logging, store, server.
#include "kiln/daemon/kilnd.hpp"

#include <grp.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <mutex>

#include <CLI/CLI.hpp>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "kiln/builds/daemon_builds.hpp"  // [builds edit]
#include "kiln/builds/worker_sandbox.hpp"
#include "kiln/daemon/config.hpp"
#include "kiln/daemon/server.hpp"
#include "kiln/fleet/etcd_coordinator.hpp"
#include "kiln/fleet/fleet.hpp"
#include "kiln/fleet/fleet_build_service.hpp"
#include "kiln/storage/store.hpp"
#include "access.hpp"

namespace kiln::daemon {

namespace {

constexpr const char* kFooter = R"(
Defaults (a user running kilnd by hand / root or the system service):
  socket   $XDG_RUNTIME_DIR/kiln/kiln.sock (mode 0600)  /  /run/kiln/kiln.sock (mode 0660)
  store    $XDG_CACHE_HOME/kiln (~/.cache/kiln)          /  /var/lib/kiln
  config   $XDG_CONFIG_HOME/kiln/kilnd.toml, if present  /  /etc/kiln/kilnd.toml, if present
Flags override the config file; the file overrides the defaults.

Config file (TOML; ops/kilnd.toml documents every option with its default):
  socket, store, io_threads (2), io_poll_us (50), store_threads (4), hot_set_bytes ("2GiB"),
  metrics_listen ("" = off; loopback only, e.g. "127.0.0.1:9464"), log_level ("info")
  [storage]  quota, hard_limit (sizes, 0 = none), zstd_level (3)
  [limits]   max_frame_bytes ("4MiB"), max_connections (1024), max_inflight (64),
             idle_timeout_s (300), frame_timeout_s (10), request_timeout_s (60),
             drain_timeout_s (30), max_artifact_bytes ("16GiB"),
             inline_max_bytes ("64KiB": GET "auto" sends smaller artifacts inline),
             client_memory ("1GiB": bytes held for all clients together)
  [access]   socket_mode, socket_group, trust_owner (true: kilnd's own user and root
             are admin), read_users (["*"]), read_groups, build_users, build_groups
             (["@socket"]: the socket's group), put_users, put_groups, admin_users,
             admin_groups  — names or numeric ids; "*" = anyone
  [node]     gpu_arch, gpu_name, torch_version, torch_git, cuda_version,
             triton_version, platform, machine, cpu_isa ("this node" for keys)
  [fleet]    registry ("" = no fleet), repository ("kiln"), basic_auth_file, token_file,
             ca_file, client_cert_file, client_key_file, pull (true), push (true),
             signing_key_file, signing_key_name (file stem), trusted_keys
             (["name:base64"]), require_signatures (true), connect_timeout_s (10),
             io_timeout_s (30), push_retry_min_s (1), push_retry_max_s (300), pull_threads (4),
             coordinator ([] = none; etcd "http://host:port": one build per key across the
             fleet), coordinator_prefix ("kiln"), node_name (host name), lease_ttl_s (10),
             coordinator_timeout_ms (1000), poll_max_ms (1000), hedge_factor (4; 0 = never),
             expected_build_s (600)
  [torch_cache] socket ("" = off), listen ("" = off; loopback only), password (""),
             max_value_bytes ("512MiB"), memory_bytes ("512MiB"), durability ("deferred";
             or "sync"), deferred_max_bytes ("256MiB"), reply_timeout_ms (3000), fleet
             (true: shared through [fleet], signed): torch.compile's remote caches
             over the Redis protocol (GET needs read, SET build; entries trusted per writer)
  [builds]   enabled (true), worker (["python3", ".../kiln_worker"]), work_dir
             (<store>/builds), probe_gpus (true), builds_per_gpu (2),
             build_timeout_s (1800), probe_timeout_s (180), source_check_timeout_s
             (600: the worker's hash op on a source being registered), failure_ttl_s (600),
             max_log_bytes (1048576), keep_failed_work (false), shared_compiler_cache (true), cancel_unwanted
             (true: stop a build once nobody waits for it), [[builds.slots]]
             name, gpu_arch, gpu_name, visible_device (replace the probed GPUs)

Roles (cumulative; SECURITY.md): read (get, stat, list, stats, status, build-status,
logs), build (put-source, build, prewarm: what lands is built by kilnd's own worker),
put (put, import: bytes made elsewhere that others load; trusted publishers only),
admin (delete, pin, unpin, evict, verify, gc, reload).
Peers are identified by SO_PEERCRED; refusals are answered and logged.

Signals: SIGTERM/SIGINT drain in-flight requests and exit (a second one closes at
once); SIGHUP re-reads the config file (access lists, limits, log level, hot set).
Socket activation: with LISTEN_FDS/LISTEN_PID (systemd kilnd.socket) kilnd serves
the passed socket instead of creating one.
Logs: one line per request on stderr (journald under systemd).
Exit status: 0 clean stop, 1 could not start, 2 usage error.
)";

// "<N>" before a line on stderr is the journal's priority (sd-daemon(3)), so
// `journalctl -p warning` finds kilnd's warnings and errors.
class JournalPriority final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    char p = '6';
    switch (msg.level) {
      case spdlog::level::trace:
      case spdlog::level::debug: p = '7'; break;
      case spdlog::level::info: p = '6'; break;
      case spdlog::level::warn: p = '4'; break;
      case spdlog::level::err: p = '3'; break;
      case spdlog::level::critical: p = '2'; break;
      default: break;
    }
    const char text[3] = {'<', p, '>'};
    dest.append(text, text + 3);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<JournalPriority>(); }
};

// systemd.exec(5): JOURNAL_STREAM holds the device and inode ("DEV:INO") of the stream
// systemd connected stderr to; a process whose stderr is still that stream logs to the
// journal. Its mere presence is not enough: a child of a service inherits the variable
// while its stderr goes elsewhere (a pipe, a file, a terminal).
bool stderr_is_journal() {
  const char* env = std::getenv("JOURNAL_STREAM");
  if (env == nullptr) return false;
  unsigned long long dev = 0, ino = 0;
  char tail = 0;
  if (std::sscanf(env, "%llu:%llu%c", &dev, &ino, &tail) != 2) return false;
  struct stat st {};
  if (::fstat(STDERR_FILENO, &st) != 0) return false;
  return static_cast<unsigned long long>(st.st_dev) == dev && static_cast<unsigned long long>(st.st_ino) == ino;
}

void setup_logging(const std::string& level) {
  auto logger = spdlog::stderr_logger_mt("kilnd");
  spdlog::set_default_logger(logger);
  // Under systemd the journal stamps each line and reads its priority; elsewhere kilnd
  // stamps them.
  if (stderr_is_journal()) {
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<JournalPriority>('*').set_pattern("%*%l %v");
    spdlog::set_formatter(std::move(formatter));
  } else {
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%f%z %l %v");
  }
  spdlog::set_level(spdlog::level::from_str(level));
  spdlog::flush_on(spdlog::level::info);
}

// What the store's start-up recovery repaired, one line per artifact: the operator reads
// this (and the first `kilnctl verify`) to know exactly what was dropped or quarantined.
void log_recovery(const std::filesystem::path& root, const storage::VerifyReport& r) {
  if (!r.found_anything()) return;
  spdlog::warn("store {}: start-up recovery quarantined {} artifact(s) (blob file damaged), dropped {} (blob file "
               "missing), removed {} orphan blob file(s), moved {} foreign file(s) to quarantine/",
               root.string(), r.corrupt.size(), r.missing_removed, r.orphans_removed, r.foreign_moved);
  for (const auto& d : r.corrupt) spdlog::warn("store: quarantined {} (blob file damaged; now a miss)", d.hex());
  for (const auto& d : r.missing) spdlog::warn("store: dropped {} (blob file missing; now a miss)", d.hex());
}

}  // namespace

int kilnd_main(int argc, char** argv) {
  CLI::App app{"kilnd — the kiln compiled-artifact cache daemon.\n"
               "Serves compiled PyTorch blocks to local processes over a Unix socket (schema/protocol.md)."};
  app.footer(kFooter);
  std::string socket, store, config_file, log_level, metrics, hot_set;
  unsigned io_threads = 0, store_threads = 0;
  bool check = false, version = false;
  app.add_option("--socket", socket, "Unix socket to listen on");
  app.add_option("--store", store, "Store folder (created if missing)");
  app.add_option("--config", config_file, "TOML config file (must exist when given)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off");
  app.add_option("--metrics", metrics, "Serve Prometheus metrics on this loopback host:port");
  app.add_option("--hot-set", hot_set, "Memory for uncompressed hot copies, e.g. 2GiB");
  app.add_option("--io-threads", io_threads, "Threads serving client connections, one event loop each")->check(CLI::Range(1, 64));
  app.add_option("--store-threads", store_threads, "Threads for store work")->check(CLI::Range(1, 256));
  app.add_flag("--check-config", check, "Load and validate the configuration, print where it points, and exit");
  app.add_flag("--version", version, "Print the version and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (version) {
    std::printf("kilnd %s (protocol %d)\n", KILN_VERSION, static_cast<int>(protocol::kVersion));
    return 0;
  }

  Config config = default_config();
  std::filesystem::path file = config_file.empty() ? default_config_path() : std::filesystem::path(config_file);
  if (!config_file.empty() || std::filesystem::exists(file)) {
    if (auto st = apply_toml_file(config, file); !st) {
      std::fprintf(stderr, "kilnd: %s\n", st.error().to_string().c_str());
      return 2;
    }
  }
  if (!socket.empty()) config.socket = socket;
  if (!store.empty()) config.store = store;
  if (!log_level.empty()) config.log_level = log_level;
  if (!metrics.empty()) config.metrics_listen = metrics;
  if (io_threads) config.io_threads = io_threads;
  if (store_threads) config.store_threads = store_threads;
  if (!hot_set.empty()) {
    auto n = parse_size(hot_set);
    if (!n) {
      std::fprintf(stderr, "kilnd: --hot-set: %s\n", n.error().message.c_str());
      return 2;
    }
    config.hot_set_bytes = *n;
  }
  if (auto st = validate(config); !st) {
    std::fprintf(stderr, "kilnd: %s\n", st.error().to_string().c_str());
    return 2;
  }
  // [builds] has the scheduler's reader; run it here too, so that --check-config refuses
  // exactly what kilnd refuses, and a bad section stops kilnd before it creates anything.
  auto builds_config = build::default_builds_config(config.store);
  if (config.config_file) {
    if (auto st = build::apply_builds_toml_file(builds_config, *config.config_file); !st) {
      std::fprintf(stderr, "kilnd: %s\n", st.error().to_string().c_str());
      return 2;
    }
  }
  // [fleet] likewise (daemon/fleet reads it): a bad section stops kilnd before it starts.
  fleet::FleetConfig fleet_config;
  if (config.config_file) {
    if (auto st = fleet::apply_fleet_toml_file(fleet_config, *config.config_file); !st) {
      std::fprintf(stderr, "kilnd: %s\n", st.error().to_string().c_str());
      return 2;
    }
  }
  // Names in [access] are resolved here too, so --check-config catches an unknown user or
  // group (kilnd resolves them again when it starts serving, and at every reload).
  if (auto policy = AccessPolicy::make(config.access); !policy) {
    std::fprintf(stderr, "kilnd: %s\n", policy.error().to_string().c_str());
    return 2;
  }
  if (!config.access.socket_group.empty() && ::getgrnam(config.access.socket_group.c_str()) == nullptr) {
    std::fprintf(stderr, "kilnd: access.socket_group: unknown group \"%s\"\n", config.access.socket_group.c_str());
    return 2;
  }
  if (check) {
    std::printf("socket = %s\nstore = %s\nconfig = %s\n", config.socket.c_str(), config.store.c_str(),
                config.config_file ? config.config_file->c_str() : "(none)");
    // The worker is where builds come from: say which one, and whether it is there (a
    // missing one is not an error: the node then serves without building).
    std::string worker;
    for (const auto& a : builds_config.scheduler.worker.argv) worker += (worker.empty() ? "" : " ") + a;
    const auto& worker_argv = builds_config.scheduler.worker.argv;
    std::error_code ec;
    const bool found = worker_argv.size() < 2 || std::filesystem::exists(worker_argv.back(), ec);
    std::printf("builds = %s\nworker = %s%s\n", builds_config.enabled ? "enabled" : "disabled", worker.c_str(),
                found ? "" : "  (not found: this node will not build)");
    std::printf("worker_sandbox = %s\n", build::describe_sandbox_support(builds_config.scheduler.worker.sandbox).c_str());
    return 0;
  }
  setup_logging(config.log_level);
  // What confines the workers on this kernel (SECURITY.md): a part the kernel lacks is said here.
  if (builds_config.enabled)
    spdlog::info("builds: worker sandbox {}", build::describe_sandbox_support(builds_config.scheduler.worker.sandbox));

  // Hits hand out descriptors and hot copies hold some: use the hard limit, not the
  // shell's soft default of 1024.
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &nofile);
  }

  auto listen_fd = systemd_listen_fd();
  if (!listen_fd) {
    spdlog::critical("{}", listen_fd.error().to_string());
    return 1;
  }
  if (*listen_fd >= 0) spdlog::info("socket activation: serving the socket systemd passed (fd {})", *listen_fd);

  storage::StoreOptions so;
  so.root = config.store;
  so.quota_bytes = config.store_options.quota_bytes;
  so.hard_limit_bytes = config.store_options.hard_limit_bytes;
  so.zstd_level = config.store_options.zstd_level;
  // A build's push is queued in the same transaction that stores it.
  so.push_outbox = fleet_config.enabled() && fleet_config.push;
  auto opened = storage::Store::open(so);
  if (!opened) {
    spdlog::critical("cannot open the store at {}: {}", config.store.string(), opened.error().to_string());
    return 1;
  }
  std::unique_ptr<storage::Store> the_store = std::move(*opened);
  log_recovery(config.store, the_store->recovery_report());

  // The fleet-wide build coordinator: destroyed after the builds, whose last callbacks
  // (cancelled, at shutdown) still reach it; stopped before the Fleet (below).
  std::unique_ptr<fleet::EtcdCoordinator> coordinator;
  // [builds edit] The build scheduler (daemon/builds/, kiln::build): probes the GPUs and the
  // worker's toolchain on a thread of its own while kilnd serves, then serves build
  // operations. "This node" is what it found (Server::builds_probed).
  // Only the configured node fields: the worker's probe fills the rest as its torch sees
  // them (cpu_isa exactly); kilnd's own detection fills what is still empty (Server).
  auto builds = build::start_daemon_builds(config.config_file, config.store, *the_store, config.node);
  if (!builds) {
    spdlog::critical("cannot start builds: {}", builds.error().to_string());
    return 1;
  }
  config.node = builds->node;
  config.builds_off_reason = builds->off_reason;
  config.builds_probing = static_cast<bool>(builds->when_probed);

  // The fleet tier (daemon/fleet/, kiln::fleet): a miss looks in the registry before a
  // build; builds are signed and pushed. Destroyed before the builds it wraps.
  // Declared first, destroyed last: the fleet's threads may still call it while they stop.
  std::unique_ptr<BuildService> fleet_builds;
  std::unique_ptr<fleet::Fleet> the_fleet;
  BuildService* build_service = builds->service.get();
  if (fleet_config.enabled()) {
    auto f = fleet::Fleet::start(fleet_config, *the_store);
    if (!f) {
      spdlog::critical("cannot start the fleet tier: {}", f.error().to_string());
      return 1;
    }
    the_fleet = std::move(*f);
    if (build_service && !fleet_config.coordinator.empty()) {
      const auto& sched = builds_config.scheduler;
      auto c = fleet::EtcdCoordinator::start(
          fleet::coordinator_options(fleet_config, std::chrono::duration_cast<std::chrono::seconds>(sched.build_timeout),
                                     sched.failure_ttl),
          *the_fleet);
      if (!c) {
        spdlog::critical("cannot start the fleet's build coordinator: {}", c.error().to_string());
        return 1;
      }
      coordinator = std::move(*c);
    }
    if (build_service) {
      fleet_builds = fleet::make_fleet_build_service(*build_service, *the_fleet, coordinator.get());
      build_service = fleet_builds.get();
    }
  }
  // Stops the coordinator's threads before the Fleet they call goes.
  struct StopCoordinator {
    fleet::EtcdCoordinator* c;
    ~StopCoordinator() {
      if (c) c->stop();
    }
  } stop_coordinator{coordinator.get()};

  auto server = Server::create(config, *the_store, build_service, *listen_fd, the_fleet.get());
  if (!server) {
    spdlog::critical("cannot start: {}", server.error().to_string());
    return 1;
  }
  // The probes end on their own thread, maybe after the server has stopped (the build
  // service, destroyed after the server, waits for them): the server is told only while
  // it exists.
  struct ProbedSink {
    std::mutex mu;
    Server* server = nullptr;  // guarded by mu
  };
  auto sink = std::make_shared<ProbedSink>();
  sink->server = server->get();
  struct Detach {
    std::shared_ptr<ProbedSink> s;
    ~Detach() {
      std::lock_guard lock(s->mu);
      s->server = nullptr;
    }
  } detach{sink};
  if (builds->when_probed)
    builds->when_probed([sink](const NodeFields& node) {
      std::lock_guard lock(sink->mu);
      if (sink->server) sink->server->builds_probed(node);
    });
  auto st = (*server)->run();
  if (!st) {
    spdlog::critical("{}", st.error().to_string());
    return 1;
  }
  return 0;
}

}  // namespace kiln::daemon
