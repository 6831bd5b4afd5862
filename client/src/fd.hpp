// A file descriptor owner, and the sealed memfd that holds a streamed artifact.
#pragma once

#include <cstddef>
#include <span>
#include <utility>

#include "kiln/result.hpp"

namespace kiln::client::detail {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  int release() noexcept { return std::exchange(fd_, -1); }
  void reset(int fd = -1) noexcept;

 private:
  int fd_ = -1;
};

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
