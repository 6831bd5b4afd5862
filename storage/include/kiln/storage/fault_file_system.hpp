// kiln/storage/fault_file_system.hpp — a FileSystem for tests that fails on demand.
//
// Wraps another FileSystem (the real one by default) and can:
//  - run out of space: appends fail with ENOSPC (Errc::no_space) once a byte budget is
//    spent, after writing what still fits, as a full disk does;
//  - fail every fsync (of files and folders) with EIO;
//  - act as a read-only file system: every change fails with EROFS;
//  - simulate a crash or power loss, as leveldb's fault_injection_test does:
//    drop_unsynced_data() truncates every file it saw written to its last synced size,
//    and deletes files whose creation or rename was not followed by an fsync of their
//    folder.
// Only what goes through this object is tracked. Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include "kiln/storage/file_system.hpp"

namespace kiln::storage {

class FaultFileSystem final : public FileSystem {
 public:
  // `base` is not owned and must outlive this object.
  explicit FaultFileSystem(FileSystem& base = real_file_system());

  // Appends fail with ENOSPC once `bytes` more bytes have been written (nullopt: no limit).
  void fail_writes_after(std::optional<std::uint64_t> bytes);
  void set_fail_sync(bool fail);
  void set_read_only(bool read_only);
  // Bytes written through this object so far.
  std::uint64_t bytes_written() const;
  // Counts of operations that were failed on purpose.
  std::uint64_t injected_failures() const;

  // Crash simulation; see the header comment. Stops tracking afterwards.
  Status drop_unsynced_data();

  Result<std::unique_ptr<WritableFile>> create(const std::filesystem::path& path) override;
  Result<std::unique_ptr<ReadableFile>> open_read(const std::filesystem::path& path) override;
  Status rename(const std::filesystem::path& from, const std::filesystem::path& to) override;
  Status remove(const std::filesystem::path& path) override;
  Status sync_dir(const std::filesystem::path& dir) override;
  Status create_dirs(const std::filesystem::path& dir) override;
  Result<std::vector<std::string>> list_dir(const std::filesystem::path& dir) override;
  Result<std::optional<std::uint64_t>> file_size(const std::filesystem::path& path) override;
  Status truncate(const std::filesystem::path& path, std::uint64_t size) override;

 private:
  friend class FaultWritableFile;
  struct FileState {
    std::uint64_t size = 0;         // bytes written so far
    std::uint64_t synced_size = 0;  // bytes that survive a crash
  };
  Status check_writable(const std::filesystem::path& path);
  // For FaultWritableFile: how many of `want` bytes may still be written.
  std::uint64_t take_budget(std::uint64_t want);
  void note_written(const std::filesystem::path& path, std::uint64_t end);
  Status note_sync(const std::filesystem::path& path);

  FileSystem& base_;
  mutable std::mutex mu_;
  // State below is protected by mu_.
  std::optional<std::uint64_t> budget_;
  bool fail_sync_ = false;
  bool read_only_ = false;
  std::uint64_t written_ = 0;
  std::uint64_t injected_ = 0;
  std::map<std::filesystem::path, FileState> files_;
  std::set<std::filesystem::path> unsynced_entries_;  // created/renamed since their folder's fsync
};

}  // namespace kiln::storage
