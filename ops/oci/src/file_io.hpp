// The few POSIX calls the OCI code needs, as Results naming the file (over kiln/posix/fd.hpp).
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

#include "kiln/posix/fd.hpp"
#include "kiln/result.hpp"

namespace kiln::oci::detail {

using posix::UniqueFd;

inline Result<UniqueFd> open_fd(const std::filesystem::path& path, int flags, mode_t mode = 0644) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  if (fd < 0) return error_from_errno(errno, "open " + path.string());
  return UniqueFd(fd);
}

inline Status write_all(int fd, std::span<const std::byte> data, const std::string& what) {
  if (int err = posix::write_all(fd, data.data(), data.size())) return error_from_errno(err, "write " + what);
  return {};
}

// Reads exactly out.size() bytes at `offset`; a short read is `corrupt` (file truncated).
inline Status pread_all(int fd, std::span<std::byte> out, std::uint64_t offset, const std::string& what) {
  ssize_t n = posix::pread_full(fd, out.data(), out.size(), offset);
  if (n < 0) return error_from_errno(errno, "read " + what);
  if (static_cast<std::size_t>(n) < out.size()) return make_error(Errc::corrupt, what + ": file ends early (truncated)");
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
