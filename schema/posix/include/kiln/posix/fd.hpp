// kiln/posix/fd.hpp — the one copy of the low-level POSIX helpers every layer uses: an
// owned file descriptor, a retry-on-EINTR wrapper, and the write-all / read-full / pread-
// all loops. It knows nothing of kiln (no Result, no keys): errors are errno values, so the
// caller names the file and the operation in its own error.
//
// Thread safety: none needed (free functions; a UniqueFd is owned by one thread at a time).
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace kiln::posix {

// An owned file descriptor, closed on destruction; move-only. -1 is "none".
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
  // Closes the descriptor held (its close error is not reportable: POSIX leaves the fd
  // state unspecified after EINTR, and Linux has closed it) and holds `fd` instead.
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// Calls f() again while it fails with EINTR (f returns -1 and sets errno on failure, as
// system calls do); returns its last result. Not for close(): see UniqueFd::reset.
template <class F>
auto retry_eintr(F&& f) -> decltype(f()) {
  for (;;) {
    auto r = f();
    if (!(r == -1 && errno == EINTR)) return r;
  }
}

// Writes all `size` bytes; 0 on success, else the errno of the failed write.
inline int write_all(int fd, const void* data, std::size_t size) noexcept {
  auto* p = static_cast<const std::byte*>(data);
  while (size > 0) {
    ssize_t n = retry_eintr([&] { return ::write(fd, p, size); });
    if (n < 0) return errno;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return 0;
}

// Same at `offset` with pwrite (the file position is not moved).
inline int pwrite_all(int fd, const void* data, std::size_t size, std::uint64_t offset) noexcept {
  auto* p = static_cast<const std::byte*>(data);
  while (size > 0) {
    ssize_t n = retry_eintr([&] { return ::pwrite(fd, p, size, static_cast<off_t>(offset)); });
    if (n < 0) return errno;
    p += n;
    size -= static_cast<std::size_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
  return 0;
}

// Reads until `size` bytes or the end of the file; the count read (short only at the end),
// or -1 with errno set.
inline ssize_t read_full(int fd, void* data, std::size_t size) noexcept {
  auto* p = static_cast<std::byte*>(data);
  std::size_t done = 0;
  while (done < size) {
    ssize_t n = retry_eintr([&] { return ::read(fd, p + done, size - done); });
    if (n < 0) return -1;
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

// Same at `offset` with pread.
inline ssize_t pread_full(int fd, void* data, std::size_t size, std::uint64_t offset) noexcept {
  auto* p = static_cast<std::byte*>(data);
  std::size_t done = 0;
  while (done < size) {
    ssize_t n = retry_eintr([&] { return ::pread(fd, p + done, size - done, static_cast<off_t>(offset + done)); });
    if (n < 0) return -1;
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

}  // namespace kiln::posix
