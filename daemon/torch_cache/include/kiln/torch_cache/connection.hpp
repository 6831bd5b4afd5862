// kiln/torch_cache/connection.hpp — one Redis client connection: reads requests (several
// may come at once: pipelining), carries out what the Session says, writes the replies in
// order, and closes on a malformed or oversized request, a refusal, a timeout or the
// peer's close. Every close kilnd decides on (refusal, bad input, timeout, memory) is
// reported to the Backend with its reason (closed_on_error). What a GET or SET does to the store is the Backend's (kilnd implements
// it over its store and hot set: daemon/src/torch_cache_backend.cpp).
//
// Threading: a Connection runs on the executor of its socket, which must not run two of
// its handlers at once (kilnd gives each connection an io_context run by one thread,
// daemon/src/io_loops.hpp; a strand would also do); close() may be called from any thread. A Connection costs the daemon only
// itself: whatever a peer sends closes at most its own connection.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>

#include "kiln/result.hpp"
#include "kiln/torch_cache/memory_budget.hpp"
#include "kiln/torch_cache/resp_parser.hpp"
#include "kiln/torch_cache/session.hpp"
#include "kiln/torch_cache/torch_key.hpp"
#include "kiln/torch_cache/value.hpp"

namespace kiln::torch_cache {

namespace asio = boost::asio;
using Socket = asio::generic::stream_protocol::socket;

enum class SetOutcome {
  stored,     // the value is durable in the store (+OK)
  kept,       // an entry that is never overwritten was there already; dropped (+OK)
  condition,  // NX found an entry, or XX found none: nothing stored (null reply)
};

// What kilnd does for GET and SET. Called on the connection's executor; the coroutines
// may move work elsewhere but resume there. `key` stays valid until they complete. SET
// takes its value: a large one is the connection's receive buffer itself, handed over
// (the connection reads into a new one), so the backend may keep it as long as it needs
// without a copy. An error closes the connection (never an error reply: see session.hpp).
class Backend {
 public:
  virtual ~Backend() = default;
  virtual asio::awaitable<Result<std::optional<Value>>> get(const TorchKey& key) = 0;
  virtual asio::awaitable<Result<SetOutcome>> set(const TorchKey& key, Value value, SetCondition condition) = 0;
  // The connection closed on its own decision (refusal, bad input, timeout), for logs and
  // metrics; `peer` names the client ("uid=1000 pid=42" or "127.0.0.1:5123").
  virtual void closed_on_error(const std::string& peer, const std::string& why) = 0;
};

struct ConnectionOptions {
  SessionOptions session;
  ParserLimits limits;
  std::chrono::milliseconds idle_timeout{300'000};    // nothing received and nothing to do
  // A request must arrive whole within this of its first byte (however the bytes trickle
  // in), and a reply must leave within this of its write's start.
  std::chrono::milliseconds request_timeout{60'000};
  std::size_t max_pending_reply_bytes = 8u << 20;     // pipelined replies are written past this
  // Bytes held for this client (a request's receive buffer past its first 64 KiB, replies
  // waiting to be written) are drawn from here; a request that does not fit closes the
  // connection. nullptr: not counted. Not owned; must outlive the connection.
  MemoryBudget* memory = nullptr;
};

// What a connection waits on its peer for, read by the listener from any thread when it
// must choose a connection to close for a new one (limits.max_connections).
struct PeerWait {
  enum class State {
    busy,     // kilnd is working for it (a command, a write that is moving)
    idle,     // between requests
    stalled,  // a begun request not yet whole, or a reply the peer does not read
  };
  State state = State::busy;
  std::chrono::steady_clock::time_point since;  // when that began
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // `backend` is not owned and must outlive the connection. `on_close` runs once, on the
  // connection's executor, when it ends.
  Connection(Socket socket, Backend& backend, ConnectionOptions options, std::string peer,
             std::function<void()> on_close = {});
  ~Connection();
  void start();
  // Closes the socket; the connection ends after what it is doing. Any thread. `why`, when
  // given, is reported to the Backend as kilnd's own decision.
  void close(std::string why = {});
  // Any thread.
  PeerWait peer_wait() const;

 private:
  using Clock = std::chrono::steady_clock;
  asio::awaitable<void> run();
  asio::awaitable<void> watchdog();  // closes the socket once deadline_ passes
  asio::awaitable<bool> flush();
  void arm(std::chrono::milliseconds timeout);  // a deadline for the read or write about to start
  void disarm();
  void set_wait(PeerWait::State state, Clock::time_point since);

  Socket socket_;
  asio::steady_timer timer_;
  Clock::time_point deadline_ = Clock::time_point::max();  // on the connection's executor
  bool timed_out_ = false;
  const char* timed_out_in_ = "";  // what the deadline was for
  std::string close_why_;          // close(why)'s reason; on the executor
  // peer_wait(), published for other threads: PeerWait::State and the clock's count.
  std::atomic<int> wait_state_{0};
  std::atomic<Clock::rep> wait_since_{0};
  Backend& backend_;
  ConnectionOptions options_;
  RequestParser parser_;
  Session session_;
  std::string peer_;
  std::function<void()> on_close_;
  // Replies not yet written: small ones in `pending_text_`, values from the store in
  // `pending_values_`; `pieces_` orders them. On the connection's executor only.
  struct Piece {
    std::size_t text_begin = 0, text_end = 0;  // range in pending_text_, or
    std::optional<Value> value;                // a value then "\r\n"
  };
  std::string pending_text_;
  std::vector<Piece> pieces_;
  std::size_t pending_bytes_ = 0;
  MemoryHold reply_hold_;  // pending values' bytes
};

}  // namespace kiln::torch_cache
