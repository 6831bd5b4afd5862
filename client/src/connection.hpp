// One Unix stream socket to kilnd: whole-buffer sends and exact reads with deadlines,
// and descriptors received with SCM_RIGHTS. Knows nothing of frames (client.cpp does).
//
// Every failure of the peer (refused, reset, closed, broken pipe) is Errc::unavailable
// with a message naming the socket; after any error the connection is unusable and the
// owner drops it.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <span>
#include <vector>

#include "fd.hpp"
#include "kiln/result.hpp"

namespace kiln::client::detail {

using Clock = std::chrono::steady_clock;
// nullopt = no deadline.
using Deadline = std::optional<Clock::time_point>;

Deadline deadline_after(std::chrono::milliseconds timeout);

class Connection {
 public:
  static Result<Connection> open(const std::filesystem::path& socket, Deadline deadline);

  Status send_all(std::span<const std::byte> data, Deadline deadline);
  // Sends `head` then `body` with one sendmsg where the socket takes it all, so a frame
  // header and its body reach the daemon together.
  Status send_all(std::span<const std::byte> head, std::span<const std::byte> body, Deadline deadline);
  // Reads exactly data.size() bytes. Descriptors that arrive with them are appended to
  // `fds` (closed if `fds` is null: a peer cannot leak descriptors into this process).
  Status recv_exact(std::span<std::byte> data, Deadline deadline, std::vector<UniqueFd>* fds);

  // Without blocking: whether bytes (or a hang-up) are waiting to be read.
  bool readable();
  // Without blocking: whether the daemon has closed its end (nothing more can come).
  bool peer_closed();

  const std::filesystem::path& socket() const { return socket_; }

 private:
  Connection(UniqueFd fd, std::filesystem::path socket) : fd_(std::move(fd)), socket_(std::move(socket)) {}
  Status wait(short events, Deadline deadline, const char* what);
  Error lost(int err, const char* what) const;
  // Runs `io` (a send/recv system call on the non-blocking socket) until it moves bytes:
  // again after EINTR (kiln_posix's retry_eintr), after waiting for `events` on EAGAIN;
  // the count it moved, or the connection lost.
  template <class Io>
  Result<std::size_t> transfer(short events, Deadline deadline, const char* what, Io&& io);

  UniqueFd fd_;
  std::filesystem::path socket_;
};

}  // namespace kiln::client::detail
