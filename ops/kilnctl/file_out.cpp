// Writing handed-over bytes to a file or stdout. See file_out.hpp.
#include "kilnctl/file_out.hpp"

#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "kiln/posix/fd.hpp"

namespace kiln::ctl {

// Copies all of `from` (size bytes from offset 0) to `to`: sendfile where the kernel
// allows it, read/write otherwise.
Status copy_fd(int from, int to, std::uint64_t size, const OnProgress& on_progress) {
  constexpr std::uint64_t kStep = 8ull << 20;  // one sendfile at most: progress between them
  off_t offset = 0;
  while (static_cast<std::uint64_t>(offset) < size) {
    const std::uint64_t want = std::min<std::uint64_t>(kStep, size - static_cast<std::uint64_t>(offset));
    ssize_t n = posix::retry_eintr([&] { return ::sendfile(to, from, &offset, want); });
    if (n > 0) {
      if (on_progress) on_progress(static_cast<std::uint64_t>(offset));
      continue;
    }
    if (n < 0 && (errno == EINVAL || errno == ENOSYS)) break;  // fall back below
    if (n == 0) return make_error(Errc::io_error, "the bytes ended early while copying");
    return error_from_errno(errno, "writing the output");
  }
  char buf[1 << 16];
  while (static_cast<std::uint64_t>(offset) < size) {
    ssize_t n = posix::retry_eintr([&] { return ::pread(from, buf, sizeof(buf), offset); });
    if (n <= 0) return n == 0 ? make_error(Errc::io_error, "the bytes ended early") : error_from_errno(errno, "reading the bytes kilnd handed over");
    if (int err = posix::write_all(to, buf, static_cast<std::size_t>(n))) return error_from_errno(err, "writing the output");
    offset += n;
    if (on_progress) on_progress(static_cast<std::uint64_t>(offset));
  }
  return {};
}

// Writes the artifact to `path` through a temporary file renamed into place, so a
// failed or interrupted get never leaves a partial file under the final name. Only a
// regular file (or a new name) is replaced that way: a device, FIFO, socket or terminal
// is written into (replacing /dev/null with a regular file breaks a machine), and a
// symbolic link keeps pointing where it did, at a file that now holds the bytes.
Status write_fd_to_file(int from, std::uint64_t size, const std::filesystem::path& path, const OnProgress& on_progress) {
  struct stat st_path{};
  if (::stat(path.c_str(), &st_path) == 0 && !S_ISREG(st_path.st_mode)) {
    if (S_ISDIR(st_path.st_mode)) return make_error(Errc::invalid_argument, path.string() + " is a folder");
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return error_from_errno(errno, "opening " + path.string());
    Status st = copy_fd(from, fd, size, on_progress);
    if (::close(fd) != 0 && st) st = error_from_errno(errno, "closing " + path.string());
    return st;
  }
  std::error_code ec;
  std::filesystem::path target = path;
  if (std::filesystem::is_symlink(path, ec)) {
    target = std::filesystem::weakly_canonical(path, ec);
    if (ec) return make_error(Errc::io_error, "resolving the link " + path.string() + ": " + ec.message());
  }
  auto tmp = target;
  tmp += ".kiln-tmp-" + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return error_from_errno(errno, "creating " + tmp.string());
  Status st = copy_fd(from, fd, size, on_progress);
  if (st && ::fsync(fd) != 0) st = error_from_errno(errno, "fsync of " + tmp.string());
  if (::close(fd) != 0 && st) st = error_from_errno(errno, "closing " + tmp.string());
  if (st && ::rename(tmp.c_str(), target.c_str()) != 0) st = error_from_errno(errno, "renaming into " + target.string());
  if (!st) ::unlink(tmp.c_str());
  return st;
}

}  // namespace kiln::ctl
