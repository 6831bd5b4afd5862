// The sealed memfd that holds a streamed artifact (file descriptors: kiln/posix/fd.hpp).
#pragma once

#include <cstddef>
#include <span>
#include <utility>

#include "kiln/posix/fd.hpp"
#include "kiln/result.hpp"

namespace kiln::client::detail {

using posix::UniqueFd;

// A memfd that receives a streamed artifact; seal() makes it read-only for good
// (F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL), the same guarantee the
// daemon's descriptors give.
class MemfdWriter {
 public:
  static Result<MemfdWriter> create(const char* name);
  Status write(std::span<const std::byte> data);
  // Seals and hands over the descriptor.
  Result<UniqueFd> seal();

 private:
  explicit MemfdWriter(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

}  // namespace kiln::client::detail
