#include "connection.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace kiln::client::detail {

namespace {
constexpr int kMaxFdsPerRead = 8;
}

Deadline deadline_after(std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) return std::nullopt;
  return Clock::now() + timeout;
}

Result<Connection> Connection::open(const std::filesystem::path& socket, Deadline deadline) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string path = socket.string();
  if (path.empty() || path.size() >= sizeof(addr.sun_path))
    return make_error(Errc::invalid_argument, "socket path '" + path + "' is empty or longer than " +
                                                  std::to_string(sizeof(addr.sun_path) - 1) + " bytes");
  std::memcpy(addr.sun_path, path.data(), path.size());

  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return error_from_errno(errno, "socket()");
  Connection conn(std::move(fd), socket);
  if (::connect(conn.fd_.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    if (err == EAGAIN || err == EINPROGRESS) {
      // The daemon's accept backlog is full: wait for it within the deadline.
      KILN_TRY(conn.wait(POLLOUT, deadline, "connecting"));
      socklen_t len = sizeof(err);
      if (::getsockopt(conn.fd_.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (err == 0) return conn;
    }
    if (err == EACCES || err == EPERM)
      return make_error(Errc::permission_denied,
                        "no permission to connect to kilnd's socket " + path +
                            " (its file mode and group decide who may; ask to be added to its group)");
    return make_error(Errc::unavailable, "kilnd is not running on " + path + " (connect: " +
                                             std::strerror(err) +
                                             "); start kilnd, or point KILN_SOCKET / --socket at its socket");
  }
  return conn;
}

Error Connection::lost(int err, const char* what) const {
  std::string why = err == 0 ? "the daemon closed the connection" : std::strerror(err);
  return make_error(Errc::unavailable, std::string("connection to kilnd on ") + socket_.string() + " lost while " +
                                           what + " (" + why +
                                           "); the daemon may be restarting or shutting down — the next call reconnects");
}

Status Connection::wait(short events, Deadline deadline, const char* what) {
  for (;;) {
    int timeout_ms = -1;
    if (deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now()).count();
      if (left <= 0)
        return make_error(Errc::timeout, std::string("kilnd on ") + socket_.string() + " did not answer in time while " + what);
      timeout_ms = static_cast<int>(std::min<long long>(left, 1 << 30));
    }
    pollfd p{fd_.get(), events, 0};
    int n = ::poll(&p, 1, timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      return error_from_errno(errno, "poll on kilnd's socket");
    }
    if (n == 0) continue;  // loop re-checks the deadline
    return {};             // readable/writable or error/hangup: the next call reports which
  }
}

bool Connection::readable() {
  pollfd p{fd_.get(), POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

bool Connection::peer_closed() {
  pollfd p{fd_.get(), POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR)) return true;
  char byte;
  ssize_t n = ::recv(fd_.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
}

template <class Io>
Result<std::size_t> Connection::transfer(short events, Deadline deadline, const char* what, Io&& io) {
  for (;;) {
    const ssize_t n = posix::retry_eintr(io);
    if (n >= 0) return static_cast<std::size_t>(n);
    if (errno != EAGAIN) return lost(errno, what);
    KILN_TRY(wait(events, deadline, what));
  }
}

Status Connection::send_all(std::span<const std::byte> data, Deadline deadline) {
  while (!data.empty()) {
    auto n = transfer(POLLOUT, deadline, "sending a request",
                      [&] { return ::send(fd_.get(), data.data(), data.size(), MSG_NOSIGNAL); });
    if (!n) return std::move(n).error();
    data = data.subspan(*n);
  }
  return {};
}

Status Connection::send_all(std::span<const std::byte> head, std::span<const std::byte> body, Deadline deadline) {
  while (!head.empty()) {
    iovec iov[2] = {{const_cast<std::byte*>(head.data()), head.size()},
                    {const_cast<std::byte*>(body.data()), body.size()}};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = body.empty() ? 1 : 2;
    auto n = transfer(POLLOUT, deadline, "sending a request", [&] { return ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL); });
    if (!n) return std::move(n).error();
    const std::size_t sent = *n;
    if (sent < head.size()) {
      head = head.subspan(sent);
      continue;
    }
    body = body.subspan(sent - head.size());
    head = {};
  }
  return send_all(body, deadline);
}

Status Connection::recv_exact(std::span<std::byte> data, Deadline deadline, std::vector<UniqueFd>* fds) {
  while (!data.empty()) {
    iovec iov{data.data(), data.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerRead)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    auto n = transfer(POLLIN, deadline, "waiting for a reply", [&] { return ::recvmsg(fd_.get(), &msg, MSG_CMSG_CLOEXEC); });
    if (!n) return std::move(n).error();
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        UniqueFd owned(fd);
        if (fds != nullptr) fds->push_back(std::move(owned));
      }
    }
    if (msg.msg_flags & MSG_CTRUNC)
      return make_error(Errc::protocol_error, "kilnd sent more descriptors than one reply may carry");
    if (*n == 0) return lost(0, "waiting for a reply");
    data = data.subspan(*n);
  }
  return {};
}

}  // namespace kiln::client::detail
