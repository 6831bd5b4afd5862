// The SQLite index of a store (schema/sql/): artifacts, blobs, counters, sources, builds.
// Pure bookkeeping: it never touches blob files. Not thread-safe; the store serializes
// every call under its index mutex.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/storage/store.hpp"
#include "sqlite.hpp"

namespace kiln::storage {

struct BlobRow {
  Digest digest;
  std::uint64_t size = 0;
  std::uint64_t stored_size = 0;
  std::int64_t created_at = 0;
};

// Latest schema version: the number of the last migration in schema/sql/.
int latest_schema_version();

class Index {
 public:
  // Opens (creating when read-write) and migrates to the latest schema. Errors: corrupt
  // (not an SQLite database), unsupported (schema newer than this kiln), read_only, io_error.
  // `vfs`: SQLite VFS name, empty for the default.
  static Result<Index> open(const std::filesystem::path& path, bool read_only, const std::string& vfs = {});
  // Test hook: creates a database migrated only up to `version` (to test migrations).
  static Status create_at_version(const std::filesystem::path& path, int version);

  Result<int> schema_version();
  sql::Db& db() { return db_; }
  bool read_only() const { return read_only_; }

  // ---- artifacts ----
  Result<std::optional<ArtifactInfo>> get(const Digest& key_digest);
  // Inserts or replaces. Returns the blob digest the replaced row pointed at, if any.
  Result<std::optional<Digest>> upsert(const ArtifactInfo& info, std::int64_t access_seq);
  // Returns the blob digest the removed row pointed at; nullopt if there was no row.
  Result<std::optional<Digest>> erase(const Digest& key_digest);
  Result<bool> set_pinned(const Digest& key_digest, bool pinned);
  Status touch(const Digest& key_digest, std::int64_t now, std::int64_t access_seq, std::uint64_t hits);
  Result<std::vector<ArtifactInfo>> list(const ListQuery& query);
  // Blobs that no pinned artifact uses, least recently used first (a blob is as recent as
  // the newest access of the artifacts sharing it): removing every artifact of one frees
  // its stored_size.
  Result<std::vector<BlobRow>> lru_blobs();
  Result<std::vector<Digest>> artifacts_of_blob(const Digest& blob);
  Result<std::int64_t> max_access_seq();

  // ---- blobs ----
  Result<std::optional<BlobRow>> get_blob(const Digest& digest);
  Status insert_blob(const BlobRow& row);
  Status erase_blob(const Digest& digest);
  // Artifacts plus sources that point at the blob.
  Result<std::int64_t> blob_refs(const Digest& digest);
  Result<std::vector<BlobRow>> all_blobs();
  Result<std::uint64_t> stored_bytes();

  // ---- counters and stats ----
  Status add_counter(const std::string& name, std::int64_t delta);
  Result<StoreStats> stats();

  // ---- sources ----
  Result<std::optional<Digest>> upsert_source(const SourceInfo& info);  // replaced blob
  Result<std::optional<SourceInfo>> get_source(const std::string& model_hash);
  Result<std::vector<SourceInfo>> list_sources();
  Result<std::optional<Digest>> erase_sources_of_blob(const Digest& blob);
  // More names of a source (schema/sql/0005): added once each, listed by get/list_sources
  // as SourceInfo::aliases (in name order). Returns whether the name was new.
  Result<bool> add_source_name(const std::string& model_hash, const std::string& name, std::int64_t now);

  // ---- builds ----
  Status put_build(const BuildRecord& record);
  Result<std::optional<BuildRecord>> get_build(const Digest& key_digest);

  // ---- fleet: signatures and the push queue (index_fleet.cpp) ----
  Status put_signature(const SignatureRecord& record);
  Result<std::optional<SignatureRecord>> get_signature(const std::string& subject);
  Status enqueue_push(const std::string& subject, std::int64_t now);
  Result<std::vector<PushItem>> pending_pushes(std::int64_t due_before, std::size_t limit);
  Status erase_push(const std::string& subject);
  Status push_failed(const std::string& subject, std::int64_t next_attempt_at, const std::string& error);

 private:
  Index(sql::Db db, bool read_only) : db_(std::move(db)), read_only_(read_only) {}
  // A prepared statement kept for the hot paths (a lookup per read), reset and ready.
  Result<sql::Stmt*> cached(const std::string& sql);

  sql::Db db_;
  std::unordered_map<std::string, sql::Stmt> statements_;  // destroyed before db_
  bool read_only_ = false;
};

}  // namespace kiln::storage
