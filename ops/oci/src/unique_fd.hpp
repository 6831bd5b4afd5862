// Owning file descriptor and the few POSIX calls the OCI code needs, as Results.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <utility>

#include "kiln/result.hpp"

namespace kiln::oci::detail {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
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
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

inline Result<UniqueFd> open_fd(const std::filesystem::path& path, int flags, mode_t mode = 0644) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  if (fd < 0) return error_from_errno(errno, "open " + path.string());
  return UniqueFd(fd);
}

inline Status write_all(int fd, std::span<const std::byte> data, const std::string& what) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return error_from_errno(errno, "write " + what);
    }
    data = data.subspan(static_cast<std::size_t>(n));
  }
  return {};
}

// Reads exactly out.size() bytes at `offset`; a short read is `corrupt` (file truncated).
inline Status pread_all(int fd, std::span<std::byte> out, std::uint64_t offset, const std::string& what) {
  while (!out.empty()) {
    ssize_t n = ::pread(fd, out.data(), out.size(), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return error_from_errno(errno, "read " + what);
    }
    if (n == 0) return make_error(Errc::corrupt, what + ": file ends early (truncated)");
    out = out.subspan(static_cast<std::size_t>(n));
    offset += static_cast<std::uint64_t>(n);
  }
  return {};
}

inline Status fsync_fd(int fd, const std::string& what) {
  if (::fsync(fd) != 0) return error_from_errno(errno, "fsync " + what);
  return {};
}

inline Status fsync_dir(const std::filesystem::path& dir) {
  auto fd = open_fd(dir, O_RDONLY | O_DIRECTORY);
  if (!fd) return std::move(fd).error();
  return fsync_fd(fd->get(), dir.string());
}

}  // namespace kiln::oci::detail
