// One client connection: framing, limits, roles, timeouts, replies with descriptors.
#include "connection.hpp"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include "close_log.hpp"
#include "handlers.hpp"
#include "handlers_common.hpp"
#include "offload.hpp"

namespace kiln::daemon {

using asio::use_awaitable;
using boost::system::error_code;
namespace proto = kiln::protocol;

Connection::Connection(Socket socket, ServerState& state, PeerCred peer, std::uint64_t serial)
    : socket_(std::move(socket)),
      state_(state),
      peer_(std::move(peer)),
      serial_(serial),
      watchdog_timer_(socket_.get_executor()),
      write_cv_(socket_.get_executor(), Clock::time_point::max()),
      max_frame_(state.config()->limits.max_frame_bytes),
      body_hold_(&state.metrics.client_memory) {
  state_.metrics.client_memory.set_limit(state.config()->limits.client_memory_bytes);
  state_.metrics.connection_opened();
  state_.open_connections.fetch_add(1);
}

Connection::~Connection() {
  state_.metrics.connection_closed();
  if (state_.open_connections.fetch_sub(1) == 1 && state_.on_last_connection_closed)
    state_.on_last_connection_closed();
}

std::string Connection::peer_text() const {
  return "conn=" + std::to_string(serial_) + " uid=" + std::to_string(peer_.uid) + " pid=" + std::to_string(peer_.pid);
}

proto::Role Connection::role() const { return state_.access()->role_of(peer_); }

void Connection::start() {
  auto self = shared_from_this();
  set_deadline(Clock::now() + state_.config()->limits.idle_timeout, "idle");
  asio::co_spawn(socket_.get_executor(), [self] { return self->read_loop(); }, asio::detached);
  asio::co_spawn(socket_.get_executor(), [self] { return self->watchdog(); }, asio::detached);
}

void Connection::begin_drain() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    self->draining_ = true;
    if (self->inflight_.empty() && self->uploads_.empty()) self->close("drained for shutdown");
  });
}

void Connection::force_close() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    if (!self->closed_) self->close_by_kilnd("drain_timeout_s reached with requests in flight");
  });
}

bool Connection::cancel(std::uint32_t id) {
  if (!inflight_.count(id)) return false;
  cancelled_.insert(id);
  if (auto it = abandon_.find(id); it != abandon_.end()) {
    auto withdraw = std::move(it->second);
    abandon_.erase(it);
    withdraw();
  }
  return true;
}

bool Connection::on_abandon(std::uint32_t id, std::function<void()> withdraw) {
  if (closed_ || cancelled_.count(id)) return false;
  abandon_[id] = std::move(withdraw);
  return true;
}

void Connection::set_deadline(Clock::time_point t, const char* why) {
  deadline_ = t;
  deadline_why_ = why;
  if (t < watchdog_timer_.expiry()) watchdog_timer_.cancel();  // re-arm earlier
}

void Connection::arm_idle_deadline() {
  if (mid_frame_) return;
  const auto& limits = state_.config()->limits;
  if (!uploads_.empty()) set_deadline(Clock::now() + limits.request_timeout, "upload stalled");
  else if (!inflight_.empty()) set_deadline(Clock::time_point::max(), "idle");
  else set_deadline(Clock::now() + limits.idle_timeout, "idle");
}

asio::awaitable<void> Connection::watchdog() {
  auto self = shared_from_this();
  while (!closed_) {
    watchdog_timer_.expires_at(std::min(deadline_, write_deadline_));
    error_code ec;
    co_await watchdog_timer_.async_wait(asio::redirect_error(use_awaitable, ec));
    if (closed_) break;
    auto now = Clock::now();
    const auto& limits = state_.config()->limits;
    auto secs = [](std::chrono::milliseconds d) { return std::to_string(d.count() / 1000) + " s"; };
    if (now >= write_deadline_) {
      close_by_kilnd("the client did not read its reply within limits.request_timeout_s (" +
                     secs(limits.request_timeout) + ")");
    } else if (now >= deadline_) {
      std::string why = deadline_why_;
      if (why == "idle") why = "idle for limits.idle_timeout_s (" + secs(limits.idle_timeout) + ")";
      else if (why == "frame incomplete")
        why = "frame not complete within limits.frame_timeout_s (" + secs(limits.frame_timeout) + ") of its first byte";
      else if (why == "upload stalled")
        why = "no chunk of its upload within limits.request_timeout_s (" + secs(limits.request_timeout) + ")";
      close_by_kilnd(why);
    }
  }
}

void Connection::close(const char* why) {
  if (closed_) return;
  closed_ = true;
  spdlog::debug("conn {} closed: {}", serial_, why);
  error_code ec;
  socket_.shutdown(Socket::shutdown_both, ec);
  socket_.close(ec);
  watchdog_timer_.cancel();
  write_cv_.cancel();
  drop_uploads();
  // Requests waiting on builds stop waiting: a build nobody else wants is stopped.
  auto hooks = std::move(abandon_);
  abandon_.clear();
  for (auto& [id, withdraw] : hooks) withdraw();
}

void Connection::close_by_kilnd(const std::string& why) {
  if (closed_) return;
  log_closed_by_kilnd("connection", peer_text(), why);
  close(why.c_str());
}

void Connection::drop_uploads() {
  // An uncommitted PutStream removes its temporary file when destroyed: do that on the
  // store pool, not on the event loop.
  for (auto& [id, up] : uploads_) asio::post(state_.pool, [u = std::move(up)]() mutable { u.reset(); });
  uploads_.clear();
}

void Connection::request_done(std::uint32_t id) {
  inflight_.erase(id);
  cancelled_.erase(id);
  abandon_.erase(id);
  if (closed_) return;
  if (draining_ && inflight_.empty() && uploads_.empty()) {
    close("drained for shutdown");
    return;
  }
  arm_idle_deadline();
}

// ---- reading -------------------------------------------------------------------------

// Reads through rbuf_ so a small request (header and body) costs one recv, and
// pipelined requests are taken from the buffer without another system call.
//
// frame_timeout applies once a frame has begun and more of it must be waited for. A frame
// that arrives whole in one read sets no deadline: moving the watchdog's deadline earlier
// re-arms its timer (a handler and a timerfd_settime), which a small request, the
// common case, does not need.
asio::awaitable<Result<bool>> Connection::read_frame() {
  error_code ec;
  while (rlen_ - rpos_ < header_buf_.size()) {
    if (rpos_ > 0) {
      std::memmove(rbuf_.data(), rbuf_.data() + rpos_, rlen_ - rpos_);
      rlen_ -= rpos_;
      rpos_ = 0;
    }
    if (rlen_ > 0) begin_frame_wait();  // part of a header is here; wait for the rest
    std::size_t n = co_await socket_.async_read_some(asio::buffer(rbuf_.data() + rlen_, rbuf_.size() - rlen_),
                                                     asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (rlen_ == 0) co_return false;  // closed between frames: by the peer or by us
      co_return make_error(Errc::unavailable, "peer vanished mid-frame");
    }
    rlen_ += n;
  }
  std::memcpy(header_buf_.data(), rbuf_.data() + rpos_, header_buf_.size());
  rpos_ += header_buf_.size();
  std::uint32_t rid = 0;
  auto h = proto::decode_header(header_buf_, max_frame_, &rid);
  if (!h) {
    header_.request_id = rid;
    co_return std::move(h).error();
  }
  header_ = *h;
  // A body past what every connection keeps is held against limits.client_memory: many
  // clients sending large frames at once cannot make kilnd hold more than that.
  if (h->length > kKeepBody && !body_hold_.resize(h->length)) {
    auto& budget = state_.metrics.client_memory;
    co_return make_error(Errc::busy, "a frame of " + std::to_string(h->length) +
                                         " bytes does not fit in what is left of kilnd's limits.client_memory (" +
                                         std::to_string(budget.used()) + " of " + std::to_string(budget.limit()) +
                                         " bytes held for clients); retry later");
  }
  body_.resize(h->length);
  std::size_t have = std::min<std::size_t>(h->length, rlen_ - rpos_);
  if (have) std::memcpy(body_.data(), rbuf_.data() + rpos_, have);
  rpos_ += have;
  if (have < h->length) {
    begin_frame_wait();
    co_await asio::async_read(socket_, asio::buffer(body_.data() + have, h->length - have),
                              asio::redirect_error(use_awaitable, ec));
    if (ec) co_return make_error(Errc::unavailable, "peer vanished mid-frame");
  }
  mid_frame_ = false;
  co_return true;
}

void Connection::begin_frame_wait() {
  if (mid_frame_) return;
  mid_frame_ = true;
  set_deadline(Clock::now() + state_.config()->limits.frame_timeout, "frame incomplete");
}

asio::awaitable<void> Connection::read_loop() {
  auto self = shared_from_this();
  while (!closed_) {
    auto got = co_await read_frame();
    if (closed_) break;
    if (!got) {
      if (got.error().code == Errc::unavailable) {
        spdlog::info("conn {} closed: {}", serial_, got.error().message);
        close("peer vanished");
        break;
      }
      // The frame's body was not read: the stream cannot be followed past it.
      if (got.error().code == Errc::protocol_error) state_.metrics.protocol_violation();
      co_await send_error(header_.request_id, got.error());
      close_by_kilnd(got.error().code == Errc::protocol_error ? "protocol violation: " + got.error().message
                                                               : got.error().message);
      break;
    }
    if (!*got) {
      if (!uploads_.empty() || !inflight_.empty())
        spdlog::info("conn {} closed by peer with {} request(s) in flight", serial_, inflight_.size() + uploads_.size());
      close("peer closed");
      break;
    }
    // The frame is complete: the frame timeout no longer applies. While its reply waits
    // on a peer that is not reading, request_timeout does (write_frames).
    set_deadline(Clock::time_point::max(), "handling a request");
    bool go_on = co_await handle_frame();
    if (body_.capacity() > kKeepBody) {  // a large body's memory goes back at once
      std::vector<std::byte>().swap(body_);
      body_hold_.force(0);
    }
    if (!go_on) break;
    arm_idle_deadline();
  }
}

Status Connection::admit(const Request& r) {
  if (draining_ || state_.draining.load())
    return make_error(Errc::unavailable, "kilnd is shutting down; retry once it is back");
  auto need = proto::required_role(r.type);
  auto have = role();
  if (have < need) {
    return make_error(Errc::permission_denied,
                      std::string(proto::op_name(r.type)) + " needs the " + std::string(proto::role_name(need)) +
                          " role; uid " + std::to_string(peer_.uid) + " has " +
                          (have == proto::Role::none ? std::string("no role") : "only " + std::string(proto::role_name(have))) +
                          " (grant it in kilnd.toml [access] " + std::string(proto::role_name(need)) + "_users or " +
                          std::string(proto::role_name(need)) + "_groups)");
  }
  auto max = state_.config()->limits.max_inflight;
  if (inflight_.size() + uploads_.size() >= max)
    return make_error(Errc::busy, "too many requests in flight on this connection (limit " + std::to_string(max) + ")");
  return {};
}

asio::awaitable<bool> Connection::handle_frame() {
  const auto type = header_.type;
  const auto id = header_.request_id;
  auto text = [&] { return std::string(reinterpret_cast<const char*>(body_.data()), body_.size()); };

  if (!hello_done_) {
    Request r{type, id, text(), Clock::now()};
    if (type != proto::MsgType::hello) {
      state_.metrics.protocol_violation();
      co_await send_error(id, make_error(Errc::protocol_error, "the first frame of a connection must be HELLO"));
      close_by_kilnd(std::string("protocol violation: ") +
                     (proto::is_known_type(static_cast<std::uint8_t>(type)) ? std::string(proto::type_name(type))
                                                                            : std::string("an unknown type")) +
                     " before HELLO");
      co_return false;
    }
    auto reply = handle_hello(*this, r, client_max_frame_);
    Outcome o;
    if (!reply) {
      o.status = reply.error();
      co_await send_error(id, reply.error());
      log_request(r, o);
      close("hello failed");
      co_return false;
    }
    hello_done_ = true;
    co_await send_ok(id, *reply);
    log_request(r, o);
    co_return true;
  }

  if (type == proto::MsgType::chunk) co_return co_await upload_chunk(id, (header_.flags & proto::kFlagEnd) != 0);

  if (!proto::is_known_type(static_cast<std::uint8_t>(type)) || !proto::is_request_type(type) ||
      type == proto::MsgType::hello) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "0x%02x", static_cast<unsigned>(type));
    std::string why = type == proto::MsgType::hello ? "HELLO was already received on this connection"
                                                     : std::string("message type ") + buf + " is not a request kilnd accepts";
    co_await send_error(id, make_error(Errc::protocol_error, why));
    co_return true;
  }
  if (id == 0) {
    co_await send_error(0, make_error(Errc::protocol_error, "request id 0 is reserved; use a non-zero id"));
    co_return true;
  }
  if (inflight_.count(id) || uploads_.count(id) || discarding_.count(id)) {
    co_await send_error(id, make_error(Errc::invalid_argument,
                                       "request id " + std::to_string(id) + " is already in use on this connection"));
    co_return true;
  }
  Request r{type, id, text(), Clock::now()};
  bool is_upload = type == proto::MsgType::put || type == proto::MsgType::put_source;
  if (auto st = admit(r); !st) {
    Outcome o{st, {}, true};
    if (st.error().code == Errc::permission_denied)
      spdlog::warn("refused: {} {} {}", proto::op_name(type), peer_text(), st.error().message);
    co_await send_error(id, st.error());
    log_request(r, o);
    if (is_upload) discarding_.insert(id);
    co_return true;
  }
  if (is_upload) co_return co_await begin_upload(r);
  inflight_.insert(id);
  if (type == proto::MsgType::get) {
    // A hit on a hot copy is answered right here: no new coroutine, no queueing.
    if (co_await try_hot_get(*this, r)) {
      request_done(id);
      co_return !closed_;
    }
  }
  // The lambda (owned by co_spawn until the coroutine ends) keeps the request alive, and
  // with a large body its share of limits.client_memory: the body's copy lives as long.
  asio::co_spawn(socket_.get_executor(), [self = shared_from_this(), r = std::move(r), hold = std::move(body_hold_)] {
    return self->run_request(r);
  }, asio::detached);
  co_return true;
}

asio::awaitable<void> Connection::run_request(const Request& r) {
  auto self = shared_from_this();
  Outcome o = co_await handle_request(*this, r);
  if (!o.status && !o.replied) co_await send_error(r.id, o.status.error());
  log_request(r, o);
  request_done(r.id);
}

// ---- uploads -------------------------------------------------------------------------

asio::awaitable<bool> Connection::begin_upload(const Request& r) {
  // In flight from here: a drain that starts while this waits must let the upload finish,
  // as it would have had the store answered sooner (begin_drain, request_done).
  inflight_.insert(r.id);
  // A PUT's key may leave node fields to this node, and a source is checked by the build
  // worker: both wait for the build service's start-up probes.
  Status waited = co_await wait_for_builds(state_);
  Result<Upload> up = waited ? prepare_upload(*this, r) : Result<Upload>(waited.error());
  if (up) {
    auto& store = state_.store;
    auto stream = co_await offload(state_.pool, [&store] { return store.begin_put(); });
    if (stream && up->type == proto::MsgType::put_source && state_.builds) {
      // A node that builds verifies a source's model hash before storing it.
      auto* builds = state_.builds;
      auto check = co_await offload(state_.pool, [builds] { return builds->begin_source_check(); });
      if (!check) {
        auto drop = std::make_shared<std::unique_ptr<storage::PutStream>>(std::move(*stream));
        asio::post(state_.pool, [drop] { drop->reset(); });
        stream = std::move(check).error();
      } else {
        up->check = std::move(*check);
      }
    }
    if (stream && up->type == proto::MsgType::put_source && up->model_hash.empty() && !up->check) {
      auto drop = std::make_shared<std::unique_ptr<storage::PutStream>>(std::move(*stream));
      asio::post(state_.pool, [drop] { drop->reset(); });
      stream = make_error(Errc::unsupported,
                          "put_source without model_hash: this node cannot compute model hashes (it has no build "
                          "worker with torch); send model_hash (`python3 kiln_worker hash FILE` prints it)");
    }
    if (stream && closed_) {  // closed while the store opened it: the stream goes on the pool
      auto drop = std::make_shared<std::unique_ptr<storage::PutStream>>(std::move(*stream));
      asio::post(state_.pool, [drop] { drop->reset(); });
      inflight_.erase(r.id);
      co_return false;
    }
    if (stream) {
      up->stream = std::move(*stream);
      inflight_.erase(r.id);
      uploads_.emplace(r.id, std::make_shared<Upload>(std::move(*up)));
      co_return true;
    }
    up = std::move(stream).error();
  }
  Outcome o{up.error(), {}, true};
  co_await send_error(r.id, up.error());
  log_request(r, o);
  discarding_.insert(r.id);
  request_done(r.id);
  co_return !closed_;
}

asio::awaitable<void> Connection::fail_upload(std::uint32_t id, const Error& error, bool end) {
  auto it = uploads_.find(id);
  if (it == uploads_.end()) co_return;
  auto up = std::move(it->second);
  uploads_.erase(it);
  if (!end) discarding_.insert(id);
  Request r{up->type, id, {}, up->received};
  asio::post(state_.pool, [u = std::move(up)]() mutable { u.reset(); });
  co_await send_error(id, error);
  log_request(r, Outcome{error, {}, true});
  request_done(id);
}

asio::awaitable<bool> Connection::upload_chunk(std::uint32_t id, bool end) {
  if (discarding_.count(id)) {
    if (end) discarding_.erase(id);
    co_return true;
  }
  auto it = uploads_.find(id);
  if (it == uploads_.end()) {
    co_await send_error(id, make_error(Errc::protocol_error,
                                       "CHUNK for request id " + std::to_string(id) + ", which has no upload in progress"));
    co_return true;
  }
  auto up = it->second;
  const auto max = state_.config()->limits.max_artifact_bytes;
  std::uint64_t total = up->received_bytes + body_.size();
  if (total > max) {
    co_await fail_upload(id, make_error(Errc::invalid_argument, "upload exceeds limits.max_artifact_bytes (" +
                                                                  std::to_string(max) + " bytes)"), end);
    co_return true;
  }
  if (up->expect_size && total > *up->expect_size) {
    co_await fail_upload(id, make_error(Errc::invalid_argument, "upload sent more than the " +
                                                                  std::to_string(*up->expect_size) + " bytes its size promised"), end);
    co_return true;
  }
  if (!body_.empty()) {
    std::span<const std::byte> data(body_);
    auto job = [up, data]() -> Status {
      if (up->sha) up->sha->update(data);
      if (up->keep_aoti_copy) {
        if (up->aoti_copy.size() + data.size() <= Upload::kMaxAotiCopy) {
          up->aoti_copy.append(reinterpret_cast<const char*>(data.data()), data.size());
        } else {  // larger than any AOTI package: not checked, not held in memory
          up->keep_aoti_copy = false;
          std::string().swap(up->aoti_copy);
        }
      }
      if (up->check) KILN_TRY(up->check->write(data));
      return up->stream->write(data);
    };
    auto st = co_await offload(state_.pool, job);
    if (closed_) co_return false;
    if (!st) {
      co_await fail_upload(id, st.error(), end);
      co_return true;
    }
    up->received_bytes = total;
  }
  if (end) {
    uploads_.erase(id);
    inflight_.insert(id);
    Request r{up->type, id, {}, up->received};
    asio::co_spawn(socket_.get_executor(), [self = shared_from_this(), r = std::move(r), up] {
      return self->finish_upload(r, up);
    }, asio::detached);
  }
  co_return true;
}

asio::awaitable<void> Connection::finish_upload(const Request& r, const std::shared_ptr<Upload>& up) {
  auto self = shared_from_this();
  Outcome o;
  Status checked = check_upload(*up);
  if (!checked) o = fail(checked.error());
  else o = co_await commit_upload(*this, r.id, up);
  if (!o.status && !o.replied) co_await send_error(r.id, o.status.error());
  log_request(r, o);
  request_done(r.id);
}

// ---- writing -------------------------------------------------------------------------

asio::awaitable<bool> Connection::send(proto::FrameHeader h, std::span<const std::byte> body, int fd) {
  const OutFrame frame{h, body};
  co_return co_await send_frames(std::span(&frame, 1), fd);
}

asio::awaitable<bool> Connection::send_frames(std::span<const OutFrame> frames, int fd) {
  // A large reply counts against limits.client_memory while it waits on the peer: what
  // clients that stop reading make kilnd hold is bounded with everything else.
  torch_cache::MemoryHold hold(&state_.metrics.client_memory);
  std::size_t bytes = 0;
  for (const auto& f : frames) bytes += f.body.size();
  if (bytes > kKeepBody) hold.force(bytes);
  while (writing_ && !closed_) {
    error_code ec;
    co_await write_cv_.async_wait(asio::redirect_error(use_awaitable, ec));
  }
  if (closed_) co_return false;
  writing_ = true;
  bool ok = co_await write_frames(frames, fd);
  writing_ = false;
  write_cv_.cancel();
  if (ok)
    for (const auto& f : frames)
      if (!f.body.empty() && f.header.type == proto::MsgType::chunk) state_.metrics.add_bytes_served(f.body.size());
  co_return ok;
}

asio::awaitable<bool> Connection::write_frames(std::span<const OutFrame> frames, int fd) {
  // Every frame in one sendmsg where the socket takes it: a small inline hit is then one
  // system call. Partial writes resume where they stopped.
  constexpr std::size_t kMaxFrames = 4;
  if (frames.size() > kMaxFrames) co_return false;
  std::array<std::array<std::byte, proto::kHeaderSize>, kMaxFrames> hdrs;
  std::array<iovec, 2 * kMaxFrames> all{};
  std::size_t n_all = 0, total = 0;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    proto::FrameHeader h = frames[i].header;
    h.length = static_cast<std::uint32_t>(frames[i].body.size());
    hdrs[i] = proto::encode_header(h);
    all[n_all++] = {hdrs[i].data(), hdrs[i].size()};
    if (!frames[i].body.empty()) all[n_all++] = {const_cast<std::byte*>(frames[i].body.data()), frames[i].body.size()};
    total += hdrs[i].size() + frames[i].body.size();
  }
  std::size_t sent = 0;
  while (sent < total) {
    // The iovecs still to send, the first one trimmed by what went out already.
    std::array<iovec, 2 * kMaxFrames> iov{};
    std::size_t n_iov = 0, skip = sent;
    for (std::size_t i = 0; i < n_all; ++i) {
      if (skip >= all[i].iov_len) {
        skip -= all[i].iov_len;
        continue;
      }
      iov[n_iov++] = {static_cast<std::byte*>(all[i].iov_base) + skip, all[i].iov_len - skip};
      skip = 0;
    }
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = n_iov;
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))];
    if (fd >= 0 && sent == 0) {
      std::memset(cbuf, 0, sizeof cbuf);
      msg.msg_control = cbuf;
      msg.msg_controllen = sizeof cbuf;
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    ssize_t n = ::sendmsg(socket_.native_handle(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        write_deadline_ = Clock::now() + state_.config()->limits.request_timeout;
        if (write_deadline_ < watchdog_timer_.expiry()) watchdog_timer_.cancel();
        error_code ec;
        co_await socket_.async_wait(Socket::wait_write, asio::redirect_error(use_awaitable, ec));
        write_deadline_ = Clock::time_point::max();
        if (ec || closed_) co_return false;
        continue;
      }
      spdlog::info("conn {} write failed ({}); closing", serial_, std::strerror(errno));
      close("write failed");
      co_return false;
    }
    sent += static_cast<std::size_t>(n);
  }
  co_return true;
}

asio::awaitable<bool> Connection::send_ok(std::uint32_t id, std::string_view body, std::uint16_t flags, int fd) {
  proto::FrameHeader h{proto::kVersion, proto::MsgType::ok, static_cast<std::uint16_t>(flags | (fd >= 0 ? proto::kFlagFd : 0)), id, 0};
  co_return co_await send(h, std::as_bytes(std::span(body.data(), body.size())), fd);
}

asio::awaitable<bool> Connection::send_error(std::uint32_t id, const Error& error) {
  std::string body = proto::encode(proto::to_error_body(error));
  proto::FrameHeader h{proto::kVersion, proto::MsgType::error, 0, id, 0};
  co_return co_await send(h, std::as_bytes(std::span(body.data(), body.size())));
}

void Connection::log_request(const Request& r, const Outcome& o) {
  auto secs = std::chrono::duration<double>(Clock::now() - r.received).count();
  Errc code = o.status ? Errc::ok : o.status.error().code;
  state_.metrics.record_request(r.type, code, secs);
  bool serious = code == Errc::internal || code == Errc::io_error || code == Errc::corrupt;
  auto level = serious ? spdlog::level::err : spdlog::level::info;
  if (!spdlog::should_log(level)) return;  // the line is not built when nobody reads it
  if (o.status) {
    spdlog::info("req op={} id={} {} outcome=ok ms={:.3f}{}{}", proto::op_name(r.type), r.id, peer_text(), secs * 1e3,
                 o.note.empty() ? "" : " ", o.note);
  } else {
    spdlog::log(level, "req op={} id={} {} outcome={} ms={:.3f} msg=\"{}\"", proto::op_name(r.type), r.id, peer_text(),
                errc_name(code), secs * 1e3, o.status.error().message);
  }
}

}  // namespace kiln::daemon
