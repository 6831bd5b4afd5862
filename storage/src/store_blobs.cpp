// StoreImpl: storing blobs (the one path for artifacts and sources), putting their files in
// place, releasing them, and quarantining damaged ones.
#include <unistd.h>

#include <atomic>
#include <ctime>

#include "blob_reader.hpp"
#include "store_impl.hpp"

namespace kiln::storage {

Result<std::uint64_t> StoreImpl::store_blob_locked(const FinishedBlob& blob, const std::optional<Digest>& keep,
                                                   std::int64_t now, const BlobReference& reference) {
  auto existing = index_.get_blob(blob.header.digest);
  if (!existing) {
    (void)fs_.remove(blob.temp_path);
    return std::move(existing).error();
  }
  if (!*existing) {
    if (auto st = make_room_locked(blob.file_size, keep); !st) {
      (void)fs_.remove(blob.temp_path);
      return std::move(st).error();
    }
  }
  auto installed = install_blob_locked(blob);
  if (!installed) return std::move(installed).error();
  const std::uint64_t stored_size = *installed ? blob.file_size : (*existing)->stored_size;

  std::optional<Digest> freed;
  Status indexed = [&]() -> Status {
    auto txn = sql::Transaction::begin(index_.db());
    if (!txn) return std::move(txn).error();
    if (*installed) {
      KILN_TRY(index_.insert_blob(BlobRow{blob.header.digest, blob.header.size, stored_size, now}));
    }
    auto replaced = reference(stored_size);
    if (!replaced) return std::move(replaced).error();
    if (*replaced) {
      auto release = release_blob_locked(**replaced);
      if (!release) return std::move(release).error();
      if (*release) freed = *replaced;
    }
    return txn->commit();
  }();
  if (!indexed) {
    // The blob file is unreferenced now; remove it (open() would collect it anyway).
    if (*installed) remove_blob_file(blob.header.digest);
    return std::move(indexed).error();
  }
  if (freed) remove_blob_file(*freed);
  return stored_size;
}

Result<bool> StoreImpl::install_blob_locked(const FinishedBlob& blob) {
  const std::filesystem::path target = blob_path(blob.header.digest);
  auto drop_temp = [&] { (void)fs_.remove(blob.temp_path); };
  auto existing = index_.get_blob(blob.header.digest);
  if (!existing) {
    drop_temp();
    return std::move(existing).error();
  }
  if (*existing) {
    // Same content already stored: keep the existing file only if it verifies whole, payload
    // and digest, not just its header: this put is acknowledged on the strength of that file.
    // A damaged one is replaced by rename (atomic: readers holding the old file keep the old
    // inode), which also heals every other key sharing the blob.
    ByteSink discard = [](std::span<const std::byte>) -> Status { return {}; };
    auto h = check_blob_header(fs_, target, blob.header.digest);
    if (h && h->size == blob.header.size && read_blob(fs_, target, blob.header.digest, discard)) {
      drop_temp();
      return false;
    }
  }
  const auto dir = target.parent_path();
  auto dir_exists = fs_.file_size(dir);  // a folder has a size too; nullopt when missing
  if (dir_exists && !*dir_exists) {
    if (auto st = fs_.create_dirs(dir); !st) {
      drop_temp();
      return std::move(st).error();
    }
    if (auto st = fs_.sync_dir(blobs_dir_); !st) {
      drop_temp();
      return std::move(st).error();
    }
  }
  if (auto st = fs_.rename(blob.temp_path, target); !st) {
    drop_temp();
    return std::move(st).error();
  }
  if (auto st = fs_.sync_dir(dir); !st) {
    // Not durable: do not index it. The file is an orphan now and is removed.
    (void)fs_.remove(target);
    return std::move(st).error();
  }
  return true;
}

Result<bool> StoreImpl::release_blob_locked(const Digest& blob) {
  auto refs = index_.blob_refs(blob);
  if (!refs) return std::move(refs).error();
  if (*refs > 0) return false;
  KILN_TRY(index_.erase_blob(blob));
  return true;
}

void StoreImpl::remove_blob_file(const Digest& blob) {
  // Runs after the index no longer names the blob. A failure leaves an orphan that the
  // next open() or verify() collects, so it is not an error for the caller.
  (void)fs_.remove(blob_path(blob));
}

Result<std::vector<Digest>> StoreImpl::quarantine_locked(const Digest& blob, const std::string& why) {
  (void)why;
  auto keys = index_.artifacts_of_blob(blob);
  if (!keys) return std::move(keys).error();
  auto txn = sql::Transaction::begin(index_.db());
  if (!txn) return std::move(txn).error();
  for (const auto& k : *keys) {
    auto erased = index_.erase(k);
    if (!erased) return std::move(erased).error();
    pending_touches_.erase(k);
  }
  auto src = index_.erase_sources_of_blob(blob);
  if (!src) return std::move(src).error();
  KILN_TRY(index_.erase_blob(blob));
  KILN_TRY(index_.add_counter("quarantined", 1));
  KILN_TRY(txn->commit());
  // Kept for inspection, never read again. If the move fails the file is an orphan and
  // is collected later; either way it is no longer served.
  // Unique name: the same content can be quarantined more than once.
  static std::atomic<std::uint64_t> counter{0};
  const auto target = quarantine_dir_ / (blob.hex() + "." + std::to_string(std::time(nullptr)) + "." +
                                         std::to_string(::getpid()) + "-" + std::to_string(++counter) + ".blob");
  if (!fs_.rename(blob_path(blob), target)) remove_blob_file(blob);
  return std::move(*keys);
}

}  // namespace kiln::storage
