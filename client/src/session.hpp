// A Session is a Client's connection to kilnd with its hello done: it sends request
// frames and reads the frames of their replies (schema/protocol.md). It holds at most one
// live Connection and drops it on any transport or framing error, so the next request
// connects again. Not thread-safe: Client serializes calls to it.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "connection.hpp"
#include "fd.hpp"
#include "kiln/client/client.hpp"
#include "kiln/protocol/frame.hpp"
#include "kiln/protocol/messages.hpp"
#include "kiln/result.hpp"

namespace kiln::client::detail {

// One frame received, with the descriptor that came with it (if its FD flag was set).
struct Received {
  protocol::FrameHeader header;
  std::vector<std::byte> body;
  UniqueFd fd;
  std::string_view text() const { return {reinterpret_cast<const char*>(body.data()), body.size()}; }
};

class Session {
 public:
  Session(std::filesystem::path socket, ConnectOptions options);

  // Connects and says hello unless a live connection exists. A connection the daemon has
  // closed since the last call (idle timeout, restart) is replaced here, before anything
  // is sent, so that case costs the caller nothing.
  Status ensure_connected();
  void disconnect() { conn_.reset(); }

  // Starts a request: sends its frame and returns its id.
  Result<std::uint32_t> send_request(protocol::MsgType type, std::string_view body);
  // Sends one CHUNK frame of request `id`.
  Status send_chunk(std::uint32_t id, std::span<const std::byte> data, bool end);
  // Reads the next frame of request `id` (frames of other ids are dropped). An ERROR frame
  // is returned as its Error; the connection is dropped when the error says the daemon is
  // going away or the stream cannot be trusted.
  Result<Received> read_frame(std::uint32_t id);
  // True if a frame is already waiting (used to notice an early PUT error).
  bool frame_waiting();

  // Request with a single JSON reply (no chunks, no descriptor): the reply body.
  Result<std::string> call(protocol::MsgType type, std::string_view body);

  const std::filesystem::path& socket() const { return socket_; }
  const protocol::HelloReply& hello() const { return hello_; }
  // Largest chunk body this client sends: the server's max frame, at most 1 MiB.
  std::size_t chunk_size() const;

 private:
  Status hello_exchange(Deadline deadline);
  Result<Received> read_any(Deadline deadline);
  // Records a failed exchange: drops the connection, passes the error on.
  Error fail(Error error);

  std::filesystem::path socket_;
  ConnectOptions options_;
  std::optional<Connection> conn_;
  protocol::HelloReply hello_;
  std::uint32_t next_id_ = 1;
};

}  // namespace kiln::client::detail
