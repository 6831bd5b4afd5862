#include "fd.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

namespace kiln::client::detail {

Result<MemfdWriter> MemfdWriter::create(const char* name) {
  int fd = ::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return error_from_errno(errno, "memfd_create for a streamed artifact");
  return MemfdWriter(UniqueFd(fd));
}

Status MemfdWriter::write(std::span<const std::byte> data) {
  if (int err = posix::write_all(fd_.get(), data.data(), data.size()))
    return error_from_errno(err, "writing a streamed artifact to its memfd");
  return {};
}

Result<UniqueFd> MemfdWriter::seal() {
  if (::fcntl(fd_.get(), F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) != 0)
    return error_from_errno(errno, "sealing a streamed artifact's memfd");
  if (::lseek(fd_.get(), 0, SEEK_SET) < 0) return error_from_errno(errno, "rewinding a memfd");
  return std::move(fd_);
}

}  // namespace kiln::client::detail
