// kiln/client/source.hpp — sources (torch.export archives that builds start from, keyed by
// model hash; schema/sources.md) as libkiln sees them: their metadata, a listing page,
// and a fetched source's bytes.
//
// A Source owns one read-only file descriptor holding the archive's bytes, verified by
// the daemon against their SHA-256 before handing them over (a sealed memfd, passed with
// SCM_RIGHTS, or filled by libkiln from the streamed bytes). The bytes never change while
// the Source lives. Move-only; the destructor closes the descriptor.
// Thread safety: const members may be called from several threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/digest.hpp"
#include "kiln/result.hpp"

namespace kiln::client {

// A registered source: the torch.export archive builds start from, by model hash.
struct SourceInfo {
  std::string model_hash;
  Digest blob_digest;                 // SHA-256 of the archive's bytes
  std::uint64_t size = 0;
  std::int64_t created_at = 0;        // unix seconds
  std::string name;                   // the file name it was registered from
  std::uint64_t stored_size = 0;      // its blob on the daemon's disk; 0 = not reported
  // Names later registrations of the same program gave it (e.g. a second kiln.torch
  // fingerprint), in name order; kilnd keeps at most 64.
  std::vector<std::string> aliases;
};

// Which sources list_sources() returns.
struct SourceQuery {
  // Lowercase hex, 0 to 64 characters: only sources whose model hash starts with it.
  // Anything else is invalid_argument (checked before anything is sent).
  std::string model_hash_prefix;
  std::size_t limit = 1000;           // page size; the daemon allows at most 10000
  std::size_t offset = 0;
};

struct SourcePage {
  std::vector<SourceInfo> sources;    // ordered by model hash
  // Offset of the next page, or nullopt when this page was the last.
  std::optional<std::size_t> next_offset;
};

class Source {
 public:
  // Takes ownership of `fd` (closed by the destructor).
  Source(int fd, SourceInfo info) noexcept;
  ~Source();
  Source(Source&& other) noexcept;
  Source& operator=(Source&& other) noexcept;
  Source(const Source&) = delete;
  Source& operator=(const Source&) = delete;

  // The descriptor, still owned by the Source; pread() it from offset 0.
  int fd() const noexcept { return fd_; }
  std::uint64_t size() const noexcept { return info_.size; }
  // "/proc/self/fd/N": valid in this process while the Source lives.
  std::string path() const;
  const SourceInfo& info() const noexcept { return info_; }

  // The whole archive in memory. io_error if the descriptor fails or is short.
  Result<std::vector<std::byte>> read_all() const;
  // Writes the whole archive to `out_fd` (a file, a pipe, stdout) from its current
  // position. io_error (naming the failing call) if a read or a write fails; what was
  // written then is incomplete and must be discarded.
  Status write_to(int out_fd) const;

 private:
  int fd_ = -1;
  SourceInfo info_;
};

}  // namespace kiln::client
