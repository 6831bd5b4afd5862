// A test's own Unix stream socket, connected to `path`: the raw clients that speak kiln's
// frames or RESP to a real kilnd. Throws std::runtime_error naming the path and the
// reason when it cannot connect (kilnd not there yet, or gone). The caller owns the fd.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace kiln::test {

inline int connect_unix(const std::filesystem::path& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int e = errno;
    ::close(fd);
    throw std::runtime_error("cannot connect to " + path.string() + ": " + std::strerror(e));
  }
  return fd;
}

}  // namespace kiln::test
