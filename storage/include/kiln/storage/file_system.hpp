// kiln/storage/file_system.hpp — the file layer the blob store writes through.
//
// The store does every blob file operation through a FileSystem so that tests can put a
// fault-injecting one underneath (fault_file_system.hpp): full disks, failing fsyncs,
// lost unsynced data. The SQLite index does its own I/O and is not routed through here.
//
// Errors carry the path and the errno text; ENOSPC/EDQUOT map to Errc::no_space, EROFS
// to read_only, EACCES/EPERM to permission_denied, ENOENT to not_found (result.hpp).
//
// Thread safety: real_file_system() is safe for concurrent use. A WritableFile or
// ReadableFile is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kiln/result.hpp"

namespace kiln::storage {

// A file being written. Destroying it closes it without syncing.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Appends at the end.
  virtual Status append(std::span<const std::byte> data) = 0;
  // Overwrites bytes already written (the blob header, once the sizes are known).
  // invalid_argument if the range goes past what was appended.
  virtual Status write_at(std::uint64_t offset, std::span<const std::byte> data) = 0;
  // fsync: on success everything written so far survives a crash or power loss.
  virtual Status sync() = 0;
  virtual Status close() = 0;
};

// A file being read sequentially.
class ReadableFile {
 public:
  virtual ~ReadableFile() = default;
  // Reads up to buf.size() bytes; 0 at end of file.
  virtual Result<std::size_t> read(std::span<std::byte> buf) = 0;
  virtual Result<std::uint64_t> size() = 0;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  // Creates a new file (fails with io_error "exists" if it does), mode 0644.
  virtual Result<std::unique_ptr<WritableFile>> create(const std::filesystem::path& path) = 0;
  // not_found if missing.
  virtual Result<std::unique_ptr<ReadableFile>> open_read(const std::filesystem::path& path) = 0;
  // Atomically replaces `to` with `from` (rename(2)).
  virtual Status rename(const std::filesystem::path& from, const std::filesystem::path& to) = 0;
  // Removes a file; not_found if it was not there.
  virtual Status remove(const std::filesystem::path& path) = 0;
  // fsync of a folder, making renames and creations in it durable.
  virtual Status sync_dir(const std::filesystem::path& dir) = 0;
  // mkdir -p.
  virtual Status create_dirs(const std::filesystem::path& dir) = 0;
  // Names (not paths) of the entries of a folder; not_found if the folder is missing.
  virtual Result<std::vector<std::string>> list_dir(const std::filesystem::path& dir) = 0;
  // Size of a regular file; nullopt if missing.
  virtual Result<std::optional<std::uint64_t>> file_size(const std::filesystem::path& path) = 0;
  // Truncates a file to `size` bytes (used by fault injection and tests).
  virtual Status truncate(const std::filesystem::path& path, std::uint64_t size) = 0;
};

// The real file system (POSIX calls). Lives for the whole process.
FileSystem& real_file_system();

}  // namespace kiln::storage
