// kiln/daemon/config.hpp — kilnd's configuration: defaults, the TOML file, the command line.
//
// Precedence: command-line flags > the TOML file (--config, or the default path if it
// exists) > built-in defaults. The sample file ops/kilnd.toml documents every option.
// Defaults depend on who runs kilnd (default_config()):
//   a user:  socket $XDG_RUNTIME_DIR/kiln/kiln.sock (mode 0600), store $XDG_CACHE_HOME/kiln
//   root:    socket /run/kiln/kiln.sock (mode 0660), store /var/lib/kiln
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kiln/key.hpp"
#include "kiln/result.hpp"
#include "kiln/size.hpp"

namespace kiln::daemon {

// Who may do what (schema/protocol.md, "Roles"; SECURITY.md). Entries are user/group
// names or numeric ids; "*" in a users list means anyone who can open the socket, and
// kSocketGroup in a groups list the group the socket file belongs to (access.socket_group,
// or systemd's SocketGroup=). Roles are cumulative: admin > put > build > read.
//   read:  get what is stored;
//   build: register a weight-free source (the node hashes it) and have kilnd's own worker
//          build it; a torch.compile cache SET is filed under the writer and served to
//          the writer alone (and to those who trust it: put and admin writers are trusted);
//   put:   store bytes made elsewhere that other users' processes load: trusted publishers.
// Default: anyone who can open the socket reads; the socket's group builds.
inline constexpr const char* kSocketGroup = "@socket";
struct AccessConfig {
  std::uint32_t socket_mode = 0600;    // file mode of the socket: the first gate
  std::string socket_group;            // group to chown the socket to; "" = leave it
  bool trust_owner = true;             // kilnd's own uid and root are admin
  std::vector<std::string> read_users{"*"}, read_groups;
  std::vector<std::string> build_users, build_groups{kSocketGroup};
  std::vector<std::string> put_users, put_groups;
  std::vector<std::string> admin_users, admin_groups;
  // The file still had write_users / write_groups (the role before build and put split):
  // their entries were added to build_* (what an inference job needs; the old write also
  // let them put), and kilnd warns at start and reload until the file says which it means.
  bool legacy_write = false;
};

struct LimitsConfig {
  std::uint32_t max_frame_bytes = 4u << 20;
  std::uint32_t max_connections = 1024;
  std::uint32_t max_inflight = 64;                 // requests per connection
  std::chrono::milliseconds idle_timeout{300'000};  // no frame and nothing in flight
  std::chrono::milliseconds frame_timeout{10'000};  // a begun frame must complete
  // Gap between a put's chunks; a reply's write; a torch cache request, from its first byte.
  std::chrono::milliseconds request_timeout{60'000};
  std::chrono::milliseconds drain_timeout{30'000};  // SIGTERM: then close what is left
  std::uint64_t max_artifact_bytes = 16ull << 30;
  // GET "auto" sends artifacts up to this size inline instead of as a descriptor.
  std::uint32_t inline_max_bytes = 64u << 10;
  // Bytes held on behalf of clients on both sockets, all together (requests being
  // received, replies waiting to be written; kiln/torch_cache/memory_budget.hpp): a
  // request past it is refused. 0 = no limit. Reloadable.
  std::uint64_t client_memory_bytes = 1ull << 30;
};

struct StoreConfig {
  std::uint64_t quota_bytes = 0;        // soft quota, LRU eviction; 0 = none
  std::uint64_t hard_limit_bytes = 0;   // puts refused past it; 0 = none
  int zstd_level = 3;
};

// torch.compile's own remote caches, served over the Redis protocol (schema/torch-cache.md).
// Off unless a socket or a loopback address is given. Roles come from [access] (GET needs
// read, SET build); the socket file gets access.socket_mode and access.socket_group.
// Entries are trusted per writer (schema/torch-cache.md, "Who reads whose entries").
struct TorchCacheConfig {
  std::filesystem::path socket;        // Unix socket; "" = none
  std::string listen;                  // "127.0.0.1:6379"; "" = none; loopback only. TCP
                                       // peers have no credentials: they get the roles
                                       // [access] gives "*"
  std::string password;                // "" = no AUTH; else GET/SET need AUTH first
  std::uint64_t max_value_bytes = 512ull << 20;  // one SET's value (Redis's own limit)
  std::uint64_t memory_bytes = 512ull << 20;     // recently used values kept in memory
  // When a SET is answered +OK. sync: once the entry is durable in the store (written,
  // fsynced, renamed, indexed). deferred: once it is in memory and queued; one writer
  // thread stores queued entries in arrival order, so an acknowledged entry is lost only
  // if kilnd is killed or the machine fails before its write (Redis's appendfsync
  // everysec trade). Read at start only: a reload keeps the mode kilnd started with.
  // deferred by default: an entry lost is one recompile, and an fsync per SET put every
  // SET of a compile 8-13x behind Redis's (tests/bench/RESULTS-torch-cache.md).
  enum class Durability { sync, deferred };
  Durability durability = Durability::deferred;
  std::uint64_t deferred_max_bytes = 256ull << 20;  // values queued (deferred); past it a SET waits
  // The longest a GET or SET waits for the store (or, deferred, for room in the queue)
  // before it is answered anyway: a GET as a miss, a SET by closing the connection (never
  // an error reply). redis-py 8 gives up on a reply after 5 s with a TimeoutError, which
  // torch does not catch: the user's compile would fail. 0: no limit. Reloadable.
  std::chrono::milliseconds reply_timeout{3000};
  // With [fleet]: entries written here are signed and pushed to the registry (when [fleet]
  // push is on), and a GET that misses here looks in the registry within reply_timeout
  // (when [fleet] pull is on). Entries from the registry must carry a trusted signature
  // whatever fleet.require_signatures says: torch unpickles them. false: entries stay on
  // this node. Reloadable.
  bool fleet = true;

  bool enabled() const { return !socket.empty() || !listen.empty(); }
};

struct Config {
  std::filesystem::path socket;
  std::filesystem::path store;
  std::optional<std::filesystem::path> config_file;  // the file these values came from
  unsigned io_threads = 2;             // threads serving client connections (one event loop each)
  // How long a connection loop that just served a request keeps checking for the next one
  // before it sleeps (daemon/src/io_loops.hpp): saves a thread wake-up per request of a
  // client that sends one after another, for CPU time while traffic flows. 0: off.
  std::uint32_t io_poll_us = 50;
  unsigned store_threads = 4;          // thread pool for store (disk, SQLite) work
  std::uint64_t hot_set_bytes = 2ull << 30;  // uncompressed copies kept as memfds
  std::string metrics_listen;          // "127.0.0.1:9464"; "" = off; loopback only
  std::string log_level = "info";      // trace, debug, info, warn, error
  AccessConfig access;
  LimitsConfig limits;
  StoreConfig store_options;
  NodeFields node;                     // "this node"; empty fields are detected or left unknown
  std::string builds_off_reason;       // set by kilnd at start when it has no build service
  // Set by kilnd at start when its build service is still probing: requests that need
  // builds, or node fields the probes learn, wait until Server::builds_probed().
  bool builds_probing = false;
  TorchCacheConfig torch_cache;
};

// Built-in defaults for the current user (see above), before any file or flag.
Config default_config();
// Default config file path: $XDG_CONFIG_HOME/kiln/kilnd.toml for a user, /etc/kiln/kilnd.toml for root.
std::filesystem::path default_config_path();

// Applies a TOML file on top of `config`. Errors (invalid_argument) name the file, the
// option and what is wrong; on error `config` is unchanged. io_error if unreadable.
Status apply_toml_file(Config& config, const std::filesystem::path& file);
// Same, from text (for tests); `origin` names it in errors.
Status apply_toml_text(Config& config, std::string_view toml, std::string_view origin);

// Checks cross-field consistency (frame size within protocol limits, non-zero limits,
// metrics address is loopback, ...).
Status validate(const Config& config);

// Sizes are read by kiln::parse_size (kiln/size.hpp), the rule kilnctl follows too.
using kiln::parse_size;

}  // namespace kiln::daemon
