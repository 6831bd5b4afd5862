// Uncompressed, verified copies of artifacts in sealed memfds: what a hit hands over.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>
#include <string>

#include "kiln/daemon/artifact_meta.hpp"
#include "kiln/protocol/messages.hpp"
#include "kiln/result.hpp"
#include "kiln/storage/store.hpp"
#include "kiln/posix/fd.hpp"

namespace kiln::daemon {

using posix::UniqueFd;

// One verified copy. Immutable once made: the memfd is sealed against writes, growing
// and shrinking, so every descriptor handed out sees the same bytes for as long as the
// client keeps it. Shared between the hot set and requests being answered.
struct ArtifactCopy {
  UniqueFd memfd;                  // sealed, O_RDWR in kilnd only; clients get reopen_read_only()
  std::uint64_t size = 0;
  protocol::ArtifactMeta meta;
  // The bytes themselves when size <= kKeepBytesMax: an inline hit (GET "auto") then
  // costs no read of the memfd. Empty for larger copies.
  std::string bytes;
  static constexpr std::uint64_t kKeepBytesMax = 64u << 10;

  ArtifactCopy() = default;
  ~ArtifactCopy();
  ArtifactCopy(const ArtifactCopy&) = delete;
  ArtifactCopy& operator=(const ArtifactCopy&) = delete;

  // A fresh read-only open file description of the memfd (its own file offset), for
  // handing to one client. io_error if the reopen fails (e.g. out of descriptors).
  Result<UniqueFd> reopen_read_only() const;
  // Same, from a few opened ahead of time (refill()) when there are any. Thread-safe.
  Result<UniqueFd> take_read_only() const;
  bool spares_low() const;
  // Opens read-only descriptions up to kSpares. Thread-safe; call off the event loop.
  void refill() const;

 private:
  static constexpr std::size_t kSpares = 4;
  mutable std::mutex spares_mu_;
  mutable std::vector<int> spares_;  // guarded by spares_mu_; each handed out once
};

// A new sealed memfd named `name`, filled by `read`: it streams verified bytes into the
// sink it is given and returns how many it promised, or nullopt when there is nothing to
// read (then the result is a null copy). `what` names the thing in errors ("artifact
// <digest>"). Keeps the bytes in memory too when small (ArtifactCopy::bytes). Blocking.
using CopyReader = std::function<Result<std::optional<std::uint64_t>>(const storage::ByteSink& sink)>;
Result<std::shared_ptr<ArtifactCopy>> make_sealed_copy(const std::string& name, const std::string& what,
                                                       const CopyReader& read);

// Reads `key_digest` from the store (verifying its digest) into a new sealed memfd.
// nullopt when the store has no such artifact. Blocks on disk: call off the event loop.
Result<std::shared_ptr<const ArtifactCopy>> make_copy_or_null(storage::Store& store, const Digest& key_digest,
                                                             storage::Access access = storage::Access::counted);

}  // namespace kiln::daemon
