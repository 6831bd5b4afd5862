// One Redis client connection (see connection.hpp).
#include "kiln/torch_cache/connection.hpp"

#include <cstring>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

namespace kiln::torch_cache {

using boost::system::error_code;

namespace {

// Bytes received and not yet used: [begin, end) of a buffer of kKeep bytes, grown to
// exactly what a larger request needs once its size is known (a 10 MB SET needs it whole),
// compacted between reads. A SET's value that fills nearly all of the buffer is handed over
// with it (take_value): the buffer then belongs to the value's holders, and reading goes on in a
// fresh one. Small requests allocate nothing. What the buffer holds past kKeep is drawn
// from the connection's MemoryBudget, up to the request's end (a value handed over stays
// counted until its SET is answered).
class InBuffer {
 public:
  explicit InBuffer(MemoryBudget* budget) : hold_(budget) {}
  std::string_view data() const { return {buf_.get() + begin_, end_ - begin_}; }
  void consume(std::size_t n) {
    begin_ += n;
    if (begin_ == end_) {
      if (given_) replace(kKeep);  // the start of the buffer is a value's now
      begin_ = end_ = 0;
    }
  }
  // Room for at least `want` more bytes after the data; more when the buffer has it. Grows
  // to the data plus `want` exactly, when that is more than kMinRoom: asking for the rest
  // of a request never grows the buffer past it (nor copies what was read of it again).
  // Empty (data() nullptr) when growing would pass the memory budget.
  std::span<char> room(std::size_t want) {
    if (cap_ - end_ < want) {
      std::size_t used = end_ - begin_;
      if (begin_ > 0 && cap_ - used >= want && !given_) {
        std::memmove(buf_.get(), buf_.get() + begin_, used);
        begin_ = 0;
        end_ = used;
      } else if (!replace(std::max(kKeep, used + std::max(want, kMinRoom)))) {
        return {};
      }
    }
    return {buf_.get() + end_, cap_ - end_};
  }
  void commit(std::size_t n) { end_ += n; }
  // Gives memory back after a large request, so an idle connection holds little.
  void shrink() {
    if (begin_ == end_ && cap_ > kKeep) replace(kKeep);
  }
  // `bytes` (a view into data()) as a Value. When they are nearly all of the buffer (a
  // large SET: the buffer was grown to exactly its request), the buffer itself is handed
  // over, not copied; bytes after them stay readable here until consumed. Smaller values
  // are copied, so memory kept with a value (counted by its size in torch_values and the
  // write queue) is at most 1/7 more than that size.
  Value take_value(std::string_view bytes) {
    auto b = std::as_bytes(std::span<const char>(bytes.data(), bytes.size()));
    if (bytes.size() < cap_ - cap_ / 8) return Value::copy_of(b);
    given_ = true;
    return Value{b, buf_};
  }

 private:
  static constexpr std::size_t kKeep = 64u << 10;
  static constexpr std::size_t kMinRoom = 16u << 10;
  // A new buffer of `cap` bytes holding the data; false (nothing changed) when the budget
  // cannot give it.
  bool replace(std::size_t cap) {
    if (!hold_.resize(cap - kKeep)) return false;
    std::size_t used = end_ - begin_;
    auto next = std::make_shared_for_overwrite<char[]>(cap);  // uninitialised: it is read into
    if (used) std::memcpy(next.get(), buf_.get() + begin_, used);
    buf_ = std::move(next);
    cap_ = cap;
    begin_ = 0;
    end_ = used;
    given_ = false;
    return true;
  }
  std::shared_ptr<char[]> buf_ = std::make_shared_for_overwrite<char[]>(kKeep);
  std::size_t cap_ = kKeep, begin_ = 0, end_ = 0;
  bool given_ = false;  // buf_ holds a value handed over: never written before end_ again
  MemoryHold hold_;     // cap_ - kKeep
};

std::string seconds_text(std::chrono::milliseconds d) {
  auto ms = d.count();
  return ms % 1000 ? std::to_string(ms) + " ms" : std::to_string(ms / 1000) + " s";
}

}  // namespace

Connection::Connection(Socket socket, Backend& backend, ConnectionOptions options, std::string peer,
                       std::function<void()> on_close)
    : socket_(std::move(socket)),
      timer_(socket_.get_executor()),
      backend_(backend),
      options_(std::move(options)),
      parser_(options_.limits),
      session_(options_.session),
      peer_(std::move(peer)),
      on_close_(std::move(on_close)),
      reply_hold_(options_.memory) {
  set_wait(PeerWait::State::idle, Clock::now());
}

Connection::~Connection() = default;

void Connection::start() {
  auto self = shared_from_this();
  // The lambda (owned by co_spawn until the coroutine ends) keeps the connection alive.
  asio::co_spawn(socket_.get_executor(), [self] { return self->run(); }, asio::detached);
  asio::co_spawn(socket_.get_executor(), [self] { return self->watchdog(); }, asio::detached);
}

void Connection::close(std::string why) {
  auto self = shared_from_this();
  wait_state_.store(static_cast<int>(PeerWait::State::busy), std::memory_order_relaxed);  // not chosen twice
  asio::post(socket_.get_executor(), [self, why = std::move(why)]() mutable {
    if (self->close_why_.empty()) self->close_why_ = std::move(why);
    error_code ec;
    self->socket_.close(ec);
    self->timer_.cancel();
  });
}

void Connection::arm(std::chrono::milliseconds timeout) { deadline_ = Clock::now() + timeout; }

void Connection::disarm() { deadline_ = Clock::time_point::max(); }

void Connection::set_wait(PeerWait::State state, Clock::time_point since) {
  wait_since_.store(since.time_since_epoch().count(), std::memory_order_relaxed);
  wait_state_.store(static_cast<int>(state), std::memory_order_relaxed);
}

PeerWait Connection::peer_wait() const {
  PeerWait w;
  w.state = static_cast<PeerWait::State>(wait_state_.load(std::memory_order_relaxed));
  w.since = Clock::time_point(Clock::duration(wait_since_.load(std::memory_order_relaxed)));
  return w;
}

// One timer per connection, re-armed when it fires: moving the deadline is a store,
// not a timer operation (a 4 KiB hit costs tens of microseconds; two timer updates per
// request were a measurable part of it).
asio::awaitable<void> Connection::watchdog() {
  for (;;) {
    auto at = deadline_;
    // At least once a second, so a deadline moved closer (a begun request's) is kept too.
    timer_.expires_at(std::min(at, Clock::now() + std::chrono::seconds(1)));
    error_code ec;
    co_await timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (ec || !socket_.is_open()) co_return;
    if (Clock::now() >= deadline_) {
      timed_out_ = true;
      socket_.close(ec);
      co_return;
    }
  }
}

asio::awaitable<bool> Connection::flush() {
  if (pieces_.empty()) co_return true;
  static constexpr char kCrlf[] = "\r\n";
  std::vector<asio::const_buffer> out;
  out.reserve(pieces_.size() * 2);
  for (const auto& p : pieces_) {
    if (p.value) {
      out.emplace_back(p.value->bytes.data(), p.value->bytes.size());
      out.emplace_back(kCrlf, 2);
    } else {
      out.emplace_back(pending_text_.data() + p.text_begin, p.text_end - p.text_begin);
    }
  }
  error_code ec;
  arm(options_.request_timeout);
  timed_out_in_ = "write";
  set_wait(PeerWait::State::stalled, Clock::now());  // the peer's only once it lasts
  co_await asio::async_write(socket_, out, asio::redirect_error(asio::use_awaitable, ec));
  disarm();
  set_wait(PeerWait::State::busy, Clock::now());
  pieces_.clear();
  pending_text_.clear();
  pending_bytes_ = 0;
  reply_hold_.force(0);
  co_return !ec;
}

asio::awaitable<void> Connection::run() {
  InBuffer in(options_.memory);
  std::string why;  // set when kilnd ends the connection on its own decision
  // The first byte of the request being received arrived with the read at `began`: its
  // deadline counts from there, not from the latest byte (a sender of one byte a second
  // must not hold its connection for ever).
  std::optional<Clock::time_point> began;
  Clock::time_point last_read = Clock::now();
  // Appends text replies: merged into the last piece when that is text too.
  auto add_text = [this](const std::string& text) {
    if (pieces_.empty() || pieces_.back().value) pieces_.push_back({pending_text_.size(), pending_text_.size(), {}});
    pending_text_ += text;
    pieces_.back().text_end = pending_text_.size();
    pending_bytes_ += text.size();
  };
  // Why a write failed: kilnd's decision when its deadline passed, else the peer's close.
  auto unread_why = [this]() -> std::string {
    if (!timed_out_) return {};
    return "the client did not read its replies within limits.request_timeout_s (" +
           seconds_text(options_.request_timeout) + ")";
  };
  bool open = true;
  while (open) {
    // Every complete request in the buffer, in order.
    std::size_t need = 0;
    for (;;) {
      auto parsed = parser_.parse(in.data());
      if (parsed.state == ParseResult::State::incomplete) {
        need = parsed.need;
        break;
      }
      if (parsed.state == ParseResult::State::invalid) {
        why = "bad request: " + parsed.error;
        open = false;
        break;
      }
      began.reset();
      if (parsed.args.empty()) {
        in.consume(parsed.consumed);
        continue;
      }
      set_wait(PeerWait::State::busy, Clock::now());
      Step step = session_.handle(parsed.args);
      if (step.kind == Step::Kind::close) {
        why = std::move(step.why);
        open = false;
        break;
      }
      if (step.kind == Step::Kind::reply) {
        add_text(step.reply);
        if (step.close_after_reply) open = false;
      } else {
        auto key = map_torch_key(step.key);
        if (!key) {
          why = std::string(step.kind == Step::Kind::get ? "GET" : "SET") + ": " + key.error().message;
          open = false;
          break;
        }
        if (step.kind == Step::Kind::get) {
          auto got = co_await backend_.get(*key);
          if (!got) {
            why = "GET " + key->text.substr(0, 200) + ": " + got.error().to_string();
            open = false;
            break;
          }
          std::string head;
          if (!*got) {
            append_null(head, session_.proto());
            add_text(head);
          } else {
            append_bulk_header(head, (*got)->bytes.size());
            add_text(head);
            pending_bytes_ += (*got)->size();
            reply_hold_.force(reply_hold_.size() + (*got)->size());
            pieces_.push_back({0, 0, std::move(**got)});
          }
        } else {
          auto done = co_await backend_.set(*key, in.take_value(step.value), step.condition);
          if (!done) {
            why = "SET " + key->text.substr(0, 200) + ": " + done.error().to_string();
            open = false;
            break;
          }
          std::string r;
          if (*done == SetOutcome::condition) append_null(r, session_.proto());
          else append_simple(r, "OK");
          add_text(r);
        }
      }
      in.consume(parsed.consumed);
      if (!open) break;
      if (pending_bytes_ >= options_.max_pending_reply_bytes && !co_await flush()) {
        why = unread_why();
        open = false;
        break;
      }
    }
    // Replies go out before closing too (QUIT's +OK, and those before a refused request).
    if (!co_await flush()) {
      if (why.empty()) why = unread_why();
      break;
    }
    if (!open) break;
    in.shrink();
    // The rest of the request when its size is known, else any byte: a read takes what
    // the buffer has room for.
    const std::size_t want = need > in.data().size() ? need - in.data().size() : 1;
    auto room = in.room(want);
    if (!room.data()) {
      why = "a request of " + std::to_string(in.data().size() + want) +
            " bytes does not fit in what is left of limits.client_memory (" +
            std::to_string(options_.memory->used()) + " of " + std::to_string(options_.memory->limit()) +
            " bytes held for clients)";
      break;
    }
    error_code ec;
    if (in.data().empty()) {
      began.reset();
      arm(options_.idle_timeout);
      timed_out_in_ = "idle";
      set_wait(PeerWait::State::idle, Clock::now());
    } else {
      if (!began) began = last_read;
      deadline_ = *began + options_.request_timeout;
      timed_out_in_ = "request";
      set_wait(PeerWait::State::stalled, *began);
    }
    std::size_t n = co_await socket_.async_read_some(asio::buffer(room.data(), room.size()),
                                                     asio::redirect_error(asio::use_awaitable, ec));
    disarm();
    last_read = Clock::now();
    if (ec) {
      if (timed_out_ && std::string_view(timed_out_in_) == "request")
        why = "request not complete within limits.request_timeout_s (" + seconds_text(options_.request_timeout) +
              ") of its first byte";
      else if (timed_out_)
        why = "idle for limits.idle_timeout_s (" + seconds_text(options_.idle_timeout) + ")";
      break;
    }
    in.commit(n);
  }
  if (why.empty()) why = std::move(close_why_);
  if (!why.empty()) backend_.closed_on_error(peer_, why);
  error_code ec;
  socket_.shutdown(asio::socket_base::shutdown_both, ec);
  socket_.close(ec);
  timer_.cancel();
  reply_hold_.force(0);
  if (on_close_) on_close_();
}

}  // namespace kiln::torch_cache
