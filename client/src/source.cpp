#include "kiln/client/source.hpp"

#include <unistd.h>

#include "kiln/posix/fd.hpp"

#include <cerrno>
#include <utility>

namespace kiln::client {

Source::Source(int fd, SourceInfo info) noexcept : fd_(fd), info_(std::move(info)) {}

Source::~Source() {
  if (fd_ >= 0) ::close(fd_);
}

Source::Source(Source&& other) noexcept : fd_(std::exchange(other.fd_, -1)), info_(std::move(other.info_)) {}

Source& Source::operator=(Source&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    info_ = std::move(other.info_);
  }
  return *this;
}

std::string Source::path() const { return "/proc/self/fd/" + std::to_string(fd_); }

Result<std::vector<std::byte>> Source::read_all() const {
  std::vector<std::byte> out(info_.size);
  ssize_t n = posix::pread_full(fd_, out.data(), out.size(), 0);
  if (n < 0) return error_from_errno(errno, "reading source " + info_.model_hash);
  if (static_cast<std::size_t>(n) < out.size())
    return make_error(Errc::io_error, "source " + info_.model_hash + " is shorter than its size " +
                                          std::to_string(info_.size));
  return out;
}

Status Source::write_to(int out_fd) const {
  std::vector<std::byte> buf(1u << 20);
  std::uint64_t off = 0;
  while (off < info_.size) {
    ssize_t n = posix::retry_eintr([&] { return ::pread(fd_, buf.data(), buf.size(), static_cast<off_t>(off)); });
    if (n < 0) return error_from_errno(errno, "reading source " + info_.model_hash);
    if (n == 0) return make_error(Errc::io_error, "source " + info_.model_hash + " is shorter than its size");
    if (int err = posix::write_all(out_fd, buf.data(), static_cast<std::size_t>(n)))
      return error_from_errno(err, "writing source " + info_.model_hash);
    off += static_cast<std::uint64_t>(n);
  }
  return {};
}

}  // namespace kiln::client
