// Uncompressed, verified copies of artifacts in sealed memfds: what a hit hands over.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kiln/protocol/messages.hpp"
#include "kiln/result.hpp"
#include "kiln/storage/store.hpp"
#include "unique_fd.hpp"

namespace kiln::daemon {

// One verified copy. Immutable once made: the memfd is sealed against writes, growing
// and shrinking, so every descriptor handed out sees the same bytes for as long as the
// client keeps it. Shared between the hot set and requests being answered.
struct ArtifactCopy {
  UniqueFd memfd;                  // sealed, O_RDWR in kilnd only; clients get reopen_read_only()
  std::uint64_t size = 0;
  protocol::ArtifactMeta meta;

  // A fresh read-only open file description of the memfd (its own file offset), for
  // handing to one client. io_error if the reopen fails (e.g. out of descriptors).
  Result<UniqueFd> reopen_read_only() const;
};

// Reads `key_digest` from the store (verifying its digest) into a new sealed memfd.
// nullopt when the store has no such artifact. Blocks on disk: call off the event loop.
Result<std::shared_ptr<const ArtifactCopy>> make_copy_or_null(storage::Store& store, const Digest& key_digest);

// Converts the store's record to the wire's.
protocol::ArtifactMeta to_meta(const storage::ArtifactInfo& info);

}  // namespace kiln::daemon
