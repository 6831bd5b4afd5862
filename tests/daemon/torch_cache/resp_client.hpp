// A Redis-protocol client over a raw socket, for driving kilnd's torch cache listener byte
// by byte in tests (deliberately not redis-py: these tests send what a library never would).
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "unix_socket.hpp"

namespace kiln::test {

// One reply. `type` is its RESP type byte: + - : $ * % _ (a RESP2 null bulk is '$' with
// null set).
struct RespReply {
  char type = 0;
  std::string text;                // simple string, error, integer digits, or bulk bytes
  bool null = false;               // $-1 or *-1
  std::vector<RespReply> items;    // array elements; map keys and values alternating
  // For a map (or a RESP2 flat key/value array): the value under `key`, or nullptr.
  const RespReply* get(const std::string& key) const;
};

class RespClient : public UnixStream {
 public:
  using UnixStream::UnixStream;  // connects to a socket path; throws if it cannot

  bool send_raw(std::string_view bytes);
  // Sends a command as an array of bulk strings.
  bool send(const std::vector<std::string>& args);
  // Next reply, or nullopt on timeout or a closed connection (closed() tells which).
  std::optional<RespReply> recv(std::chrono::milliseconds timeout = std::chrono::seconds(20));
  std::optional<RespReply> call(const std::vector<std::string>& args) {
    if (!send(args)) return std::nullopt;
    return recv();
  }
  // True once the peer has closed within `timeout` and nothing but EOF arrived; bytes that
  // did arrive before the close are kept in `unread()`.
  bool wait_closed(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  bool closed() const { return closed_; }
  const std::string& unread() const { return buf_; }

 private:
  bool fill(std::chrono::steady_clock::time_point deadline);
  std::optional<RespReply> parse(std::size_t& pos, bool& incomplete) const;
  std::string buf_;
  bool closed_ = false;
};

}  // namespace kiln::test
