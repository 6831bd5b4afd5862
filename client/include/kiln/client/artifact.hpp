// kiln/client/artifact.hpp — an artifact handed over by kilnd, and its metadata.
//
// An Artifact holds the artifact's uncompressed, verified bytes in one of two ways:
//  - a read-only file descriptor: on a local socket the daemon passes it (SCM_RIGHTS) to
//    a sealed memfd or read-only file; with the streaming fallback libkiln receives the
//    bytes into a sealed memfd of its own;
//  - in memory (in_memory()): a small artifact that arrived inline (Transfer::automatic);
//    the first fd() or path() call makes a sealed memfd of it.
// Either way the bytes never change while the Artifact lives.
//
// Ownership: move-only; the destructor closes the descriptor and unmaps any mapping.
// Anything that still needs the bytes after that (a loaded AOTInductor package, say)
// must have opened its own copy — e.g. through path() while the Artifact is alive.
// Thread safety: const members may be called from several threads at once; map() is
// the exception (it caches the mapping) and must not race with itself or with moves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "kiln/digest.hpp"
#include "kiln/key.hpp"
#include "kiln/result.hpp"

namespace kiln::client {

// What the daemon knows about a stored artifact (stat, list, get, put).
struct ArtifactInfo {
  Key key;                            // complete: node fields filled by the daemon
  Digest key_digest;
  Digest blob_digest;                 // SHA-256 of the uncompressed bytes
  std::uint64_t size = 0;             // uncompressed bytes
  std::uint64_t stored_size = 0;      // compressed bytes on the daemon's disk
  std::int64_t created_at = 0;        // unix seconds
  std::int64_t last_access = 0;       // unix seconds
  std::uint64_t hits = 0;
  double build_seconds = 0;
  bool pinned = false;
  // Where the daemon got it: "build", "put", "registry" (pulled from the fleet, its
  // signature verified), "import"; "" = not recorded. signer: for "registry", the key.
  std::string origin;
  std::string signer;
};

class Artifact {
 public:
  // Takes ownership of `fd` (closed by the destructor). Used by Client; tests may wrap
  // any read-only descriptor.
  Artifact(int fd, ArtifactInfo info) noexcept;
  // Holds `bytes` (exactly info.size of them) in memory.
  Artifact(std::vector<std::byte> bytes, ArtifactInfo info);
  ~Artifact();
  Artifact(Artifact&& other) noexcept;
  Artifact& operator=(Artifact&& other) noexcept;
  Artifact(const Artifact&) = delete;
  Artifact& operator=(const Artifact&) = delete;

  // The descriptor; still owned by the Artifact. Read it with pread() (offset 0 is the
  // first byte) or mmap() it read-only; its file offset is shared with path() users.
  // In memory: the first call makes a sealed memfd copy; -1 if the system refuses one
  // (out of descriptors or memory) — map() and read_all() still work then.
  int fd() const noexcept;
  std::uint64_t size() const noexcept { return info_.size; }
  // True when the bytes arrived inline and live in this object.
  bool in_memory() const noexcept { return lazy_ != nullptr; }
  // "/proc/self/fd/N": lets libraries that take a file name (libtorch's package loader)
  // open the artifact without a copy. Valid only in this process while the Artifact lives.
  // Empty if fd() is -1.
  std::string path() const;
  const Key& key() const noexcept { return info_.key; }
  const ArtifactInfo& info() const noexcept { return info_; }

  // The whole artifact, read into memory. io_error if the descriptor fails.
  Result<std::vector<std::byte>> read_all() const;
  // A read-only view of the whole artifact, kept until the Artifact is destroyed: a
  // mapping of the descriptor, or the bytes themselves when in memory. An empty span for
  // a 0-byte artifact. io_error if mmap fails.
  Result<std::span<const std::byte>> map();

 private:
  void release() noexcept;

  // In-memory artifacts only: the bytes, and the descriptor made from them on demand.
  struct Lazy {
    std::vector<std::byte> bytes;
    std::mutex mu;  // guards the making of fd_
  };

  mutable int fd_ = -1;
  ArtifactInfo info_;
  void* mapping_ = nullptr;
  std::unique_ptr<Lazy> lazy_;
};

}  // namespace kiln::client
