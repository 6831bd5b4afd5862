// StoreImpl: the Store behind Store::open(). Split over store_impl.cpp (open, put, read,
// metadata), store_blobs.cpp (storing blobs, the one path for artifacts and sources;
// installing, releasing and quarantining blob files),
// store_maintenance.cpp (recovery, verification, eviction) and store_sources.cpp.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <unordered_map>

#include "blob_writer.hpp"
#include "index.hpp"
#include "kiln/storage/file_system.hpp"
#include "kiln/storage/store.hpp"

namespace kiln::storage {

class StoreImpl final : public Store {
 public:
  static Result<std::unique_ptr<Store>> open(const StoreOptions& options);
  ~StoreImpl() override;

  Result<std::unique_ptr<PutStream>> begin_put() override;
  Result<ArtifactInfo> commit(std::unique_ptr<PutStream> stream, const Key& key, const PutMeta& meta) override;
  Result<std::optional<ArtifactInfo>> read(const Digest& key_digest, const ByteSink& sink, Access access) override;
  Result<std::optional<ArtifactInfo>> read_into(const Digest& key_digest, std::vector<std::byte>& out,
                                                Access access) override;
  Result<std::optional<ArtifactInfo>> stat(const Digest& key_digest) override;
  Result<std::vector<ArtifactInfo>> list(const ListQuery& query) override;
  Result<bool> remove(const Digest& key_digest) override;
  Result<bool> set_pinned(const Digest& key_digest, bool pinned) override;
  Result<StoreStats> stats() override;
  void record_miss() override;
  void record_hits(const Digest& key_digest, std::uint64_t n) override;
  Result<EvictReport> evict_to(std::uint64_t target_bytes, DryRun dry_run) override;
  Result<EvictReport> evict(const ListQuery& query, DryRun dry_run) override;
  Result<VerifyReport> verify(const VerifyProgress& progress = {}) override;
  Result<SourceInfo> put_source(const std::string& model_hash, std::unique_ptr<PutStream> stream,
                                const std::string& name) override;
  Result<std::optional<SourceInfo>> stat_source(const std::string& model_hash) override;
  Result<std::optional<SourceInfo>> read_source(const std::string& model_hash, const ByteSink& sink) override;
  Result<std::vector<SourceInfo>> list_sources() override;
  Result<SourceInfo> add_source_name(const std::string& model_hash, const std::string& name) override;
  Status record_build(const BuildRecord& record) override;
  Result<std::optional<BuildRecord>> last_build(const Digest& key_digest) override;
  Status put_signature(const SignatureRecord& record) override;
  Result<std::optional<SignatureRecord>> signature(const std::string& subject) override;
  Status enqueue_push(const std::string& subject) override;
  Result<std::vector<PushItem>> pending_pushes(std::int64_t due_before, std::size_t limit) override;
  Status push_done(const std::string& subject) override;
  Status push_failed(const std::string& subject, std::int64_t next_attempt_at, const std::string& error) override;
  const StoreOptions& options() const override { return options_; }
  bool read_only() const override { return read_only_; }
  const VerifyReport& recovery_report() const override { return recovery_; }
  std::filesystem::path blob_path(const Digest& blob_digest) const override;

 private:
  StoreImpl(StoreOptions options, FileSystem& fs, int lock_fd, bool read_only, Index index);

  // Closes the LOCK file's descriptor, releasing the flock. Declared before index_ so it
  // is destroyed after it: the lock is held until the index is closed.
  struct LockFd {
    int fd = -1;
    ~LockFd();
  };

  // Everything below with a _locked suffix requires mu_.
  struct PendingTouch {
    std::int64_t now = 0;
    std::int64_t seq = 0;
    std::uint64_t hits = 0;
  };

  Status writable() const;
  Result<std::unique_ptr<BlobWriter>> take_writer(std::unique_ptr<PutStream> stream);
  // What refers to a blob being stored (an artifact's row, a source's): writes that row in
  // the store's transaction, given the blob's stored size, and returns the blob it
  // referred to before, if any.
  using BlobReference = std::function<Result<std::optional<Digest>>(std::uint64_t stored_size)>;
  // The one path by which a finished temporary blob enters the store, for artifacts and
  // sources alike: makes room when its content is new (never evicting `keep`), puts the
  // file in place (install_blob_locked), then in one transaction writes the blob row when
  // the file is new (created at `now`), runs `reference` and releases the blob it replaced,
  // whose file is removed once that commits. On error nothing is indexed and the temporary
  // file, or the file just put in place, is removed. Returns the blob's stored size.
  Result<std::uint64_t> store_blob_locked(const FinishedBlob& blob, const std::optional<Digest>& keep,
                                          std::int64_t now, const BlobReference& reference);
  // `s` with `name` added to its aliases when kept (keeps_name: new, 1..255 bytes, below
  // the cap), written to the index.
  Result<SourceInfo> add_name_locked(SourceInfo s, const std::string& name);
  // Puts a finished temporary blob in place (or drops it when the same content is
  // already stored in a whole file). Returns true when it renamed the file into place
  // (new content, or a damaged file replaced): the blob row must then be (re)written with
  // its size, in the same critical section.
  Result<bool> install_blob_locked(const FinishedBlob& blob);
  // Drops the blob row if nothing references it; returns true when its file must be
  // removed (after the transaction commits).
  Result<bool> release_blob_locked(const Digest& blob);
  void remove_blob_file(const Digest& blob);
  // Moves a damaged blob to quarantine/, drops every row pointing at it, counts it.
  // Returns the key digests of the artifacts dropped.
  Result<std::vector<Digest>> quarantine_locked(const Digest& blob, const std::string& why);
  Status make_room_locked(std::uint64_t incoming, const std::optional<Digest>& keep);
  Result<EvictReport> evict_locked(std::uint64_t target_bytes, const std::optional<Digest>& keep, DryRun dry_run);
  // Removes one artifact; returns the stored bytes it freed, nullopt if it did not exist.
  // On a full disk it gives up the reserve file and retries once (store_reserve.cpp).
  Result<std::optional<std::uint64_t>> remove_locked(const Digest& key_digest, bool count_eviction);
  Result<std::optional<std::uint64_t>> remove_once_locked(const Digest& key_digest, bool count_eviction);
  // The reserve file (store_reserve.cpp): made (again) before each put; no_space when the
  // disk has no room for it. release: true if it was there and is gone now.
  Status ensure_reserve_locked();
  bool release_reserve_locked();
  Status drop_missing_blob_locked(const Digest& blob, VerifyReport& report);
  // Writes pending hits, last-access times and counters in one transaction. On failure
  // they stay pending (and flush_failing_ is set); callers other than shutdown ignore it.
  Status flush_touches_locked();
  // Adds a pending touch of info's entry (not yet written) to it.
  void apply_pending_locked(ArtifactInfo& info) const;
  // Buffers n hits of one entry (hits, last access, LRU order); flushes when due.
  void record_hits_locked(const Digest& key_digest, std::uint64_t n);
  Status recover_locked(bool remove_temporaries, VerifyReport& report);
  Status collect_orphan_files_locked(VerifyReport& report);
  // The body of read() and read_into(): looks the artifact up (a miss counts when
  // `access` says so), runs `read_blob_of` on it outside the lock, then finish_read.
  Result<std::optional<ArtifactInfo>> read_artifact(const Digest& key_digest, Access access,
                                                    const std::function<Status(const ArtifactInfo&)>& read_blob_of);
  Result<std::optional<ArtifactInfo>> finish_read(const Digest& key_digest, const ArtifactInfo& info, Status st,
                                                  Access access);
  std::int64_t now() const;

  StoreOptions options_;
  FileSystem& fs_;
  LockFd lock_;
  const bool read_only_;
  const std::filesystem::path blobs_dir_, tmp_dir_, quarantine_dir_, reserve_path_;
  VerifyReport recovery_;

  std::mutex mu_;
  // State below is protected by mu_.
  Index index_;
  std::int64_t access_seq_ = 0;
  std::unordered_map<Digest, PendingTouch> pending_touches_;
  std::uint64_t pending_hits_ = 0;
  std::uint64_t pending_misses_ = 0;
  std::chrono::steady_clock::time_point last_flush_;  // last flush attempt
  bool flush_failing_ = false;
};

}  // namespace kiln::storage
