// kiln/storage/store.hpp — the node's artifact store: zstd blobs on disk, indexed in SQLite.
//
// Layout of a store folder, formats in schema/: blob-format.md, index (schema/sql/).
//
// Thread safety: a Store is safe for concurrent use from many threads without external
// synchronization. Blob reads and writes run outside the index lock; index updates are
// serialized. One process owns a store folder at a time (an flock on <root>/LOCK);
// open() of a folder another process holds fails with Errc::busy.
//
// Durability: a put is durable when commit returns: the blob is written to a temporary
// file, fsynced, renamed, the folder fsynced, and only then indexed in one transaction.
// A crash at any point leaves the store openable; open() recovers (see open()).
// Hit counts and last-access times are batched in memory and written about once a second
// and before any stat/list/stats/eviction/close: a crash may lose the latest of them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kiln/digest.hpp"
#include "kiln/key.hpp"
#include "kiln/result.hpp"

namespace kiln::storage {

class FileSystem;  // storage/file_system.hpp: real by default, fault-injecting in tests

// How a read checks the bytes it serves (every read checks; this chooses how).
enum class ReadCheck {
  // The SHA-256 of the bytes served is computed and compared with the blob's address,
  // on every read (DESIGN.md: "Every read verifies the digest"). Costs about 1 ms per
  // 1.3 MB on a SHA-NI CPU: ten times a plain read from the page cache. Artifacts of
  // 1 MiB or more are hashed on a helper thread while zstd decompresses the next piece
  // (one short-lived thread per such read, on machines with more than one CPU).
  sha256,
  // The header's XXH3-64 of the stored payload is checked instead (plus sizes, the header
  // check and the address in the header). Catches any accidental damage at ~20 GB/s;
  // not a defence against someone who can write the store folder (neither is sha256:
  // they could rewrite the index too). The SHA-256 is still computed at put (it is the
  // blob's address) and re-checked by verify().
  xxh3,
};

struct StoreOptions {
  std::filesystem::path root;          // created if missing
  // Soft quota on stored (compressed) bytes: after a put, least-recently-used unpinned
  // entries are evicted until the store is under it. 0 = no quota.
  std::uint64_t quota_bytes = 0;
  // Hard limit: a put that would take the store past it is refused (quota_exceeded)
  // when eviction cannot make room; reads go on. 0 = no limit.
  std::uint64_t hard_limit_bytes = 0;
  // zstd level of new blobs; reading does not depend on it.
  int zstd_level = 3;
  // false stores new blobs uncompressed (reads are then a plain copy plus the check).
  // With true, a blob whose first MiB zstd shrinks by less than 10% is stored raw too.
  bool compress = true;
  ReadCheck read_check = ReadCheck::sha256;
  // File layer; nullptr = the real file system. Not owned; must outlive the Store.
  FileSystem* fs = nullptr;
  // SQLite VFS the index is opened through; empty = SQLite's default. For tests, which
  // register a fault-injecting one (tests/storage/support/fault_vfs.hpp). A name SQLite
  // does not know makes open() fail with invalid_argument.
  std::string sqlite_vfs;
  // Bytes kept in <root>/reserve so that deleting works on a full disk: SQLite needs free
  // pages even to commit a delete. A delete, eviction or repair that meets a full disk
  // gives the reserve up and retries; a put first restores it and is refused with
  // no_space until the disk has room for it again. 0 = no reserve.
  std::uint64_t reserve_bytes = 4u << 20;
  // The fleet's durable outbox: when true, an artifact committed with PutMeta::publish
  // (builds; torch cache entries written on this node) and a source put_source()
  // registers get a push_queue row in the same transaction, so a push is never lost
  // between the store and the queue (kilnd sets it for [fleet] push).
  bool push_outbox = false;
};

struct ArtifactInfo {
  Key key;
  Digest key_digest;
  Digest blob_digest;                 // SHA-256 of the uncompressed bytes
  std::uint64_t size = 0;             // uncompressed bytes
  std::uint64_t stored_size = 0;      // bytes of the blob file on disk
  std::int64_t created_at = 0;        // unix seconds
  std::int64_t last_access = 0;       // unix seconds
  std::uint64_t hits = 0;
  double build_seconds = 0;
  bool pinned = false;
  // Where it came from: "build", "put", "registry", "import", "torch_cache" (written by a
  // torch.compile process through kilnd's torch cache listener); "" = not recorded (older
  // index).
  std::string origin;
};

// Whether a put is queued for the fleet (StoreOptions::push_outbox) with the artifact.
enum class Publish { no, yes };

struct PutMeta {
  double build_seconds = 0;
  bool pin = false;
  std::string origin = "put";   // see ArtifactInfo::origin
  // When it was made, where it was made (an import keeps the exporter's); 0 = now. A time
  // after now is taken as now.
  std::int64_t created_at = 0;
  Publish publish = Publish::no;  // yes: a push_queue row in the same transaction (outbox on)
};

// A signature kept with an entry (schema/signature.md). subject: "artifact:<key digest
// hex>" or "source:<model hash>".
struct SignatureRecord {
  std::string subject;
  std::string manifest_digest;   // "sha256:<hex>"
  std::string signer;            // key name
  std::string signature;         // base64
  std::string payload;           // the signed bytes
  std::int64_t created_at = 0;
};

// One pending push to the fleet's registry.
struct PushItem {
  std::string subject;           // as SignatureRecord::subject
  std::int64_t enqueued_at = 0;
  std::uint32_t attempts = 0;    // failed attempts so far
  std::int64_t next_attempt_at = 0;
  std::string last_error;        // "" until an attempt fails
};

enum class DryRun { no, yes };

// Whether a read is a use of the artifact. Access::quiet (an export, a copy to the fleet,
// an operator's inspection) counts no hit or miss and leaves last access and the LRU order
// as they were, so hit rates and `evict --older-than` reflect what clients use.
enum class Access { counted, quiet };

// What an eviction removed, or would remove on a dry run.
struct EvictReport {
  std::vector<ArtifactInfo> removed;  // least recently used first
  std::uint64_t freed_bytes = 0;      // stored (compressed) bytes released
  std::uint64_t pinned_kept = 0;      // pinned artifacts that matched (evict) or that hold space (evict_to)
};

struct StoreStats {
  std::uint64_t entries = 0;
  std::uint64_t stored_bytes = 0;        // on disk, compressed, headers included
  std::uint64_t uncompressed_bytes = 0;
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t evictions = 0;
  std::uint64_t quarantined = 0;
  std::uint64_t quota_bytes = 0;
  std::uint64_t hard_limit_bytes = 0;
};

// Filters: key field name (kiln::key_field_names(), e.g. "region", "gpu_arch") -> exact
// value. Unknown field names are invalid_argument.
struct ListQuery {
  std::map<std::string, std::string> filters;
  std::optional<bool> pinned;
  std::int64_t accessed_before = 0;   // unix seconds; 0 = any
  std::size_t limit = 0;              // 0 = all
  std::size_t offset = 0;
};

struct VerifyReport {
  std::uint64_t checked = 0;          // blob files re-hashed
  std::vector<Digest> corrupt;        // key digests whose blob failed; quarantined and unindexed
  std::uint64_t orphans_removed = 0;  // blob files no row referenced
  std::uint64_t missing_removed = 0;  // rows whose blob was missing
  std::vector<Digest> missing;        // every one of their key digests (artifacts; sources are not listed)
  std::uint64_t foreign_moved = 0;    // files in blobs/ that are not kiln blobs, moved to quarantine/

  bool found_anything() const {
    return !corrupt.empty() || orphans_removed || missing_removed || foreign_moved;
  }
};

struct BuildRecord {
  Digest key_digest;
  std::int64_t started_at = 0;
  std::int64_t finished_at = 0;
  bool ok = false;
  std::string error;   // empty when ok
  std::string log;     // the worker's stderr, truncated to its last 1 MiB
};

struct SourceInfo {
  std::string model_hash;
  Digest blob_digest;
  std::uint64_t size = 0;
  std::int64_t created_at = 0;
  std::string name;    // file name it was registered from, for display
  // Names later registrations of the same program gave it (add_source_name), in name order.
  std::vector<std::string> aliases;
};

// Receives a blob's uncompressed bytes in order. Returning an error stops the read.
using ByteSink = std::function<Status(std::span<const std::byte>)>;

// A streamed put in progress. Destroying it without commit removes its temporary file.
class PutStream {
 public:
  virtual ~PutStream() = default;
  virtual Status write(std::span<const std::byte> data) = 0;
};

class Store {
 public:
  // Opens (creating if needed) the store at options.root, migrating an older index
  // schema, and recovers: removes temporary files, drops rows whose blob is missing,
  // collects blobs no row references, quarantines blob files whose size is wrong, and
  // moves files in blobs/ that are not kiln blobs to quarantine/ (see recovery_report()).
  // A folder that is not writable but holds a store opens read-only (read_only() true).
  // On a full disk it opens even when those repairs cannot be written to the index; they
  // are redone by the next open() or verify() (reads verify every blob meanwhile).
  // Errors: read_only (folder not writable and holds no store), busy (another process
  // holds it), corrupt (index.sqlite is not a kiln index: it is left untouched),
  // unsupported (index from a newer kiln), invalid_argument (quota above hard limit), io_error.
  static Result<std::unique_ptr<Store>> open(const StoreOptions& options);
  virtual ~Store() = default;

  // Streamed put: bytes go through zstd into a temporary file as they arrive, so a
  // 2 GiB artifact never sits whole in memory. read_only; quota_exceeded when the store
  // is at its hard limit and nothing can be evicted. A stream's write() fails with
  // no_space/io_error when the disk does, and with quota_exceeded once the artifact alone
  // exceeds the hard limit; after a failed write the stream only returns that error.
  virtual Result<std::unique_ptr<PutStream>> begin_put() = 0;
  // Makes the streamed bytes the artifact for `key` (replacing an existing entry of the
  // same key). Identical content already stored is not stored twice. invalid_argument for
  // an incomplete or malformed key or a stream not from this store's begin_put();
  // quota_exceeded, no_space, io_error (e.g. fsync failed), read_only. On any error
  // nothing is indexed and no temporary file is left.
  virtual Result<ArtifactInfo> commit(std::unique_ptr<PutStream> stream, const Key& key,
                                      const PutMeta& meta = {}) = 0;
  Result<ArtifactInfo> put_bytes(const Key& key, std::span<const std::byte> data, const PutMeta& meta = {});
  Result<ArtifactInfo> put_file(const Key& key, const std::filesystem::path& file, const PutMeta& meta = {});

  // Verified read: streams the uncompressed bytes to `sink` and checks their digest.
  // nullopt (and a miss counted) when no artifact has this key digest. On a digest
  // mismatch or a damaged blob file the entry is quarantined (moved to
  // <root>/quarantine, unindexed) and Errc::corrupt returned — the caller must discard
  // whatever the sink received. A hit updates last_access and hits (batched, see top).
  // Safe against a concurrent remove(): the read either completes or is a miss.
  virtual Result<std::optional<ArtifactInfo>> read(const Digest& key_digest, const ByteSink& sink,
                                                   Access access = Access::counted) = 0;
  // Convenience over read(): whole artifact in memory.
  Result<std::optional<std::vector<std::byte>>> get_bytes(const Digest& key_digest);
  // read() into `out` (resized to the artifact's size), decompressing straight into it:
  // one copy less than a sink. Same hits, misses, verification and quarantine as read().
  // On error `out` holds garbage and must be discarded.
  virtual Result<std::optional<ArtifactInfo>> read_into(const Digest& key_digest, std::vector<std::byte>& out,
                                                        Access access = Access::counted);

  // Metadata only; no hit or miss counted.
  virtual Result<std::optional<ArtifactInfo>> stat(const Digest& key_digest) = 0;
  // Newest access first (a put counts as an access); ties by key digest.
  virtual Result<std::vector<ArtifactInfo>> list(const ListQuery& query) = 0;
  // true if it existed. A blob shared with another entry stays until unreferenced.
  virtual Result<bool> remove(const Digest& key_digest) = 0;
  // true if it existed.
  virtual Result<bool> set_pinned(const Digest& key_digest, bool pinned) = 0;
  virtual Result<StoreStats> stats() = 0;
  virtual void record_miss() = 0;
  // Counts `n` hits served without reading the blob (the daemon's hot, uncompressed
  // copies), so hit counts and LRU eviction see them. Buffered like read()'s hits and
  // written with the next flush; an unknown digest only adds to the store-wide count.
  virtual void record_hits(const Digest& key_digest, std::uint64_t n) = 0;

  // Evicts least-recently-used blobs until stored bytes <= target_bytes. A blob goes with
  // every artifact sharing it (removing only some frees nothing), and a blob a pinned
  // artifact uses stays: an eviction never removes an entry that frees no bytes.
  // DryRun::yes reports what would go and removes nothing.
  virtual Result<EvictReport> evict_to(std::uint64_t target_bytes, DryRun dry_run = DryRun::no) = 0;
  // Evicts the unpinned entries matching `query` (pinned matches are counted as kept).
  virtual Result<EvictReport> evict(const ListQuery& query, DryRun dry_run = DryRun::no) = 0;
  // Re-hashes every blob; quarantines what fails; removes orphans and dangling rows.
  // `progress` (may be empty) is called after each blob with the blobs checked so far and
  // the total, from the calling thread.
  using VerifyProgress = std::function<void(std::uint64_t checked, std::uint64_t total)>;
  virtual Result<VerifyReport> verify(const VerifyProgress& progress = {}) = 0;

  // Sources (torch.export archives) by model hash, stored as blobs like artifacts.
  virtual Result<SourceInfo> put_source(const std::string& model_hash, std::unique_ptr<PutStream> stream,
                                        const std::string& name) = 0;
  virtual Result<std::optional<SourceInfo>> stat_source(const std::string& model_hash) = 0;
  virtual Result<std::optional<SourceInfo>> read_source(const std::string& model_hash, const ByteSink& sink) = 0;
  virtual Result<std::vector<SourceInfo>> list_sources() = 0;
  // Another name for the registered source of `model_hash` (another export of the same
  // program, e.g. a second kiln.torch fingerprint): kept once, listed in its `aliases`.
  // Returns the source as it is now. not_found: no such source. A name the source has
  // already, an empty or over-long (> 255 bytes) one, and any past kMaxSourceAliases
  // names change nothing (the source is returned as it is, also by a read-only store).
  virtual Result<SourceInfo> add_source_name(const std::string& model_hash, const std::string& name) = 0;
  static constexpr std::size_t kMaxSourceAliases = 64;

  // Build outcomes and logs, newest kept per key.
  virtual Status record_build(const BuildRecord& record) = 0;
  virtual Result<std::optional<BuildRecord>> last_build(const Digest& key_digest) = 0;

  // ---- the fleet tier's records (schema/sql/0004_fleet.sql) ----
  // Signatures, one per subject (a new one replaces the old). read_only when read-only.
  virtual Status put_signature(const SignatureRecord& record) = 0;
  virtual Result<std::optional<SignatureRecord>> signature(const std::string& subject) = 0;
  // The durable push queue. enqueue_push keeps an existing row (and its attempts) but
  // makes it due now. pending_pushes lists rows due by `due_before` (unix seconds; 0 =
  // all), soonest first. push_done removes the row; push_failed counts an attempt and
  // sets when the next is due.
  virtual Status enqueue_push(const std::string& subject) = 0;
  virtual Result<std::vector<PushItem>> pending_pushes(std::int64_t due_before, std::size_t limit) = 0;
  virtual Status push_done(const std::string& subject) = 0;
  virtual Status push_failed(const std::string& subject, std::int64_t next_attempt_at, const std::string& error) = 0;

  virtual const StoreOptions& options() const = 0;

  // True when the folder was not writable at open(): reads work (without recording hits),
  // every write returns Errc::read_only.
  virtual bool read_only() const { return false; }
  // What open() repaired: temporaries are not counted; missing_removed counts index rows
  // whose blob file was missing or damaged, orphans_removed blob files nothing referenced.
  virtual const VerifyReport& recovery_report() const;
  // Where the blob file with this content digest lives (schema/blob-format.md); the file
  // holds a header and zstd payload, not the artifact's bytes. For tools and tests.
  virtual std::filesystem::path blob_path(const Digest& blob_digest) const;
};

}  // namespace kiln::storage
