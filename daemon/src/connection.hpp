// One client connection: reads frames, enforces limits and roles, runs each request as
// its own coroutine, and writes replies (with descriptors) one frame at a time.
//
// Threading: a connection lives on one event loop, the io_context of its socket, run by
// exactly one thread (io_loops.hpp): reading a request, answering it and writing the reply
// all happen on that thread, and members need no locks. Work done elsewhere (the store
// pool, builds, the server's strand) resumes here through the socket's executor
// (offload, await_callback, asio::post). begin_drain() and force_close() may be called
// from any thread; everything else only on the connection's loop.
// A connection costs the daemon only itself: any framing error, stall past a timeout,
// or vanished peer closes this connection and nothing else.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>

#include "access.hpp"
#include "kiln/protocol/frame.hpp"
#include "kiln/torch_cache/memory_budget.hpp"
#include "server_state.hpp"
#include "upload.hpp"

namespace kiln::daemon {

using Socket = asio::local::stream_protocol::socket;
using Clock = std::chrono::steady_clock;

// A request handed to a handler.
struct Request {
  protocol::MsgType type;
  std::uint32_t id = 0;
  std::string body;
  Clock::time_point received;
};

// What a handler did, for the request's log line and metrics. If `status` is an error
// and `replied` is false, the caller sends the ERROR frame.
struct Outcome {
  Status status;
  std::string note;       // e.g. "hit hot 4096B"
  bool replied = false;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Socket socket, ServerState& state, PeerCred peer, std::uint64_t serial);
  ~Connection();

  // Reads until the peer closes, a fatal error, or the end of a drain.
  void start();
  // Called (from any thread) when the server starts draining: finish what is in flight, refuse new requests, then close.
  void begin_drain();
  // Closes at once (drain timeout). From any thread.
  void force_close();

  // ---- for handlers (on the connection's loop) ----
  ServerState& state() { return state_; }
  const PeerCred& peer() const { return peer_; }
  std::uint32_t client_max_frame() const { return client_max_frame_; }
  protocol::Role role() const;
  bool cancelled(std::uint32_t id) const { return cancelled_.count(id) > 0; }
  // CANCEL of request `id`: marks it and runs its abandon hook. false if not in flight.
  bool cancel(std::uint32_t id);
  // A request waiting on something outside the connection (a build) says how to stop
  // waiting: `withdraw` runs once, on the connection's loop, when the connection closes or the client
  // cancels request `id`; the request then still ends through its own code. Dropped when
  // the request is done. false (nothing registered, nothing run): the connection is
  // closed or the request cancelled already; do not start waiting.
  bool on_abandon(std::uint32_t id, std::function<void()> withdraw);
  // Writes one frame (with `fd` attached if >= 0). false if the connection is gone.
  asio::awaitable<bool> send(protocol::FrameHeader header, std::span<const std::byte> body, int fd = -1);
  // Up to four frames written together (one system call when the socket takes them all);
  // `fd` goes with the first.
  struct OutFrame {
    protocol::FrameHeader header;
    std::span<const std::byte> body;
  };
  asio::awaitable<bool> send_frames(std::span<const OutFrame> frames, int fd = -1);
  asio::awaitable<bool> send_ok(std::uint32_t id, std::string_view body, std::uint16_t flags = 0, int fd = -1);
  asio::awaitable<bool> send_error(std::uint32_t id, const Error& error);
  std::string peer_text() const;  // "uid=1000 pid=4242"
  // The request's log line and metrics.
  void log_request(const Request& request, const Outcome& outcome);

 private:
  asio::awaitable<void> read_loop();
  asio::awaitable<void> watchdog();
  asio::awaitable<Result<bool>> read_frame();   // false: peer closed cleanly
  asio::awaitable<bool> handle_frame();         // false: stop reading
  asio::awaitable<void> run_request(const Request& request);
  asio::awaitable<void> finish_upload(const Request& request, const std::shared_ptr<Upload>& upload);
  asio::awaitable<bool> write_frames(std::span<const OutFrame> frames, int fd);
  asio::awaitable<void> fail_upload(std::uint32_t id, const Error& error, bool end);
  asio::awaitable<bool> begin_upload(const Request& request);
  asio::awaitable<bool> upload_chunk(std::uint32_t id, bool end);
  void arm_idle_deadline();
  void begin_frame_wait();  // a frame has begun and more of it is awaited: frame_timeout runs
  Status admit(const Request& request);        // role, drain, limits
  void set_deadline(Clock::time_point t, const char* why);
  void request_done(std::uint32_t id);
  void close(const char* why);
  // Closes on kilnd's own decision (a timeout, a limit, a protocol error): logged with the
  // peer's uid and the reason (close_log.hpp).
  void close_by_kilnd(const std::string& why);
  void drop_uploads();

  Socket socket_;
  ServerState& state_;
  PeerCred peer_;
  std::uint64_t serial_;
  asio::steady_timer watchdog_timer_;
  asio::steady_timer write_cv_;   // never expires; cancel() wakes writers waiting for the lock
  Clock::time_point deadline_ = Clock::time_point::max();        // reading side
  Clock::time_point write_deadline_ = Clock::time_point::max();  // a write blocked on a full socket
  const char* deadline_why_ = "idle";
  bool mid_frame_ = false;        // waiting for the rest of a frame (frame_timeout applies)
  bool writing_ = false;
  bool closed_ = false;
  bool hello_done_ = false;
  bool draining_ = false;
  std::uint32_t client_max_frame_ = protocol::kDefaultMaxFrame;
  std::uint32_t max_frame_;
  std::array<std::byte, protocol::kHeaderSize> header_buf_{};
  std::vector<std::byte> rbuf_ = std::vector<std::byte>(64 * 1024);  // bytes read ahead
  std::size_t rpos_ = 0, rlen_ = 0;
  protocol::FrameHeader header_{};
  std::vector<std::byte> body_;
  torch_cache::MemoryHold body_hold_;  // body_'s bytes past kKeepBody, from limits.client_memory
  static constexpr std::size_t kKeepBody = 64 * 1024;  // kept between frames; larger is given back
  std::set<std::uint32_t> inflight_;             // request ids not yet answered
  std::set<std::uint32_t> cancelled_;
  std::unordered_map<std::uint32_t, std::function<void()>> abandon_;  // on_abandon hooks
  std::unordered_map<std::uint32_t, std::shared_ptr<Upload>> uploads_;  // PUT / PUT_SOURCE receiving chunks
  std::set<std::uint32_t> discarding_;           // failed uploads whose chunks are skipped until END
};

}  // namespace kiln::daemon
