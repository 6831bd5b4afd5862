// kiln/oci/tar.hpp — POSIX ustar archives, written and read without a tar program.
//
// Written archives are reproducible: uid/gid 0, mtime 0, mode 0644 files / 0755 folders,
// ustar names (a name of up to 255 bytes is split into prefix + name), sizes of 8 GiB and
// more in the GNU base-256 size field. Format notes: schema/oci-layout.md, "The tar form".
//
// Thread safety: neither class is safe for concurrent use; one per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/result.hpp"

namespace kiln::oci {

// Receives bytes in order. Returning an error stops the read that feeds it.
using ByteSink = std::function<Status(std::span<const std::byte>)>;

// Writes an archive to a file it creates (an existing file is an error: invalid_argument).
// Entries are streamed: begin_file() with the size up front, write() the bytes, end_file().
// Any failed call leaves the writer failed; every later call returns that error. The file
// is not removed on failure or destruction: the caller owns the path (LayoutWriter writes
// to a temporary name and renames).
class TarWriter {
 public:
  static Result<TarWriter> create(const std::filesystem::path& file);
  TarWriter(TarWriter&&) noexcept;
  TarWriter& operator=(TarWriter&&) noexcept;
  ~TarWriter();

  // `name` relative, '/'-separated, no "." or ".." parts (invalid_argument otherwise).
  Status add_directory(std::string_view name);
  Status begin_file(std::string_view name, std::uint64_t size);
  // More bytes than announced is invalid_argument.
  Status write(std::span<const std::byte> data);
  // Fewer bytes than announced is invalid_argument.
  Status end_file();
  Status add_file(std::string_view name, std::span<const std::byte> data);
  // Writes the end-of-archive marker, fsyncs and closes. The writer is then spent.
  Status finish();

 private:
  struct Impl;
  explicit TarWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct TarEntry {
  enum class Type { file, directory };
  std::string name;            // normalized: no "./" prefix, no trailing '/'
  Type type = Type::file;
  std::uint64_t size = 0;      // bytes of data (0 for folders)
  std::uint64_t data_offset = 0;  // where the data starts in the archive file
};

// Reads an archive: open() scans every header once (seeking past data), then any entry's
// bytes can be read by name. Accepts ustar and GNU headers, pax 'x' headers (path and size
// are honoured), GNU long names ('L'), global pax headers (ignored), a "./" prefix.
// Rejects (invalid_argument / corrupt, naming the entry): bad header checksums, links,
// devices, fifos, absolute names, names with "..", duplicate names, data past the end of
// the file (a truncated archive).
class TarReader {
 public:
  static Result<TarReader> open(const std::filesystem::path& file);
  TarReader(TarReader&&) noexcept;
  TarReader& operator=(TarReader&&) noexcept;
  ~TarReader();

  const std::vector<TarEntry>& entries() const;
  const TarEntry* find(std::string_view name) const;  // nullptr when absent
  // Streams the entry's bytes to `sink` in chunks.
  Status read(const TarEntry& entry, const ByteSink& sink) const;

 private:
  struct Impl;
  explicit TarReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Validates and normalizes an archive member name (shared by writer and reader):
// strips "./" and a trailing '/', rejects empty, absolute, "." / ".." parts.
Result<std::string> normalize_member_name(std::string_view name);

}  // namespace kiln::oci
