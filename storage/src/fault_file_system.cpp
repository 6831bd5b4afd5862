#include "kiln/storage/fault_file_system.hpp"

#include <cerrno>

namespace kiln::storage {

namespace fs = std::filesystem;

class FaultWritableFile final : public WritableFile {
 public:
  FaultWritableFile(FaultFileSystem& owner, fs::path path, std::unique_ptr<WritableFile> base)
      : owner_(owner), path_(std::move(path)), base_(std::move(base)) {}

  Status append(std::span<const std::byte> data) override {
    std::uint64_t allowed = owner_.take_budget(data.size());
    if (allowed > 0) {
      KILN_TRY(base_->append(data.first(static_cast<std::size_t>(allowed))));
      end_ += allowed;
      owner_.note_written(path_, end_);
    }
    if (allowed < data.size()) return error_from_errno(ENOSPC, "write " + path_.string() + " (injected)");
    return {};
  }

  Status write_at(std::uint64_t offset, std::span<const std::byte> data) override {
    // Overwrites take no new space.
    KILN_TRY(owner_.check_writable(path_));
    return base_->write_at(offset, data);
  }

  Status sync() override {
    KILN_TRY(owner_.note_sync(path_));
    return base_->sync();
  }

  Status close() override { return base_->close(); }

 private:
  FaultFileSystem& owner_;
  fs::path path_;
  std::unique_ptr<WritableFile> base_;
  std::uint64_t end_ = 0;
};

FaultFileSystem::FaultFileSystem(FileSystem& base) : base_(base) {}

void FaultFileSystem::fail_writes_after(std::optional<std::uint64_t> bytes) {
  std::lock_guard<std::mutex> g(mu_);
  budget_ = bytes;
}
void FaultFileSystem::set_fail_sync(bool fail) {
  std::lock_guard<std::mutex> g(mu_);
  fail_sync_ = fail;
}
void FaultFileSystem::set_read_only(bool read_only) {
  std::lock_guard<std::mutex> g(mu_);
  read_only_ = read_only;
}
std::uint64_t FaultFileSystem::bytes_written() const {
  std::lock_guard<std::mutex> g(mu_);
  return written_;
}
std::uint64_t FaultFileSystem::injected_failures() const {
  std::lock_guard<std::mutex> g(mu_);
  return injected_;
}

Status FaultFileSystem::check_writable(const fs::path& path) {
  std::lock_guard<std::mutex> g(mu_);
  if (read_only_) {
    ++injected_;
    return error_from_errno(EROFS, "write " + path.string() + " (injected)");
  }
  return {};
}

std::uint64_t FaultFileSystem::take_budget(std::uint64_t want) {
  std::lock_guard<std::mutex> g(mu_);
  if (read_only_) {
    ++injected_;
    return 0;
  }
  std::uint64_t allowed = want;
  if (budget_) {
    allowed = std::min(want, *budget_);
    *budget_ -= allowed;
    if (allowed < want) ++injected_;
  }
  written_ += allowed;
  return allowed;
}

void FaultFileSystem::note_written(const fs::path& path, std::uint64_t end) {
  std::lock_guard<std::mutex> g(mu_);
  auto& st = files_[path];
  st.size = std::max(st.size, end);
}

Status FaultFileSystem::note_sync(const fs::path& path) {
  std::lock_guard<std::mutex> g(mu_);
  if (fail_sync_) {
    ++injected_;
    return error_from_errno(EIO, "fsync " + path.string() + " (injected)");
  }
  auto& st = files_[path];
  st.synced_size = st.size;
  return {};
}

Result<std::unique_ptr<WritableFile>> FaultFileSystem::create(const fs::path& path) {
  KILN_TRY(check_writable(path));
  auto f = base_.create(path);
  if (!f) return std::move(f).error();
  {
    std::lock_guard<std::mutex> g(mu_);
    files_[path] = FileState{};
    unsynced_entries_.insert(path);
  }
  return std::unique_ptr<WritableFile>(new FaultWritableFile(*this, path, std::move(*f)));
}

Result<std::unique_ptr<ReadableFile>> FaultFileSystem::open_read(const fs::path& path) { return base_.open_read(path); }

Status FaultFileSystem::rename(const fs::path& from, const fs::path& to) {
  KILN_TRY(check_writable(to));
  KILN_TRY(base_.rename(from, to));
  std::lock_guard<std::mutex> g(mu_);
  if (auto it = files_.find(from); it != files_.end()) {
    files_[to] = it->second;
    files_.erase(it);
  } else {
    files_.erase(to);
  }
  unsynced_entries_.erase(from);
  unsynced_entries_.insert(to);
  return {};
}

Status FaultFileSystem::remove(const fs::path& path) {
  KILN_TRY(check_writable(path));
  KILN_TRY(base_.remove(path));
  std::lock_guard<std::mutex> g(mu_);
  files_.erase(path);
  unsynced_entries_.erase(path);
  return {};
}

Status FaultFileSystem::sync_dir(const fs::path& dir) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (fail_sync_) {
      ++injected_;
      return error_from_errno(EIO, "fsync folder " + dir.string() + " (injected)");
    }
  }
  KILN_TRY(base_.sync_dir(dir));
  std::lock_guard<std::mutex> g(mu_);
  for (auto it = unsynced_entries_.begin(); it != unsynced_entries_.end();) {
    if (it->parent_path() == dir) {
      it = unsynced_entries_.erase(it);
    } else {
      ++it;
    }
  }
  return {};
}

Status FaultFileSystem::create_dirs(const fs::path& dir) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (read_only_) {
      std::error_code ec;
      if (fs::is_directory(dir, ec)) return {};  // nothing to change
      ++injected_;
      return error_from_errno(EROFS, "create folder " + dir.string() + " (injected)");
    }
  }
  return base_.create_dirs(dir);
}

Result<std::vector<std::string>> FaultFileSystem::list_dir(const fs::path& dir) { return base_.list_dir(dir); }

Result<std::optional<std::uint64_t>> FaultFileSystem::file_size(const fs::path& path) { return base_.file_size(path); }

Status FaultFileSystem::truncate(const fs::path& path, std::uint64_t size) {
  KILN_TRY(check_writable(path));
  return base_.truncate(path, size);
}

Status FaultFileSystem::drop_unsynced_data() {
  std::map<fs::path, FileState> files;
  std::set<fs::path> entries;
  {
    std::lock_guard<std::mutex> g(mu_);
    files.swap(files_);
    entries.swap(unsynced_entries_);
  }
  for (const auto& [path, st] : files) {
    if (entries.count(path) != 0) continue;
    auto size = base_.file_size(path);
    if (size && *size && **size > st.synced_size) KILN_TRY(base_.truncate(path, st.synced_size));
  }
  for (const auto& path : entries) {
    auto st = base_.remove(path);
    if (!st && st.error().code != Errc::not_found) return st;
  }
  return {};
}

}  // namespace kiln::storage
