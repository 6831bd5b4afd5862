// StoreImpl: open, put, read and metadata calls.
#include "store_impl.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "blob_reader.hpp"

namespace kiln::storage {

namespace {

namespace fs = std::filesystem;

// Touches (hits, last access) are batched: writing them at every hit would fsync the
// index once per read. A crash loses at most this much of them, never an artifact.
constexpr auto kTouchFlushInterval = std::chrono::seconds(1);
constexpr std::size_t kTouchFlushCount = 1024;

// Takes the store's flock. Read-only stores take a shared lock on an existing LOCK file.
Result<int> take_lock(const fs::path& root, bool read_only) {
  fs::path path = root / "LOCK";
  int fd = ::open(path.c_str(), (read_only ? O_RDONLY : O_RDWR | O_CREAT) | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (read_only && errno == ENOENT) return -1;  // nothing to lock against in a read-only folder
    return error_from_errno(errno, "open " + path.string());
  }
  if (::flock(fd, (read_only ? LOCK_SH : LOCK_EX) | LOCK_NB) != 0) {
    int err = errno;
    char pid[32] = {};
    ssize_t n = ::pread(fd, pid, sizeof(pid) - 1, 0);
    ::close(fd);
    if (err == EWOULDBLOCK) {
      std::string holder = n > 0 ? std::string(pid, static_cast<std::size_t>(n)) : std::string("unknown");
      while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
      return make_error(Errc::busy, "store " + root.string() + " is in use by another process (pid " + holder +
                                        "); stop it or use another store folder");
    }
    return error_from_errno(err, "lock " + path.string());
  }
  if (!read_only) {
    std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
      // The pid is only for the message above; the flock is what protects the store.
    }
  }
  return fd;
}

// Whether blob files can be written: create and remove a probe file in tmp/.
Status probe_writable(FileSystem& fsys, const fs::path& root) {
  for (const char* dir : {"blobs", "tmp", "quarantine"}) KILN_TRY(fsys.create_dirs(root / dir));
  fs::path probe = root / "tmp" / ("probe-" + std::to_string(::getpid()));
  (void)fsys.remove(probe);
  auto f = fsys.create(probe);
  if (!f) return std::move(f).error();
  f->reset();
  return fsys.remove(probe);
}

// Blob files under blobs/ (two-hex-digit folders, "<digest>.blob"), counted without
// reading them: only to decide whether a missing index would orphan anything.
std::uint64_t count_blob_files(FileSystem& fsys, const fs::path& blobs_dir) {
  std::uint64_t n = 0;
  auto dirs = fsys.list_dir(blobs_dir);
  if (!dirs) return 0;  // no blobs/ folder: a new store
  for (const auto& d : *dirs) {
    auto names = fsys.list_dir(blobs_dir / d);
    if (!names) continue;
    for (const auto& name : *names) n += name.ends_with(".blob") ? 1 : 0;
  }
  return n;
}

// An index that is missing or empty while blob files exist is lost, not new: opening it
// would start an empty store and collect every blob as an orphan. Refuse instead, and say
// how to get out (README, "When the index is lost or damaged").
Status check_index_not_lost(FileSystem& fsys, const fs::path& root, const fs::path& index_path) {
  auto size = fsys.file_size(index_path);
  if (!size) return std::move(size).error();
  if (*size && **size > 0) return {};
  const std::uint64_t blobs = count_blob_files(fsys, root / "blobs");
  if (blobs == 0) return {};
  return make_error(Errc::corrupt,
                    "index " + index_path.string() + " is " + (*size ? "empty" : "missing") + " but " +
                        (root / "blobs").string() + " holds " + std::to_string(blobs) +
                        " blob file(s); refusing to open the store, which would delete them as orphans. "
                        "Restore index.sqlite (with its -wal file) from a backup, or salvage it with "
                        "sqlite3's .recover; to start empty on purpose, move the blobs folder aside first");
}

bool is_read_only_error(const Error& e) {
  return e.code == Errc::read_only || e.code == Errc::permission_denied;
}

}  // namespace

const VerifyReport& Store::recovery_report() const {
  static const VerifyReport empty;
  return empty;
}

fs::path Store::blob_path(const Digest& blob_digest) const {
  std::string hex = blob_digest.hex();
  return options().root / "blobs" / hex.substr(0, 2) / (hex + ".blob");
}

fs::path StoreImpl::blob_path(const Digest& blob_digest) const {
  std::string hex = blob_digest.hex();
  return blobs_dir_ / hex.substr(0, 2) / (hex + ".blob");
}

Result<std::unique_ptr<Store>> Store::open(const StoreOptions& options) { return StoreImpl::open(options); }

Result<std::unique_ptr<Store>> StoreImpl::open(const StoreOptions& options) {
  if (options.root.empty()) return make_error(Errc::invalid_argument, "store: no root folder given");
  if (options.hard_limit_bytes != 0 && options.quota_bytes > options.hard_limit_bytes) {
    return make_error(Errc::invalid_argument, "store: quota_bytes (" + std::to_string(options.quota_bytes) +
                                                  ") is above hard_limit_bytes (" +
                                                  std::to_string(options.hard_limit_bytes) + ")");
  }
  FileSystem& fsys = options.fs != nullptr ? *options.fs : real_file_system();
  const fs::path index_path = options.root / "index.sqlite";
  bool read_only = false;
  Status writable = fsys.create_dirs(options.root);
  if (writable) writable = probe_writable(fsys, options.root);
  if (!writable) {
    const Error& e = writable.error();
    if (!is_read_only_error(e)) return e;
    auto existing = fsys.file_size(index_path);
    if (!existing || !*existing) {
      return make_error(Errc::read_only, "store folder " + options.root.string() +
                                             " is not writable and holds no store (" + e.message + ")");
    }
    read_only = true;
  }
  auto lock = take_lock(options.root, read_only);
  if (!lock) return std::move(lock).error();
  if (Status lost = check_index_not_lost(fsys, options.root, index_path); !lost) {
    if (*lock >= 0) ::close(*lock);
    return std::move(lost).error();
  }
  auto index = Index::open(index_path, read_only, options.sqlite_vfs);
  if (!index) {
    if (*lock >= 0) ::close(*lock);
    return std::move(index).error();
  }
  std::unique_ptr<StoreImpl> store(new StoreImpl(options, fsys, *lock, read_only, std::move(*index)));
  {
    std::lock_guard<std::mutex> guard(store->mu_);
    auto seq = store->index_.max_access_seq();
    if (!seq) return std::move(seq).error();
    store->access_seq_ = *seq;
    if (!read_only) {
      VerifyReport report;
      Status recovered = store->recover_locked(/*remove_temporaries=*/true, report);
      // A full disk must not keep a store from serving what it holds: repairs that could
      // not be written are redone by the next open() or verify(); until then reads check
      // every blob anyway (a row whose blob is missing reads as corrupt, never as bytes).
      if (!recovered && recovered.error().code != Errc::no_space) return std::move(recovered).error();
      store->recovery_ = report;
      (void)store->ensure_reserve_locked();  // best effort: a full disk still opens and serves
    }
  }
  return std::unique_ptr<Store>(std::move(store));
}

StoreImpl::StoreImpl(StoreOptions options, FileSystem& fs, int lock_fd, bool read_only, Index index)
    : options_(std::move(options)), fs_(fs), lock_{lock_fd}, read_only_(read_only),
      blobs_dir_(options_.root / "blobs"), tmp_dir_(options_.root / "tmp"),
      quarantine_dir_(options_.root / "quarantine"), reserve_path_(options_.root / "reserve"),
      index_(std::move(index)),
      last_flush_(std::chrono::steady_clock::now()) {}

StoreImpl::~StoreImpl() {
  {
    std::lock_guard<std::mutex> guard(mu_);
    (void)flush_touches_locked();  // best effort: losing a few hit counts loses no artifact
  }
}

StoreImpl::LockFd::~LockFd() {
  if (fd >= 0) ::close(fd);
}

std::int64_t StoreImpl::now() const { return static_cast<std::int64_t>(std::time(nullptr)); }

Status StoreImpl::writable() const {
  if (read_only_) {
    return make_error(Errc::read_only, "store " + options_.root.string() + " was opened read-only (folder not writable)");
  }
  return {};
}

Result<std::unique_ptr<PutStream>> StoreImpl::begin_put() {
  KILN_TRY(writable());
  {
    std::lock_guard<std::mutex> guard(mu_);
    KILN_TRY(ensure_reserve_locked());
  }
  if (options_.hard_limit_bytes != 0) {
    std::lock_guard<std::mutex> guard(mu_);
    KILN_TRY(make_room_locked(1, std::nullopt));
  }
  auto w = BlobWriter::create(fs_, tmp_dir_, options_.compress ? Compression::zstd : Compression::none,
                              options_.zstd_level, options_.hard_limit_bytes);
  if (!w) return std::move(w).error();
  (*w)->owner = this;
  return std::unique_ptr<PutStream>(std::move(*w));
}

Result<std::unique_ptr<BlobWriter>> StoreImpl::take_writer(std::unique_ptr<PutStream> stream) {
  auto* w = dynamic_cast<BlobWriter*>(stream.get());
  if (w == nullptr || w->owner != this) {
    return make_error(Errc::invalid_argument, "commit: the put stream was not made by this store's begin_put()");
  }
  stream.release();
  return std::unique_ptr<BlobWriter>(w);
}

Result<ArtifactInfo> StoreImpl::commit(std::unique_ptr<PutStream> stream, const Key& key, const PutMeta& meta) {
  KILN_TRY(writable());
  if (!stream) return make_error(Errc::invalid_argument, "commit: no put stream");
  auto writer = take_writer(std::move(stream));
  if (!writer) return std::move(writer).error();
  auto key_digest = key.digest();
  if (!key_digest) return std::move(key_digest).error();
  if (!(meta.build_seconds >= 0)) return make_error(Errc::invalid_argument, "commit: build_seconds must be >= 0");
  auto blob = (*writer)->finish();
  if (!blob) return std::move(blob).error();

  std::lock_guard<std::mutex> guard(mu_);
  // Pending hit counts are not this put's business: if they cannot be written now, the
  // put's own transaction says whether the index takes writes.
  (void)flush_touches_locked();
  ArtifactInfo info;
  info.key = key;
  info.key_digest = *key_digest;
  info.blob_digest = blob->header.digest;
  info.size = blob->header.size;
  const std::int64_t t = now();
  info.created_at = meta.created_at > 0 ? std::min(meta.created_at, t) : t;
  info.last_access = t;
  info.build_seconds = meta.build_seconds;
  info.pinned = meta.pin;
  info.origin = meta.origin;
  // The artifact's row; and the fleet's outbox, in the same transaction: what is to be
  // published (a build, a torch cache entry) is never stored unqueued.
  auto reference = [&](std::uint64_t stored_size) -> Result<std::optional<Digest>> {
    info.stored_size = stored_size;
    pending_touches_.erase(info.key_digest);
    auto replaced = index_.upsert(info, ++access_seq_);
    if (replaced && options_.push_outbox && meta.publish == Publish::yes) {
      KILN_TRY(index_.enqueue_push("artifact:" + info.key_digest.hex(), t));
    }
    return replaced;
  };
  auto stored = store_blob_locked(*blob, info.key_digest, t, reference);
  if (!stored) return std::move(stored).error();
  if (options_.quota_bytes != 0) {
    // Soft quota: best effort; the put itself has succeeded.
    (void)evict_locked(options_.quota_bytes, info.key_digest, DryRun::no);
  }
  return info;
}

Result<std::optional<ArtifactInfo>> StoreImpl::finish_read(const Digest& key_digest, const ArtifactInfo& info,
                                                           Status st, Access access) {
  std::lock_guard<std::mutex> guard(mu_);
  if (st && access == Access::quiet) return std::optional<ArtifactInfo>(info);
  if (st) {
    record_hits_locked(key_digest, 1);
    ArtifactInfo out = info;
    out.hits += 1;
    out.last_access = now();
    return std::optional<ArtifactInfo>(std::move(out));
  }
  Error e = std::move(st).error();
  if (e.code == Errc::not_found) {
    // The file went away: either a concurrent remove (then this is a miss) or damage.
    auto row = index_.get(key_digest);
    if (row && !*row) {
      if (access == Access::counted) pending_misses_ += 1;
      return std::optional<ArtifactInfo>();
    }
    e = make_error(Errc::corrupt, "blob file of artifact " + key_digest.hex() + " is missing");
  }
  if (e.code != Errc::corrupt) return e;
  if (!read_only_) {
    auto dropped = quarantine_locked(info.blob_digest, e.message);
    if (dropped) {
      e.message += "; the entry was quarantined and removed from the index";
    } else {
      // Still corrupt, still not served; the next read or verify() quarantines it.
      e.message += "; quarantining it failed (" + dropped.error().message + ")";
    }
  }
  return e;
}

Result<std::optional<ArtifactInfo>> StoreImpl::read_artifact(
    const Digest& key_digest, Access access, const std::function<Status(const ArtifactInfo&)>& read_blob_of) {
  std::optional<ArtifactInfo> info;
  {
    std::lock_guard<std::mutex> guard(mu_);
    auto row = index_.get(key_digest);
    if (!row) return std::move(row).error();
    if (!*row) {
      if (access == Access::counted) pending_misses_ += 1;
      return std::optional<ArtifactInfo>();
    }
    info = std::move(*row);
    if (auto it = pending_touches_.find(key_digest); it != pending_touches_.end()) info->hits += it->second.hits;
  }
  Status st = read_blob_of(*info);
  return finish_read(key_digest, *info, std::move(st), access);
}

Result<std::optional<ArtifactInfo>> StoreImpl::read(const Digest& key_digest, const ByteSink& sink, Access access) {
  return read_artifact(key_digest, access, [&](const ArtifactInfo& info) {
    return read_blob(fs_, blob_path(info.blob_digest), info.blob_digest, sink, {}, options_.read_check);
  });
}

Result<std::optional<ArtifactInfo>> StoreImpl::read_into(const Digest& key_digest, std::vector<std::byte>& out,
                                                         Access access) {
  // Decompressed straight into `out`, sized from the index, instead of through a sink.
  return read_artifact(key_digest, access, [&](const ArtifactInfo& info) {
    out.resize(info.size);
    ByteSink none = [](std::span<const std::byte>) -> Status { return {}; };
    std::span<std::byte> direct = info.size == 0 ? std::span<std::byte>() : std::span<std::byte>(out);
    return read_blob(fs_, blob_path(info.blob_digest), info.blob_digest, none, direct, options_.read_check);
  });
}

// Metadata calls flush pending hits first so that they see them; when the index cannot
// take writes (disk full) the hits stay pending and are added to what is returned: a
// full disk must not break reads.
void StoreImpl::apply_pending_locked(ArtifactInfo& info) const {
  auto it = pending_touches_.find(info.key_digest);
  if (it == pending_touches_.end()) return;
  info.hits += it->second.hits;
  info.last_access = std::max(info.last_access, it->second.now);
}

Result<std::optional<ArtifactInfo>> StoreImpl::stat(const Digest& key_digest) {
  std::lock_guard<std::mutex> guard(mu_);
  (void)flush_touches_locked();
  auto row = index_.get(key_digest);
  if (row && *row) apply_pending_locked(**row);
  return row;
}

Result<std::vector<ArtifactInfo>> StoreImpl::list(const ListQuery& query) {
  std::lock_guard<std::mutex> guard(mu_);
  (void)flush_touches_locked();
  auto rows = index_.list(query);
  if (rows) {
    for (auto& r : *rows) apply_pending_locked(r);
  }
  return rows;
}

Result<bool> StoreImpl::remove(const Digest& key_digest) {
  KILN_TRY(writable());
  std::lock_guard<std::mutex> guard(mu_);
  (void)flush_touches_locked();  // the removal's own transaction reports a failing index
  auto freed = remove_locked(key_digest, /*count_eviction=*/false);
  if (!freed) return std::move(freed).error();
  return freed->has_value();
}

Result<bool> StoreImpl::set_pinned(const Digest& key_digest, bool pinned) {
  KILN_TRY(writable());
  std::lock_guard<std::mutex> guard(mu_);
  return index_.set_pinned(key_digest, pinned);
}

Result<StoreStats> StoreImpl::stats() {
  std::lock_guard<std::mutex> guard(mu_);
  (void)flush_touches_locked();
  auto s = index_.stats();
  if (!s) return std::move(s).error();
  // Counters not written yet (read-only store, or an index that cannot take writes now):
  // show what this process saw.
  s->hits += pending_hits_;
  s->misses += pending_misses_;
  s->quota_bytes = options_.quota_bytes;
  s->hard_limit_bytes = options_.hard_limit_bytes;
  return s;
}

void StoreImpl::record_miss() {
  std::lock_guard<std::mutex> guard(mu_);
  pending_misses_ += 1;
}

void StoreImpl::record_hits(const Digest& key_digest, std::uint64_t n) {
  if (n == 0) return;
  std::lock_guard<std::mutex> guard(mu_);
  record_hits_locked(key_digest, n);
}

void StoreImpl::record_hits_locked(const Digest& key_digest, std::uint64_t n) {
  pending_hits_ += n;  // a read-only store cannot write it, but stats() shows it
  if (read_only_) return;
  auto& t = pending_touches_[key_digest];
  t.now = now();
  t.seq = ++access_seq_;
  t.hits += n;
  // A failing flush (disk full) does not fail the hit: the touches stay pending and the
  // flush is retried once per interval, not at every hit.
  auto since = std::chrono::steady_clock::now() - last_flush_;
  if (since >= kTouchFlushInterval || (pending_touches_.size() >= kTouchFlushCount && !flush_failing_)) {
    (void)flush_touches_locked();
  }
}

Status StoreImpl::flush_touches_locked() {
  if (read_only_) return {};
  if (pending_touches_.empty() && pending_hits_ == 0 && pending_misses_ == 0) return {};
  last_flush_ = std::chrono::steady_clock::now();  // of the last attempt: failures are retried per interval
  Status st = [&]() -> Status {
    auto txn = sql::Transaction::begin(index_.db());
    if (!txn) return std::move(txn).error();
    for (const auto& [digest, t] : pending_touches_) KILN_TRY(index_.touch(digest, t.now, t.seq, t.hits));
    if (pending_hits_ != 0) KILN_TRY(index_.add_counter("hits", static_cast<std::int64_t>(pending_hits_)));
    if (pending_misses_ != 0) KILN_TRY(index_.add_counter("misses", static_cast<std::int64_t>(pending_misses_)));
    return txn->commit();
  }();
  flush_failing_ = !st;
  if (!st) return st;
  pending_touches_.clear();
  pending_hits_ = 0;
  pending_misses_ = 0;
  return {};
}

Status StoreImpl::record_build(const BuildRecord& record) {
  KILN_TRY(writable());
  constexpr std::size_t kMaxLog = 1 << 20;
  BuildRecord r = record;
  if (r.log.size() > kMaxLog) r.log = r.log.substr(r.log.size() - kMaxLog);  // the end says why it failed
  std::lock_guard<std::mutex> guard(mu_);
  return index_.put_build(r);
}

Result<std::optional<BuildRecord>> StoreImpl::last_build(const Digest& key_digest) {
  std::lock_guard<std::mutex> guard(mu_);
  return index_.get_build(key_digest);
}

}  // namespace kiln::storage
