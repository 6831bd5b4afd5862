// kiln/protocol/messages.hpp — the JSON bodies of the wire protocol's messages
// (schema/protocol.md, "Messages"), as plain structs with an encoder and a decoder each.
//
// encode(x) returns the JSON text of a body. decode<T>(text) parses one; it never throws:
// malformed JSON is Errc::protocol_error, a missing/ill-typed field or a bad key is
// Errc::invalid_argument, with the field named ("get.key_digest: expected 64 hex chars").
// Unknown fields are ignored (forward compatibility). An empty text decodes as "{}".
// All functions are reentrant.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/digest.hpp"
#include "kiln/key.hpp"
#include "kiln/protocol/frame.hpp"
#include "kiln/result.hpp"

namespace kiln::protocol {

// ---- shared shapes -------------------------------------------------------------------

// Identifies an artifact: by digest, or by key fields (node fields may be empty: the
// daemon fills them). Exactly one is set in a valid ref.
struct KeyRef {
  std::optional<Digest> key_digest;
  std::optional<Key> key;
};

struct ArtifactMeta {
  Key key;
  Digest key_digest;
  Digest blob_digest;
  std::uint64_t size = 0;          // uncompressed
  std::uint64_t stored_size = 0;
  std::int64_t created_at = 0;
  std::int64_t last_access = 0;
  std::uint64_t hits = 0;
  double build_seconds = 0;
  bool pinned = false;
  // Where the node got it: "build", "put", "registry" (pulled from the fleet, signature
  // verified), "import"; "" = not recorded. signer: the trusted key that signed a pull.
  std::string origin;
  std::string signer;
};

struct SourceMeta {
  std::string model_hash;
  Digest blob_digest;
  std::uint64_t size = 0;
  std::int64_t created_at = 0;
  std::string name;
  std::uint64_t stored_size = 0;   // its blob file on the daemon's disk; 0 = not known
  std::vector<std::string> aliases;  // names later registrations of the same program gave it
};

using Filters = std::map<std::string, std::string>;

struct ErrorBody {
  Errc code = Errc::internal;   // unknown numeric codes decode as Errc::internal
  std::string message;
};

// ---- hello ---------------------------------------------------------------------------

struct HelloRequest {
  std::vector<std::uint32_t> versions{1};
  std::string client;
  std::vector<std::string> capabilities;   // "fd", "stream", "events"
  std::uint32_t max_frame = 4u << 20;
};
struct HelloReply {
  std::uint32_t version = 1;
  std::string server;
  std::vector<std::string> capabilities;
  std::uint32_t max_frame = 4u << 20;
  std::uint32_t max_inflight = 64;
  std::vector<std::string> roles;          // "read", "build", "put", "admin"
  std::map<std::string, std::string> node; // NodeFields by name
  std::uint32_t inline_max = 0;            // GET "auto" sends bytes up to this size; 0 = never
};

// ---- artifacts -----------------------------------------------------------------------

// automatic ("auto"): the daemon sends the bytes (as `stream`) when the artifact is at most
// its inline limit, a descriptor otherwise; the reply's `delivery` says which it chose.
enum class Delivery { fd, stream, automatic };
enum class OnMiss { none, build };

struct GetRequest {
  KeyRef ref;
  Delivery delivery = Delivery::fd;
  OnMiss on_miss = OnMiss::none;
  std::uint32_t wait_ms = 0;
  bool quiet = false;  // not a use: no hit or miss counted, last access unchanged (export)
};
struct GetReply {
  bool found = false;
  Delivery delivery = Delivery::fd;
  std::optional<Digest> key_digest;   // always set on a miss
  std::optional<ArtifactMeta> info;   // set on a hit
};

struct PutRequest {
  Key key;
  std::optional<std::uint64_t> size;
  std::optional<Digest> blob_digest;
  bool pin = false;
  double build_seconds = 0;
  // "put" (a client's own artifact) or "import" (kilnctl import: one exported elsewhere);
  // kilnd refuses any other (build, registry and torch_cache are its own to say).
  std::string origin = "put";
  std::optional<std::int64_t> created_at;  // unix seconds, kept from where it was made
};
struct PutReply {
  ArtifactMeta info;
};

struct StatRequest {
  KeyRef ref;
};
struct StatReply {
  bool found = false;
  std::optional<Digest> key_digest;
  std::optional<ArtifactMeta> info;
};

struct ListRequest {
  Filters filters;
  std::optional<bool> pinned;
  std::int64_t accessed_before = 0;
  std::uint32_t limit = 1000;        // decode clamps nothing; the server enforces <= 10000
  std::uint64_t offset = 0;
};
struct ListReply {
  std::vector<ArtifactMeta> items;
  std::optional<std::uint64_t> next_offset;
};

// DELETE, PIN and UNPIN share their request and reply shapes.
struct KeyOpRequest {
  KeyRef ref;
};
struct KeyOpReply {
  Digest key_digest;
};

struct StatsRequest {};
struct StatsReply {
  std::map<std::string, std::uint64_t> store;   // entries, stored_bytes, ... (protocol.md)
  std::map<std::string, std::uint64_t> daemon;  // uptime_s, connections, ...
};

// STATUS: one GPU the build scheduler's driver probe found.
struct GpuEntry {
  std::uint32_t index = 0;         // the driver's ordinal
  std::string name;                // "NVIDIA H200": a key's gpu_name
  std::string arch;                // "sm_90": a key's gpu_arch
  std::uint64_t memory_bytes = 0;
  std::string uuid;                // "GPU-8c1f..."
};
// STATUS: one build slot (a GPU, or a configured slot) and its queue depth now.
struct BuildSlotEntry {
  std::string name;                // "gpu0", "cpu0"
  std::string gpu_arch;
  std::string gpu_name;
  std::uint64_t running = 0;
  std::uint64_t queued = 0;
  std::uint64_t builds_at_once = 1;  // [builds] builds_per_gpu
};
// How long this node's worker builds took, for one key kind and outcome: a histogram over
// kBuildSecondsBounds, from a build's start on its slot to its artifact stored (or its
// failure). Metrics only (kilnd's kiln_build_duration_seconds); not on the wire.
inline constexpr std::array<double, 12> kBuildSecondsBounds = {0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600};
struct BuildSeconds {
  std::string kind;     // the key's kind: "aoti", "megacache"
  std::string outcome;  // "succeeded", "failed", "cancelled" (as kiln_builds_*_total)
  std::array<std::uint64_t, kBuildSecondsBounds.size() + 1> buckets{};  // per bound, then +Inf; not cumulative
  double sum = 0;
  std::uint64_t count = 0;
  void add(double seconds) {
    std::size_t b = 0;
    while (b < kBuildSecondsBounds.size() && seconds > kBuildSecondsBounds[b]) ++b;
    ++buckets[b];
    sum += seconds;
    ++count;
  }
};
// What the build service knows of the node's GPUs (BuildService::gpu_report()).
struct GpuReport {
  std::vector<GpuEntry> gpus;
  std::string note;                // why `gpus` is empty; "" when GPUs were found
  std::vector<BuildSlotEntry> slots;
  std::string builds_note;         // why this node cannot build; "" when it can
  // Builds since kilnd started (metrics only; not on the wire).
  std::uint64_t builds_started = 0, builds_succeeded = 0, builds_failed = 0, builds_cancelled = 0;
  std::vector<BuildSeconds> build_seconds;  // one per kind and outcome seen (metrics only)
};

struct StatusRequest {};
struct StatusReply {
  std::string server;
  std::uint32_t version = 1;
  std::int64_t pid = 0;
  std::uint64_t uptime_s = 0;
  std::string socket;
  std::string store;
  std::map<std::string, std::string> node;
  std::vector<std::string> roles;
  std::vector<std::string> capabilities;
  std::optional<std::string> metrics;
  bool draining = false;
  std::vector<GpuEntry> gpus;              // empty: none found (gpu_note says why)
  std::string gpu_note;
  std::vector<BuildSlotEntry> build_slots;
  std::string builds_note;                 // why this node builds nothing; "" when it can build
  bool builds_probing = false;             // the build service's start-up probes still run
  // torch.compile's cache listener (schema/torch-cache.md): its Unix socket and/or TCP
  // address; "" = not served.
  std::string torch_cache_socket;
  std::string torch_cache_listen;
  // When its SETs are acknowledged: "sync" or "deferred" ("" = not served); with
  // "deferred", the entries acknowledged and not yet stored, and their values' bytes.
  std::string torch_cache_durability;
  std::uint64_t torch_cache_queued_entries = 0;
  std::uint64_t torch_cache_queued_bytes = 0;
  // Whether its entries travel through the fleet's registry ([fleet] configured and
  // [torch_cache] fleet on; which way is the fleet's push and pull).
  bool torch_cache_fleet = false;
  // A VERIFY running now: blobs checked of verify_total; verify_total 0 = none running.
  std::uint64_t verify_checked = 0;
  std::uint64_t verify_total = 0;
  // The fleet tier's state as JSON object text (schema/protocol.md, "fleet"); "" = no fleet.
  std::string fleet;
};

// ---- admin ---------------------------------------------------------------------------

struct EvictRequest {
  std::optional<std::uint64_t> target_bytes;
  Filters filters;
  std::int64_t accessed_before = 0;
  std::uint64_t older_than_s = 0;
  bool dry_run = false;        // report what would go; remove nothing
};
struct EvictReply {
  std::uint64_t evicted = 0;   // removed (or, on a dry run, that would be removed)
  std::vector<ArtifactMeta> removed;
  std::uint64_t freed_bytes = 0;
  std::uint64_t pinned_kept = 0;
  bool dry_run = false;
};

struct VerifyRequest {};
struct VerifyReply {
  std::uint64_t checked = 0;
  std::vector<Digest> corrupt;
  std::uint64_t orphans_removed = 0;
  std::uint64_t missing_removed = 0;
  std::vector<Digest> missing;     // key digests dropped because their blob file was missing
  std::uint64_t foreign_moved = 0;  // files in blobs/ that were not kiln blobs, moved to quarantine/
};

struct GcRequest {};
struct GcReply {
  std::uint64_t evicted = 0;
  std::uint64_t stored_bytes = 0;
};

struct ReloadRequest {};
struct ReloadReply {
  bool reloaded = true;
};

struct CancelRequest {
  std::uint32_t request_id = 0;
};
struct CancelReply {
  bool cancelled = false;
};

// ---- sources and builds --------------------------------------------------------------

struct PutSourceRequest {
  std::string model_hash;  // empty: the node computes it (schema/protocol.md, PUT_SOURCE)
  std::string name;
  std::optional<std::uint64_t> size;
};
struct PutSourceReply {
  SourceMeta source;
};

struct ListSourcesRequest {
  std::string model_hash_prefix;     // 0..64 lowercase hex; checked by decode
  std::uint32_t limit = 1000;        // the server enforces <= 10000
  std::uint64_t offset = 0;
};
struct ListSourcesReply {
  std::vector<SourceMeta> items;
  std::optional<std::uint64_t> next_offset;
};

struct GetSourceRequest {
  std::string model_hash;            // 64 lowercase hex; checked by decode
  Delivery delivery = Delivery::fd;  // fd or stream
};
struct GetSourceReply {
  Delivery delivery = Delivery::fd;
  SourceMeta source;
};

struct BuildRequest {
  Key key;
  bool force = false;
  bool wait = true;
  std::uint32_t wait_ms = 0;
  bool idle = false;  // only without wait: built in the node's idle time (schema/protocol.md, BUILD)
};
struct BuildReply {
  std::string state;                  // "done" | "queued" | "running" | "present"
  Digest key_digest;
  std::optional<std::string> handle;
  std::optional<ArtifactMeta> info;
};

struct PrewarmRequest {
  std::vector<Key> keys;
  bool force = false;
  bool events = false;
};
struct PrewarmResult {
  std::optional<Digest> key_digest;   // absent when the key was invalid
  std::string state;                  // "present" | "queued" | "running" | "invalid" | "failed"
  std::optional<std::string> error;
};
struct PrewarmReply {
  std::string handle;
  std::vector<PrewarmResult> results;
};
// EVENT body of a prewarm stream.
struct BuildEvent {
  Digest key_digest;
  std::string state;                  // "running" | "done" | "failed"
  std::optional<std::string> error;
  std::optional<ArtifactMeta> info;
};

struct BuildStatusRequest {
  std::optional<std::string> handle;
  std::optional<Digest> key_digest;
};
struct BuildState {
  Digest key_digest;
  std::string state;                  // "queued" | "running" | "done" | "failed"
  std::int64_t queued_at = 0;
  std::optional<std::int64_t> started_at;
  std::optional<std::int64_t> finished_at;
  std::optional<std::string> progress;
  std::optional<std::string> error;
};
struct BuildStatusReply {
  std::vector<BuildState> builds;
};

struct LogsRequest {
  Digest key_digest;
};
struct BuildLog {
  Digest key_digest;
  std::int64_t started_at = 0;
  std::int64_t finished_at = 0;
  bool ok = false;
  std::string error;
  std::string log;
};
struct LogsReply {
  bool found = false;
  std::optional<BuildLog> record;
};

// ---- the fleet (admin): kilnctl push / pull / fleet prune -----------------------------

// One artifact an admin fleet transfer handled.
struct FleetItem {
  Digest key_digest;
  // push: "pushed" | "pending" (queued; the pusher retries it) | "failed";
  // pull: "pulled" | "local" (already stored) | "failed" | "matched" (dry run);
  // prune: "pruned" | "failed" | "matched" (dry run).
  std::string state;
  std::optional<std::string> error;
  std::optional<std::uint64_t> size;        // bytes, where known
  std::optional<std::int64_t> created_at;   // unix seconds (prune: the manifest's creation time)
};
// Filters: key field name -> exact value, as LIST's; decode refuses names that are not key fields.
struct FleetPushRequest {
  Filters filters;                // none = every stored artifact
  bool wait = true;               // reply once each is pushed or has failed once
};
struct FleetPushReply {
  std::uint64_t matched = 0;      // stored artifacts the filters selected
  std::uint64_t from_registry = 0;  // of those, pulled from the registry: not pushed back
  std::uint64_t queued = 0;
  std::uint64_t pushed = 0;       // wait: in the registry now
  std::uint64_t failed = 0;       // wait: an attempt failed; still queued, retried with backoff
  std::uint64_t bytes = 0;        // wait: bytes of the artifacts pushed
  std::vector<FleetItem> items;
};
struct FleetPullRequest {
  Filters filters;                // none = every artifact in the repository
  bool dry_run = false;           // list what would be pulled; pull nothing
  bool sources = true;            // also pull the sources of the pulled artifacts' model hashes
};
struct FleetPullReply {
  std::uint64_t listed = 0;       // artifact tags in the repository
  std::uint64_t matched = 0;
  std::uint64_t local = 0;        // of those, stored here already
  std::uint64_t pulled = 0;
  std::uint64_t failed = 0;       // refused or not reachable (each logged and counted)
  std::uint64_t sources_pulled = 0;
  std::uint64_t bytes = 0;
  bool dry_run = false;
  std::vector<FleetItem> items;
};
struct FleetPruneRequest {
  std::uint64_t older_than_s = 0; // required, > 0: manifests created before now minus this
  Filters filters;
  bool dry_run = false;
};
struct FleetPruneReply {
  std::uint64_t examined = 0;     // artifact manifests read
  std::uint64_t matched = 0;
  std::uint64_t pruned = 0;
  std::uint64_t failed = 0;
  bool dry_run = false;
  std::vector<FleetItem> items;
};

// ---- codec ---------------------------------------------------------------------------

std::string encode(const ErrorBody&);
std::string encode(const HelloRequest&);
std::string encode(const HelloReply&);
std::string encode(const GetRequest&);
std::string encode(const GetReply&);
std::string encode(const PutRequest&);
std::string encode(const PutReply&);
std::string encode(const StatRequest&);
std::string encode(const StatReply&);
std::string encode(const ListRequest&);
std::string encode(const ListReply&);
std::string encode(const KeyOpRequest&);
std::string encode(const KeyOpReply&);
std::string encode(const StatsRequest&);
std::string encode(const StatsReply&);
std::string encode(const StatusRequest&);
std::string encode(const StatusReply&);
std::string encode(const EvictRequest&);
std::string encode(const EvictReply&);
std::string encode(const VerifyRequest&);
std::string encode(const VerifyReply&);
std::string encode(const GcRequest&);
std::string encode(const GcReply&);
std::string encode(const ReloadRequest&);
std::string encode(const ReloadReply&);
std::string encode(const CancelRequest&);
std::string encode(const CancelReply&);
std::string encode(const PutSourceRequest&);
std::string encode(const PutSourceReply&);
std::string encode(const ListSourcesRequest&);
std::string encode(const ListSourcesReply&);
std::string encode(const GetSourceRequest&);
std::string encode(const GetSourceReply&);
std::string encode(const BuildRequest&);
std::string encode(const BuildReply&);
std::string encode(const PrewarmRequest&);
std::string encode(const PrewarmReply&);
std::string encode(const BuildEvent&);
std::string encode(const BuildStatusRequest&);
std::string encode(const BuildStatusReply&);
std::string encode(const LogsRequest&);
std::string encode(const LogsReply&);
std::string encode(const FleetPushRequest&);
std::string encode(const FleetPushReply&);
std::string encode(const FleetPullRequest&);
std::string encode(const FleetPullReply&);
std::string encode(const FleetPruneRequest&);
std::string encode(const FleetPruneReply&);

// Specialised for every struct above that has an encode().
template <class T>
Result<T> decode(std::string_view json);

// ErrorBody -> kiln::Error and back.
inline Error to_error(const ErrorBody& body) { return Error{body.code, body.message}; }
inline ErrorBody to_error_body(const Error& e) { return ErrorBody{e.code, e.message}; }

// Role names in hello/status: "read", "build", "put", "admin" (protocol.md, "Roles").
// Cumulative, in this order: read (get what is stored); build (register a weight-free
// source, which the node hashes, and have kilnd's own worker build it); put (store bytes
// made elsewhere, which other users' processes will load: trusted publishers only); admin.
enum class Role : std::uint8_t { none = 0, read = 1, build = 2, put = 3, admin = 4 };
std::string_view role_name(Role role) noexcept;
// The role a request type needs (protocol.md table); Role::none for hello/cancel.
Role required_role(MsgType type) noexcept;
// The names of `role` and every role below it: ["read"], ["read","build"], ...; empty for
// Role::none.
std::vector<std::string> role_names_upto(Role role);

}  // namespace kiln::protocol
