// A test's own Unix stream socket, connected to `path`: the raw clients that speak kiln's
// frames or RESP to a real kilnd. connect_unix throws std::runtime_error naming the path
// and the reason when it cannot connect (kilnd not there yet, or gone); the caller owns
// the fd it returns.
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

// An owned connection to a Unix stream socket (connect_unix): the raw clients' base, which
// closes it. Not copyable.
class UnixStream {
 public:
  explicit UnixStream(const std::filesystem::path& path) : fd_(connect_unix(path)) {}
  ~UnixStream() { ::close(fd_); }
  UnixStream(const UnixStream&) = delete;
  UnixStream& operator=(const UnixStream&) = delete;
  int fd() const { return fd_; }

 protected:
  const int fd_;
};

}  // namespace kiln::test
