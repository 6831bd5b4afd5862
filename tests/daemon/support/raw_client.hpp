// A protocol client over a raw Unix socket, for driving kilnd byte by byte in tests
// (deliberately not libkiln: these tests send what a correct client never would).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

#include "kiln/key.hpp"
#include "kiln/protocol/frame.hpp"
#include "unix_socket.hpp"

namespace kiln::test {

struct RawFrame {
  protocol::FrameHeader header;
  std::string body;
  int fd = -1;   // owned by the caller when >= 0
};

class RawClient : public UnixStream {
 public:
  using UnixStream::UnixStream;  // connects to a socket path; throws if it cannot
  ~RawClient();

  bool send_bytes(const void* data, std::size_t n);
  bool send_frame(protocol::MsgType type, std::uint32_t id, std::string_view body, std::uint16_t flags = 0);
  // Next frame, or nullopt on timeout / closed connection (closed() tells which).
  std::optional<RawFrame> recv(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // True once the peer has closed (reads return 0 / ECONNRESET) within `timeout`.
  bool wait_closed(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  bool closed() const { return closed_; }

  // HELLO; returns the reply body (throws on error reply).
  std::string hello();
  // A request and its one reply frame.
  RawFrame call(protocol::MsgType type, std::string_view body, std::uint16_t flags = 0);
  // PUT of `bytes` in chunks of `chunk` bytes; the reply.
  RawFrame put(const Key& key, const std::string& bytes, std::size_t chunk = 1 << 20);
  std::uint32_t next_id() { return ++id_; }

 private:
  bool recv_exact(void* buf, std::size_t n, std::chrono::steady_clock::time_point deadline);
  // One recvmsg into `into` (or the read-ahead buffer); descriptors go to fds_.
  ssize_t recv_some(char* into, std::size_t n, std::chrono::steady_clock::time_point deadline);
  std::vector<char> rbuf_ = std::vector<char>(256 * 1024);  // read-ahead, like a real client
  std::size_t rpos_ = 0, rlen_ = 0;
  std::vector<int> fds_;  // received, not yet claimed by an FD frame
  std::chrono::milliseconds rcv_timeout_{0};
  bool closed_ = false;
  std::uint32_t id_ = 0;
};

// A complete key (every field set) whose model hash is derived from `seed`.
Key test_key(const std::string& seed);
// Reads all of an fd with pread from 0.
std::string read_fd(int fd);

}  // namespace kiln::test
