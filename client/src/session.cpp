#include "session.hpp"

#include <algorithm>
#include <array>

namespace kiln::client::detail {

namespace {

constexpr std::size_t kMaxChunk = 1u << 20;
// What this client accepts per frame (stated in hello; the daemon never sends more).
constexpr std::uint32_t kClientMaxFrame = protocol::kDefaultMaxFrame;
constexpr std::string_view kClientName = "libkiln/0.1.0";

// Errors after which the connection must not be reused: the daemon is going away, or the
// byte stream can no longer be trusted.
bool drops_connection(Errc code) {
  return code == Errc::unavailable || code == Errc::protocol_error || code == Errc::timeout ||
         code == Errc::unsupported;
}

}  // namespace

Session::Session(std::filesystem::path socket, ConnectOptions options)
    : socket_(std::move(socket)), options_(options) {}

Error Session::fail(Error error) {
  conn_.reset();
  return error;
}

std::size_t Session::chunk_size() const {
  return std::clamp<std::size_t>(hello_.max_frame, 4096, kMaxChunk);
}

Status Session::ensure_connected() {
  if (conn_ && conn_->peer_closed()) conn_.reset();
  if (conn_) return {};
  Deadline deadline = deadline_after(options_.connect_timeout);
  auto conn = Connection::open(socket_, deadline);
  if (!conn) return std::move(conn).error();
  conn_.emplace(std::move(*conn));
  if (auto st = hello_exchange(deadline); !st) {
    Error e = std::move(st).error();
    conn_.reset();
    // A daemon that accepts but never says hello is as good as absent.
    if (e.code == Errc::timeout) e.code = Errc::unavailable;
    return e;
  }
  return {};
}

Status Session::hello_exchange(Deadline deadline) {
  protocol::HelloRequest req;
  req.versions = {protocol::kVersion};
  req.client = std::string(kClientName);
  req.capabilities = options_.transfer != Transfer::stream ? std::vector<std::string>{"fd", "stream"}
                                                                : std::vector<std::string>{"stream"};
  req.max_frame = kClientMaxFrame;
  const std::uint32_t id = next_id_++;
  auto frame = protocol::encode_frame({protocol::kVersion, protocol::MsgType::hello, 0, id, 0}, protocol::encode(req));
  if (Status sent = conn_->send_all(frame, deadline); !sent) {
    // A daemon that refuses the connection (busy: too many connections) writes its error
    // and closes without reading, so our hello may fail to send; its answer is already
    // queued on our side. Report that rather than "connection lost".
    auto refusal = read_any(deadline);
    if (refusal && refusal->header.type == protocol::MsgType::error) {
      auto body = protocol::decode<protocol::ErrorBody>(refusal->text());
      if (body) return protocol::to_error(*body);
    }
    return sent;
  }
  for (;;) {
    auto got = read_any(deadline);
    if (!got) return std::move(got).error();
    if (got->header.request_id != id && got->header.request_id != 0) continue;
    if (got->header.type == protocol::MsgType::error) {
      auto body = protocol::decode<protocol::ErrorBody>(got->text());
      if (!body) return make_error(Errc::protocol_error, "kilnd sent an unreadable hello error");
      return protocol::to_error(*body);
    }
    if (got->header.type != protocol::MsgType::ok)
      return make_error(Errc::protocol_error, "kilnd answered hello with an unexpected frame");
    auto reply = protocol::decode<protocol::HelloReply>(got->text());
    if (!reply) return make_error(Errc::protocol_error, "kilnd's hello reply: " + reply.error().message);
    if (reply->version != protocol::kVersion)
      return make_error(Errc::unsupported, "kilnd chose protocol version " + std::to_string(reply->version) +
                                               "; this libkiln speaks only " + std::to_string(protocol::kVersion));
    hello_ = std::move(*reply);
    return {};
  }
}

Result<Received> Session::read_any(Deadline deadline) {
  std::array<std::byte, protocol::kHeaderSize> head{};
  std::vector<UniqueFd> fds;
  KILN_TRY(conn_->recv_exact(head, deadline, &fds));
  auto header = protocol::decode_header(head, kClientMaxFrame);
  if (!header) return make_error(Errc::protocol_error, "kilnd sent a bad frame: " + header.error().message);
  Received r;
  r.header = *header;
  r.body.resize(header->length);
  KILN_TRY(conn_->recv_exact(r.body, deadline, &fds));
  const bool wants_fd = (header->flags & protocol::kFlagFd) != 0;
  if (wants_fd && fds.size() != 1)
    return make_error(Errc::protocol_error, "kilnd flagged a descriptor but sent " + std::to_string(fds.size()));
  // Descriptors on a frame not flagged FD are closed here (fds goes out of scope).
  if (wants_fd) r.fd = std::move(fds.front());
  return r;
}

Result<std::uint32_t> Session::send_request(protocol::MsgType type, std::string_view body) {
  KILN_TRY(ensure_connected());
  const std::uint32_t id = next_id_++;
  if (next_id_ == 0) next_id_ = 1;  // 0 is the connection itself
  auto frame = protocol::encode_frame({protocol::kVersion, type, 0, id, 0}, body);
  if (auto st = conn_->send_all(frame, deadline_after(options_.request_timeout)); !st)
    return fail(std::move(st).error());
  return id;
}

Status Session::send_chunk(std::uint32_t id, std::span<const std::byte> data, bool end) {
  if (!conn_) return make_error(Errc::unavailable, "connection to kilnd on " + socket_.string() + " was dropped");
  auto header = protocol::encode_header(
      {protocol::kVersion, protocol::MsgType::chunk, end ? protocol::kFlagEnd : std::uint16_t{0}, id,
       static_cast<std::uint32_t>(data.size())});
  if (auto st = conn_->send_all(header, data, deadline_after(options_.request_timeout)); !st)
    return fail(std::move(st).error());
  return {};
}

bool Session::frame_waiting() { return conn_ && conn_->readable(); }

Result<Received> Session::read_frame(std::uint32_t id) {
  if (!conn_) return make_error(Errc::unavailable, "connection to kilnd on " + socket_.string() + " was dropped");
  Deadline deadline = deadline_after(options_.request_timeout);
  for (;;) {
    auto got = read_any(deadline);
    if (!got) return fail(std::move(got).error());
    const std::uint32_t rid = got->header.request_id;
    if (rid != id && rid != 0) continue;  // a stale frame of an abandoned request
    if (got->header.type == protocol::MsgType::error) {
      auto body = protocol::decode<protocol::ErrorBody>(got->text());
      Error e = body ? protocol::to_error(*body)
                     : make_error(Errc::protocol_error, "kilnd sent an unreadable error frame");
      // An error for the connection itself (id 0: busy, shutting down) ends it.
      if (rid == 0 || drops_connection(e.code)) conn_.reset();
      return e;
    }
    if (rid == 0) continue;  // nothing else is defined for id 0; ignore
    return got;
  }
}

Result<std::string> Session::call(protocol::MsgType type, std::string_view body) {
  auto id = send_request(type, body);
  if (!id) return std::move(id).error();
  auto got = read_frame(*id);
  if (!got) return std::move(got).error();
  if (got->header.type != protocol::MsgType::ok || (got->header.flags & protocol::kFlagMore) != 0)
    return fail(make_error(Errc::protocol_error, std::string("kilnd answered ") +
                                                     std::string(protocol::type_name(type)) +
                                                     " with an unexpected frame"));
  return std::string(got->text());
}

}  // namespace kiln::client::detail
