// kilnd's listening socket.
#include "unix_listener.hpp"

#include <fcntl.h>
#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kiln/daemon/server.hpp"

namespace kiln::daemon {

namespace {

sockaddr_un address_of(const std::filesystem::path& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  return addr;
}

// true if something accepts connections on `path`.
bool someone_listens(const std::filesystem::path& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return false;
  auto addr = address_of(path);
  return ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
}

}  // namespace

Result<UniqueFd> create_unix_listener(const std::filesystem::path& path, const AccessConfig& access) {
  if (path.string().size() >= sizeof(sockaddr_un{}.sun_path))
    return make_error(Errc::invalid_argument, "socket path " + path.string() + " is too long for a Unix socket");
  std::error_code ec;
  auto dir = path.parent_path();
  if (!dir.empty() && !std::filesystem::exists(dir, ec)) {
    std::filesystem::create_directories(dir, ec);
    if (ec) return make_error(errc_from_errno(ec.value()), "cannot create socket folder " + dir.string() + ": " + ec.message());
    ::chmod(dir.c_str(), ::geteuid() == 0 ? 0755 : 0700);
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return make_error(Errc::invalid_argument, path.string() + " exists and is not a socket; refusing to replace it");
    if (someone_listens(path))
      return make_error(Errc::busy, "another server is already listening on " + path.string());
    ::unlink(path.c_str());  // stale: left by a kilnd that did not exit cleanly
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return error_from_errno(errno, "socket(AF_UNIX)");
  auto addr = address_of(path);
  // The socket file gets kilnd's umask, then its intended mode right after. Not a narrower
  // umask around bind(): the umask is the process's, and kilnd's build probe creates folders
  // on its own thread meanwhile (they came out 0600: the compiler cache unusable, a flaky
  // test). Connecting needs write permission on the file, which a usual umask (022, 077)
  // withholds from others, and every connection is authorised by its peer credentials.
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return error_from_errno(errno, "bind " + path.string());
  if (::chmod(path.c_str(), access.socket_mode) != 0) return error_from_errno(errno, "chmod " + path.string());
  if (!access.socket_group.empty()) {
    gid_t gid;
    char* end = nullptr;
    unsigned long n = std::strtoul(access.socket_group.c_str(), &end, 10);
    if (*end == 0) {
      gid = static_cast<gid_t>(n);
    } else {
      std::vector<char> buf(65536);
      group gr{};
      group* out = nullptr;
      if (::getgrnam_r(access.socket_group.c_str(), &gr, buf.data(), buf.size(), &out) != 0 || !out)
        return make_error(Errc::invalid_argument, "access.socket_group: unknown group \"" + access.socket_group + "\"");
      gid = out->gr_gid;
    }
    if (::chown(path.c_str(), static_cast<uid_t>(-1), gid) != 0)
      return error_from_errno(errno, "chown socket to group " + access.socket_group);
  }
  if (::listen(fd.get(), 512) != 0) return error_from_errno(errno, "listen " + path.string());
  return fd;
}

Result<int> systemd_listen_fd() {
  const char* pid = std::getenv("LISTEN_PID");
  const char* fds = std::getenv("LISTEN_FDS");
  if (!pid || !fds) return -1;
  if (std::strtol(pid, nullptr, 10) != ::getpid()) return -1;
  long n = std::strtol(fds, nullptr, 10);
  if (n <= 0) return -1;
  if (n > 1)
    return make_error(Errc::invalid_argument, "systemd passed " + std::to_string(n) +
                                                  " sockets (LISTEN_FDS); kilnd.socket must declare exactly one");
  constexpr int kFirst = 3;  // SD_LISTEN_FDS_START
  ::fcntl(kFirst, F_SETFD, FD_CLOEXEC);
  ::unsetenv("LISTEN_PID");
  ::unsetenv("LISTEN_FDS");
  ::unsetenv("LISTEN_FDNAMES");
  return kFirst;
}

}  // namespace kiln::daemon
