// StoreImpl: eviction, recovery on open, and full verification.
#include <algorithm>
#include <ctime>

#include "blob_reader.hpp"
#include "store_impl.hpp"

namespace kiln::storage {

namespace {

bool is_hex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// "<64 hex>.blob" inside the folder named by its first two hex digits.
std::optional<Digest> blob_name_digest(const std::string& dir, const std::string& name) {
  if (name.size() != 69 || name.substr(64) != ".blob" || name.compare(0, 2, dir) != 0) return std::nullopt;
  if (!is_hex(std::string_view(name).substr(0, 64))) return std::nullopt;
  auto d = Digest::from_hex(std::string_view(name).substr(0, 64));
  if (!d) return std::nullopt;
  return *d;
}

}  // namespace

Result<std::optional<std::uint64_t>> StoreImpl::remove_locked(const Digest& key_digest, bool count_eviction) {
  auto freed = remove_once_locked(key_digest, count_eviction);
  if (!freed && freed.error().code == Errc::no_space && release_reserve_locked()) {
    freed = remove_once_locked(key_digest, count_eviction);
  }
  return freed;
}

Result<std::optional<std::uint64_t>> StoreImpl::remove_once_locked(const Digest& key_digest, bool count_eviction) {
  auto txn = sql::Transaction::begin(index_.db());
  if (!txn) return std::move(txn).error();
  auto blob = index_.erase(key_digest);
  if (!blob) return std::move(blob).error();
  if (!*blob) return std::optional<std::uint64_t>();
  auto row = index_.get_blob(**blob);
  if (!row) return std::move(row).error();
  auto freed = release_blob_locked(**blob);
  if (!freed) return std::move(freed).error();
  if (count_eviction) KILN_TRY(index_.add_counter("evictions", 1));
  KILN_TRY(txn->commit());
  pending_touches_.erase(key_digest);
  if (!*freed) return std::optional<std::uint64_t>(0);
  remove_blob_file(**blob);
  return std::optional<std::uint64_t>(*row ? (*row)->stored_size : 0);
}

Result<EvictReport> StoreImpl::evict_locked(std::uint64_t target_bytes, const std::optional<Digest>& keep,
                                             DryRun dry_run) {
  // Best effort: LRU order may then miss the latest hits; each removal's own transaction
  // reports an index that cannot take writes.
  (void)flush_touches_locked();
  auto stored = index_.stored_bytes();
  if (!stored) return std::move(stored).error();
  std::uint64_t used = *stored;
  EvictReport report;
  ListQuery pinned;
  pinned.pinned = true;
  auto kept = index_.list(pinned);
  if (!kept) return std::move(kept).error();
  report.pinned_kept = kept->size();
  if (used <= target_bytes) return report;
  // Whole blobs, least recently used first: evicting one artifact of a shared blob frees
  // nothing, and evicting artifacts one by one until bytes move emptied stores whose
  // artifacts shared their bytes.
  auto blobs = index_.lru_blobs();
  if (!blobs) return std::move(blobs).error();
  for (const auto& blob : *blobs) {
    if (used <= target_bytes) break;
    auto sharers = index_.artifacts_of_blob(blob.digest);
    if (!sharers) return std::move(sharers).error();
    if (keep && std::find(sharers->begin(), sharers->end(), *keep) != sharers->end()) continue;
    for (const auto& k : *sharers) {
      auto info = index_.get(k);
      if (!info) return std::move(info).error();
      if (*info) {
        apply_pending_locked(**info);
        report.removed.push_back(std::move(**info));
      }
      if (dry_run == DryRun::yes) continue;
      auto freed = remove_locked(k, /*count_eviction=*/true);
      if (!freed) return std::move(freed).error();
    }
    used -= std::min(used, blob.stored_size);
    report.freed_bytes += blob.stored_size;
  }
  return report;
}

Status StoreImpl::make_room_locked(std::uint64_t incoming, const std::optional<Digest>& keep) {
  const std::uint64_t hard = options_.hard_limit_bytes;
  if (hard == 0) return {};
  auto stored = index_.stored_bytes();
  if (!stored) return std::move(stored).error();
  if (*stored + incoming <= hard) return {};
  if (incoming <= hard) {
    auto evicted = evict_locked(hard - incoming, keep, DryRun::no);
    if (!evicted) return std::move(evicted).error();
    stored = index_.stored_bytes();
    if (!stored) return std::move(stored).error();
    if (*stored + incoming <= hard) return {};
  }
  auto pinned = index_.list(ListQuery{{}, true, 0, 0, 0});
  std::uint64_t pinned_bytes = 0;
  if (pinned) {
    for (const auto& p : *pinned) pinned_bytes += p.stored_size;
  }
  return make_error(Errc::quota_exceeded,
                    "store " + options_.root.string() + " is at its hard limit: " + std::to_string(*stored) + " of " +
                        std::to_string(hard) + " bytes used (" + std::to_string(pinned_bytes) +
                        " pinned), and the new artifact needs " + std::to_string(incoming) +
                        " more; unpin or remove entries, or raise hard_limit_bytes. Reads still work.");
}

Result<EvictReport> StoreImpl::evict_to(std::uint64_t target_bytes, DryRun dry_run) {
  if (dry_run == DryRun::no) KILN_TRY(writable());
  std::lock_guard<std::mutex> guard(mu_);
  return evict_locked(target_bytes, std::nullopt, dry_run);
}

Result<EvictReport> StoreImpl::evict(const ListQuery& query, DryRun dry_run) {
  if (dry_run == DryRun::no) KILN_TRY(writable());
  std::lock_guard<std::mutex> guard(mu_);
  (void)flush_touches_locked();  // as in evict_locked
  auto matches = index_.list(query);
  if (!matches) return std::move(matches).error();
  EvictReport report;
  for (auto& m : *matches) {
    if (m.pinned) {
      ++report.pinned_kept;
      continue;
    }
    apply_pending_locked(m);
    if (dry_run == DryRun::yes) {
      report.removed.push_back(std::move(m));
      continue;
    }
    auto freed = remove_locked(m.key_digest, /*count_eviction=*/true);
    if (!freed) return std::move(freed).error();
    if (!*freed) continue;
    report.freed_bytes += **freed;
    report.removed.push_back(std::move(m));
  }
  return report;
}

Status StoreImpl::drop_missing_blob_locked(const Digest& blob, VerifyReport& report) {
  auto keys = index_.artifacts_of_blob(blob);
  if (!keys) return std::move(keys).error();
  auto txn = sql::Transaction::begin(index_.db());
  if (!txn) return std::move(txn).error();
  for (const auto& k : *keys) {
    KILN_TRY(index_.erase(k));
    pending_touches_.erase(k);
  }
  KILN_TRY(index_.erase_sources_of_blob(blob));
  KILN_TRY(index_.erase_blob(blob));
  KILN_TRY(txn->commit());
  report.missing_removed += keys->size();
  report.missing.insert(report.missing.end(), keys->begin(), keys->end());
  return {};
}

Status StoreImpl::recover_locked(bool remove_temporaries, VerifyReport& report) {
  if (remove_temporaries) {
    auto names = fs_.list_dir(tmp_dir_);
    if (!names) return std::move(names).error();
    for (const auto& n : *names) (void)fs_.remove(tmp_dir_ / n);
  }
  // Rows pointing at no blob row cannot be served (a crash never makes them: the blob row
  // and the artifact row are written in one transaction; damage to the index can).
  {
    auto txn = sql::Transaction::begin(index_.db());
    if (!txn) return std::move(txn).error();
    {  // named in the report as well as counted: an operator must learn which keys are gone
      auto st = index_.db().prepare("SELECT key_digest FROM artifacts WHERE blob_digest NOT IN (SELECT digest FROM blobs)");
      if (!st) return std::move(st).error();
      auto gone = sql::collect_rows<Digest>(*st, [](const sql::Stmt& row) { return Digest::from_hex(row.text(0)); });
      if (!gone) return std::move(gone).error();
      report.missing.insert(report.missing.end(), gone->begin(), gone->end());
    }
    KILN_TRY(index_.db().exec("DELETE FROM artifacts WHERE blob_digest NOT IN (SELECT digest FROM blobs)"));
    report.missing_removed += static_cast<std::uint64_t>(index_.db().changes());
    KILN_TRY(index_.db().exec("DELETE FROM sources WHERE blob_digest NOT IN (SELECT digest FROM blobs)"));
    KILN_TRY(txn->commit());
  }
  auto blobs = index_.all_blobs();
  if (!blobs) return std::move(blobs).error();
  for (const auto& b : *blobs) {
    auto size = fs_.file_size(blob_path(b.digest));
    if (!size) return std::move(size).error();
    if (!*size) {
      KILN_TRY(drop_missing_blob_locked(b.digest, report));
      continue;
    }
    if (**size != b.stored_size) {
      auto keys = quarantine_locked(b.digest, "file size differs from the index (truncated?)");
      if (!keys) return std::move(keys).error();
      report.corrupt.insert(report.corrupt.end(), keys->begin(), keys->end());
      continue;
    }
    auto refs = index_.blob_refs(b.digest);
    if (!refs) return std::move(refs).error();
    if (*refs == 0) {
      KILN_TRY(index_.erase_blob(b.digest));
      remove_blob_file(b.digest);
      ++report.orphans_removed;
    }
  }
  return collect_orphan_files_locked(report);
}

Status StoreImpl::collect_orphan_files_locked(VerifyReport& report) {
  auto dirs = fs_.list_dir(blobs_dir_);
  if (!dirs) return std::move(dirs).error();
  const auto stamp = std::to_string(std::time(nullptr));
  auto move_foreign = [&](const std::filesystem::path& p, const std::string& name) {
    // Not ours: keep it, out of the way, rather than delete someone's file.
    if (fs_.rename(p, quarantine_dir_ / ("foreign." + stamp + "." + name))) ++report.foreign_moved;
  };
  for (const auto& d : *dirs) {
    const auto dir = blobs_dir_ / d;
    auto names = fs_.list_dir(dir);
    if (!names) {
      if (names.error().message.find("Not a directory") != std::string::npos) move_foreign(dir, d);
      continue;
    }
    if (d.size() != 2 || !is_hex(d)) {
      continue;  // a foreign folder: left alone, never read
    }
    for (const auto& n : *names) {
      auto digest = blob_name_digest(d, n);
      if (!digest) {
        move_foreign(dir / n, n);
        continue;
      }
      auto row = index_.get_blob(*digest);
      if (!row) return std::move(row).error();
      if (!*row) {
        (void)fs_.remove(dir / n);
        ++report.orphans_removed;
      }
    }
  }
  return {};
}

Result<VerifyReport> StoreImpl::verify(const VerifyProgress& progress) {
  VerifyReport report;
  std::vector<BlobRow> blobs;
  {
    std::lock_guard<std::mutex> guard(mu_);
    if (!read_only_) {
      (void)flush_touches_locked();  // hits stay pending on a full disk; not verify's concern
      Status repaired = recover_locked(/*remove_temporaries=*/false, report);
      if (!repaired && repaired.error().code == Errc::no_space && release_reserve_locked()) {
        repaired = recover_locked(/*remove_temporaries=*/false, report);
      }
      KILN_TRY(repaired);
    }
    auto all = index_.all_blobs();
    if (!all) return std::move(all).error();
    blobs = std::move(*all);
  }
  // Hashing runs outside the lock: puts and reads go on meanwhile.
  ByteSink discard = [](std::span<const std::byte>) -> Status { return {}; };
  for (const auto& b : blobs) {
    Status st = read_blob(fs_, blob_path(b.digest), b.digest, discard);
    ++report.checked;
    if (progress) progress(report.checked, blobs.size());
    if (st) continue;
    if (st.error().code != Errc::corrupt && st.error().code != Errc::not_found) return st.error();
    std::lock_guard<std::mutex> guard(mu_);
    auto still = index_.get_blob(b.digest);
    if (!still) return std::move(still).error();
    if (!*still) continue;  // removed meanwhile
    // Read again under the lock: the blob may have been removed and stored again between
    // the read and the lock, and a live entry must not be dropped for that.
    Status again = read_blob(fs_, blob_path(b.digest), b.digest, discard);
    if (again) continue;
    const Error& e = again.error();
    if (e.code != Errc::corrupt && e.code != Errc::not_found) return e;
    if (read_only_) {
      auto keys = index_.artifacts_of_blob(b.digest);
      if (keys) report.corrupt.insert(report.corrupt.end(), keys->begin(), keys->end());
      continue;
    }
    if (e.code == Errc::not_found) {
      KILN_TRY(drop_missing_blob_locked(b.digest, report));
      continue;
    }
    auto keys = quarantine_locked(b.digest, e.message);
    if (!keys) return std::move(keys).error();
    report.corrupt.insert(report.corrupt.end(), keys->begin(), keys->end());
  }
  return report;
}

}  // namespace kiln::storage
