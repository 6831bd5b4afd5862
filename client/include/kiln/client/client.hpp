// kiln/client/client.hpp — libkiln: talk to the node's kilnd over its Unix socket.
//
//   auto client = kiln::client::Client::connect();           // KILN_SOCKET or the default
//   if (!client) { std::cerr << client.error().to_string(); return; }
//   auto hit = client->get(key);                              // Result<optional<Artifact>>
//   if (hit && *hit) loader.load((*hit)->path());             // "/proc/self/fd/N"
//
// Errors: every call returns kiln::Result. "Not found" is an empty optional, never an
// error, for get and stat; remove/pin/unpin return false for a missing entry.
// - Daemon not running, socket missing, or the connection lost (the daemon restarted,
//   crashed, or is draining on SIGTERM): the call fails at once with Errc::unavailable
//   and a message naming the socket. Nothing is retried behind the caller's back (a put
//   may not be idempotent for the caller); the NEXT call connects again, so a caller that
//   wants to survive a daemon restart simply retries.
// - The daemon refused the operation for this user (SO_PEERCRED roles):
//   Errc::permission_denied, with the daemon's message naming the role needed.
// - Bad input (an incomplete key for put, a bad filter name): Errc::invalid_argument,
//   from the daemon or found locally before anything is sent.
// - Anything the daemon reports keeps its code (quota_exceeded, no_space, corrupt, busy,
//   timeout, ...) and message.
//
// Thread safety: a Client may be shared between threads; its calls are serialized on its
// one connection (one request in flight at a time). For parallel requests create one
// Client per thread: a Client is one socket and one small hello exchange.
//
// Node fields: a Key may leave its GPU, toolchain and host fields empty; the daemon
// fills them from the node it runs on. Returned ArtifactInfo keys are always complete.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kiln/client/artifact.hpp"
#include "kiln/client/source.hpp"
#include "kiln/digest.hpp"
#include "kiln/key.hpp"
#include "kiln/protocol/frame.hpp"
#include "kiln/result.hpp"

namespace kiln::client {

// How a hit's bytes reach this process.
enum class Transfer {
  // Default: small artifacts (up to the daemon's inline limit, 64 KiB unless configured)
  // arrive as bytes in the reply and live in the Artifact (Artifact::in_memory()); larger
  // ones as descriptors. For a few KiB a descriptor costs more system calls than the copy.
  // Against a kilnd without this ability: as `descriptor`.
  automatic,
  descriptor,  // the daemon passes a file descriptor (SCM_RIGHTS); no copy
  stream,      // the bytes are streamed in frames (for peers that cannot take a descriptor)
};

struct ConnectOptions {
  // Empty: $KILN_SOCKET if set, otherwise resolve_socket_path()'s search (the user's kilnd,
  // then the system's); when none answers, the error names every path tried.
  std::filesystem::path socket;
  Transfer transfer = Transfer::automatic;
  // Connecting and the hello exchange together. A daemon that accepts but does not answer
  // within it is reported as Errc::unavailable.
  std::chrono::milliseconds connect_timeout{5000};
  // Longest wait for any one reply (0 = no limit). On expiry the call returns
  // Errc::timeout and the connection is dropped (the next call reconnects).
  std::chrono::milliseconds request_timeout{0};
};

// The socket kilnd listens on by default, the same rule as kilnd's: for root (the system
// service) /run/kiln/kiln.sock; for another user $XDG_RUNTIME_DIR/kiln/kiln.sock, or
// /tmp/kiln-<uid>/kiln/kiln.sock when $XDG_RUNTIME_DIR is not set.
std::filesystem::path default_socket_path();
// Where a client looks when given no socket, in order: default_socket_path(), then (for a
// user other than root) the system kilnd's /run/kiln/kiln.sock.
std::vector<std::filesystem::path> default_socket_candidates();
// `explicit_path` if not empty, else $KILN_SOCKET if set and not empty, else the first of
// default_socket_candidates() that exists as a socket, else the first of them.
std::filesystem::path resolve_socket_path(const std::filesystem::path& explicit_path = {});

// What to look up: a key (node fields may be empty) or a complete key's digest.
using Lookup = std::variant<Key, Digest>;

// How an artifact came to the node, as stat/ls show it (ArtifactInfo::origin).
enum class PutOrigin {
  put,       // this client made it, or has it: "put"
  imported,  // it was made elsewhere and exported (kilnctl import): "import"
};

struct PutOptions {
  bool pin = false;             // pinned entries are never evicted
  double build_seconds = 0;     // how long the artifact took to build (shown by stat/ls)
  PutOrigin origin = PutOrigin::put;
  // When it was made (unix seconds), for an import: the exporter's; 0 = now. A kilnd older
  // than this field ignores it and origin, and records "put" and now.
  std::int64_t created_at = 0;
  // Called on the calling thread with the bytes sent so far and the total, after each
  // frame's worth (a progress display); may be empty.
  std::function<void(std::uint64_t sent, std::uint64_t total)> on_progress;
};

// List filters. Field names are kiln::key_field_names() ("region", "gpu_arch", ...);
// an unknown name is invalid_argument.
struct ListQuery {
  std::map<std::string, std::string> filters;
  std::optional<bool> pinned;
  std::int64_t accessed_before = 0;   // unix seconds; 0 = any
  std::size_t limit = 1000;           // page size; the daemon allows at most 10000
  std::size_t offset = 0;
};

struct ListPage {
  std::vector<ArtifactInfo> entries;
  // Offset of the next page, or nullopt when this page was the last.
  std::optional<std::size_t> next_offset;
};

struct Stats {
  // The store (protocol.md STATS "store").
  std::uint64_t entries = 0;
  std::uint64_t stored_bytes = 0;        // compressed, on the daemon's disk
  std::uint64_t uncompressed_bytes = 0;
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t evictions = 0;
  std::uint64_t quarantined = 0;
  std::uint64_t quota_bytes = 0;
  std::uint64_t hard_limit_bytes = 0;
  // Every counter as the daemon reported it, by group and name ("store" above, and
  // "daemon": uptime_s, connections, requests, hot_entries, hot_bytes, bytes_served, ...),
  // so a newer daemon's counters reach callers too.
  std::map<std::string, std::uint64_t> store;
  std::map<std::string, std::uint64_t> daemon;
};

// One GPU of the daemon's node, as the build scheduler's driver probe found it at start.
struct GpuInfo {
  std::uint32_t index = 0;            // the driver's ordinal
  std::string name;                   // "NVIDIA H200": a key's gpu_name there
  std::string arch;                   // "sm_90": a key's gpu_arch there
  std::uint64_t memory_bytes = 0;
  std::string uuid;
};

// One build slot (a GPU, or a slot configured in kilnd.toml) and its queue now.
struct BuildSlotInfo {
  std::string name;                   // "gpu0", "cpu0"
  std::string gpu_arch;               // the keys it builds
  std::string gpu_name;
  std::uint64_t running = 0;
  std::uint64_t queued = 0;
  std::uint64_t builds_at_once = 1;   // builds it runs at once ([builds] builds_per_gpu)
};

struct DaemonStatus {
  std::string server;                 // "kilnd/0.1.0"
  std::uint32_t protocol_version = 0;
  std::int64_t pid = 0;
  std::uint64_t uptime_s = 0;
  std::string socket;                 // as the daemon sees it
  std::string store;                  // the store folder
  std::map<std::string, std::string> node;  // gpu_arch, torch_version, ... ("" = unknown)
  std::vector<std::string> roles;     // what THIS peer may do: "read", "write", "admin"
  std::vector<std::string> capabilities;
  std::string metrics;                // Prometheus endpoint URL, empty if none
  bool draining = false;              // shutting down: new requests are refused
  std::vector<GpuInfo> gpus;          // empty: none found, or builds disabled
  std::string gpu_note;               // why `gpus` is empty (the probe's words)
  std::vector<BuildSlotInfo> build_slots;  // empty without builds
  std::string builds_unavailable;     // why this node builds nothing (a miss stays a miss); "" when it can
  bool builds_probing = false;        // kilnd started moments ago and still probes its GPUs and build worker
  std::string torch_cache_socket;     // torch.compile's cache listener (Unix socket); "" = none
  std::string torch_cache_listen;     // the same on TCP, "host:port"; "" = none
  std::string torch_cache_durability;  // "sync" (SET durable before +OK) or "deferred"; "" = not served
  std::uint64_t torch_cache_queued_entries = 0;  // deferred: acknowledged, not yet stored
  std::uint64_t torch_cache_queued_bytes = 0;    // their values' bytes
  bool torch_cache_fleet = false;     // its entries travel through the fleet's registry
  std::uint64_t verify_checked = 0;   // a VERIFY running now: blobs checked of verify_total
  std::uint64_t verify_total = 0;     // 0 = none running
  std::string fleet;                  // the fleet tier's state, STATUS's "fleet" object as JSON text
                                      // (schema/protocol.md); "" = no [fleet] configured
};

// What the daemon said in hello on the current connection.
struct ServerInfo {
  std::string server;
  std::uint32_t protocol_version = 0;
  std::vector<std::string> capabilities;
  std::vector<std::string> roles;
  std::map<std::string, std::string> node;
};

class Client {
 public:
  // Connects and says hello. unavailable: no daemon on the socket (the message names it
  // and says how to start one); unsupported: the daemon speaks no common protocol version.
  static Result<Client> connect(const ConnectOptions& options = {});

  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  ~Client();

  // The artifact, or nullopt on a miss. The Artifact owns its descriptor and outlives the
  // Client if kept.
  Result<std::optional<Artifact>> get(const Lookup& what);
  // How get() treats a miss.
  struct GetOptions {
    // Have kilnd build the artifact from the source registered for the key's model hash
    // and wait for it; concurrent askers share one build. Needs a Key (not a bare
    // digest). Errors: no_source (nothing registered for the model hash: `kilnctl source
    // add`), build_failed (also a failure kilnd remembers from a recent build: retry with
    // `kilnctl build --force`), unsupported (the node cannot build), timeout (wait passed;
    // the build goes on and a later get finds it).
    bool build_on_miss = false;
    std::chrono::milliseconds wait{0};  // 0 = until kilnd's build timeout
    // Not a use of the artifact (an export or backup): kilnd counts no hit or miss and
    // leaves its last access and LRU place unchanged.
    bool quiet = false;
  };
  Result<std::optional<Artifact>> get(const Lookup& what, const GetOptions& options);
  // Metadata only; no hit or miss counted.
  Result<std::optional<ArtifactInfo>> stat(const Lookup& what);

  // Stores `data` as the artifact for `key` (replacing one of the same key), streamed in
  // frames, so it need not fit a single message. The key may leave node fields empty.
  Result<ArtifactInfo> put(const Key& key, std::span<const std::byte> data, const PutOptions& options = {});
  // Same, reading `file` as it goes (never whole in memory). io_error if unreadable.
  Result<ArtifactInfo> put_file(const Key& key, const std::filesystem::path& file,
                                const PutOptions& options = {});

  // Registers `file` (a torch.export archive) as the source of `model_hash` (64 hex), read
  // as it goes (PUT_SOURCE; write role). A daemon that builds first runs its build worker's
  // hash op on the bytes: a file that hashes to another model hash is invalid_argument
  // (the message names both; nothing is stored), timeout when the hash op runs past the
  // daemon's source_check_timeout_s (schema/sources.md). The same bytes again are
  // accepted; other bytes under a hash that has a source are invalid_argument (sources are
  // never replaced). io_error if the file is unreadable; invalid_argument for a bad hash.
  // An empty `model_hash` asks the node to compute it (its build worker's hash op; the
  // returned SourceInfo holds it): a source of that hash already registered is returned as
  // is (the same program); unsupported from a node that cannot build (no worker to hash).
  Result<SourceInfo> put_source(const std::string& model_hash, const std::string& name,
                                const std::filesystem::path& file);

  // The registered sources (LIST_SOURCES; read role), a page at a time, ordered by model
  // hash. An empty page when none match. invalid_argument for a bad prefix (checked here,
  // before anything is sent) or a limit above the daemon's 10000.
  Result<SourcePage> list_sources(const SourceQuery& query = {});
  // The source registered under `model_hash` (64 lowercase hex), its bytes verified by the
  // daemon and handed over like a get() hit: a descriptor, or streamed with
  // Transfer::stream. Unlike get(), a missing source is an error: Errc::not_found, the
  // daemon's message naming the hash and how to register it (`kilnctl source add`).
  // invalid_argument for a malformed hash (checked here); corrupt when the stored archive
  // failed verification (the daemon quarantined it). The Source outlives the Client if kept.
  Result<Source> get_source(const std::string& model_hash);

  Result<ListPage> list(const ListQuery& query = {});
  // true if an entry existed and was removed.
  Result<bool> remove(const Lookup& what);
  // true if the entry exists (and is now pinned / unpinned).
  Result<bool> pin(const Lookup& what);
  Result<bool> unpin(const Lookup& what);
  Result<Stats> stats();
  Result<DaemonStatus> status();

  // Hello of the current connection (connecting first if there is none).
  Result<ServerInfo> server_info();

  // Any request with a single JSON reply (no chunks, no descriptor), e.g. EVICT, VERIFY,
  // GC, LOGS, BUILD_STATUS: `body` is its JSON (schema/protocol.md), the result the
  // reply's JSON. For commands the typed calls above do not cover yet; prefer those.
  Result<std::string> call(protocol::MsgType type, std::string_view json_body);

  // The socket this client talks to.
  const std::filesystem::path& socket_path() const;

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::client
