// Client: the typed calls, each one request/reply exchange over a Session
// (schema/protocol.md, "Messages"). Calls are serialized by Impl::mutex.
#include "kiln/client/client.hpp"

#include <sys/stat.h>

#include <cstdlib>
#include <algorithm>
#include <mutex>

#include "convert.hpp"
#include "put_source.hpp"
#include "receive.hpp"
#include "session.hpp"

namespace kiln::client {

using detail::Received;
using detail::Session;
namespace proto = kiln::protocol;

struct Client::Impl {
  explicit Impl(std::filesystem::path socket, const ConnectOptions& opts)
      : options(opts), session(std::move(socket), opts) {}

  ConnectOptions options;
  std::mutex mutex;  // serializes every call; guards session
  Session session;

  // Sends a request whose reply is a single JSON frame and decodes it as T.
  template <class Reply, class Request>
  Result<Reply> call(proto::MsgType type, const Request& request) {
    auto text = session.call(type, proto::encode(request));
    if (!text) return std::move(text).error();
    auto reply = proto::decode<Reply>(*text);
    if (!reply) {
      session.disconnect();
      return make_error(Errc::protocol_error, std::string("kilnd's ") + std::string(proto::type_name(type)) +
                                                  " reply: " + reply.error().message);
    }
    return reply;
  }

  Result<std::optional<Artifact>> get(const Lookup& what, const Client::GetOptions& get_options = {});
  // The GET delivery for options.transfer, given what the connected daemon can do.
  proto::Delivery delivery() const {
    switch (options.transfer) {
      case Transfer::stream: return proto::Delivery::stream;
      case Transfer::descriptor: return proto::Delivery::fd;
      case Transfer::automatic: break;
    }
    const auto& caps = session.hello().capabilities;
    return std::find(caps.begin(), caps.end(), "auto") != caps.end() ? proto::Delivery::automatic
                                                                     : proto::Delivery::fd;
  }
  Result<bool> key_op(proto::MsgType type, const Lookup& what);
  Result<ArtifactInfo> put(const Key& key, detail::PutSource& source, const PutOptions& put_options);
  // Sends a request of `type` whose body is followed by CHUNK frames of `source` (PUT,
  // PUT_SOURCE) and returns the reply frame.
  Result<Received> stream_request(proto::MsgType type, const std::string& body, detail::PutSource& source);
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;
Client::~Client() = default;

Result<Client> Client::connect(const ConnectOptions& options) {
  auto impl = std::make_unique<Impl>(resolve_socket_path(options.socket), options);
  if (Status st = impl->session.ensure_connected(); !st) {
    Error e = std::move(st).error();
    const char* env = std::getenv("KILN_SOCKET");
    const bool searched = options.socket.empty() && (env == nullptr || *env == '\0');
    if (searched && e.code == Errc::unavailable) {
      std::string tried;
      for (const auto& c : default_socket_candidates()) tried += (tried.empty() ? "" : ", ") + c.string();
      e.message += " (looked for kilnd's socket at " + tried + ")";
    }
    return e;
  }
  return Client(std::move(impl));
}

const std::filesystem::path& Client::socket_path() const { return impl_->session.socket(); }

Result<ServerInfo> Client::server_info() {
  std::lock_guard lock(impl_->mutex);
  KILN_TRY(impl_->session.ensure_connected());
  const auto& h = impl_->session.hello();
  return ServerInfo{h.server, h.version, h.capabilities, h.roles, h.node};
}

Result<std::string> Client::call(protocol::MsgType type, std::string_view json_body) {
  std::lock_guard lock(impl_->mutex);
  return impl_->session.call(type, json_body);
}

// ---- get ----------------------------------------------------------------------------

Result<std::optional<Artifact>> Client::get(const Lookup& what) {
  std::lock_guard lock(impl_->mutex);
  return impl_->get(what);
}

Result<std::optional<Artifact>> Client::get(const Lookup& what, const GetOptions& get_options) {
  if (get_options.build_on_miss && !std::holds_alternative<Key>(what))
    return make_error(Errc::invalid_argument, "get with build_on_miss needs the key's fields, not only its digest");
  std::lock_guard lock(impl_->mutex);
  return impl_->get(what, get_options);
}

Result<std::optional<Artifact>> Client::Impl::get(const Lookup& what, const Client::GetOptions& get_options) {
  proto::GetRequest req;
  req.ref = detail::to_ref(what);
  if (get_options.build_on_miss) {
    req.on_miss = proto::OnMiss::build;
    req.wait_ms = static_cast<std::uint32_t>(get_options.wait.count());
  }
  req.quiet = get_options.quiet;
  // The session connects (and learns the daemon's abilities) before the request is encoded.
  if (auto st = session.ensure_connected(); !st) return std::move(st).error();
  req.delivery = delivery();
  auto id = session.send_request(proto::MsgType::get, proto::encode(req));
  if (!id) return std::move(id).error();
  auto first = session.read_frame(*id);
  if (!first) return std::move(first).error();
  auto bad = [&](const std::string& why) -> Error {
    session.disconnect();
    return make_error(Errc::protocol_error, "kilnd's GET reply: " + why);
  };
  if (first->header.type != proto::MsgType::ok) return bad("unexpected frame type");
  auto reply = proto::decode<proto::GetReply>(first->text());
  if (!reply) return bad(reply.error().message);
  if (!reply->found) return std::optional<Artifact>{};
  if (!reply->info) return bad("a hit without info");
  ArtifactInfo info = detail::from_meta(std::move(*reply->info));

  if (reply->delivery == proto::Delivery::fd) {
    if (!first->fd.valid()) return bad("a descriptor hit without a descriptor");
    struct stat st{};
    if (::fstat(first->fd.get(), &st) != 0) return error_from_errno(errno, "fstat of the artifact descriptor");
    if (static_cast<std::uint64_t>(st.st_size) != info.size)
      return make_error(Errc::corrupt, "kilnd handed over " + std::to_string(st.st_size) + " bytes for artifact " +
                                           info.key_digest.hex() + " of size " + std::to_string(info.size));
    return std::optional<Artifact>(Artifact(first->fd.release(), std::move(info)));
  }

  if ((first->header.flags & proto::kFlagMore) == 0) return bad("a streamed hit without chunks");
  if (req.delivery == proto::Delivery::automatic) {
    // Sent inline because it is small: kept in memory; a descriptor only if asked for.
    std::vector<std::byte> bytes;
    bytes.reserve(info.size);
    for (;;) {
      auto chunk = session.read_frame(*id);
      if (!chunk) return std::move(chunk).error();
      if (chunk->header.type != proto::MsgType::chunk) return bad("expected a CHUNK frame");
      if (bytes.size() + chunk->body.size() > info.size) return bad("more bytes than the artifact's size");
      bytes.insert(bytes.end(), chunk->body.begin(), chunk->body.end());
      if (chunk->header.flags & proto::kFlagEnd) break;
    }
    if (bytes.size() != info.size)
      return bad("stream ended after " + std::to_string(bytes.size()) + " of " + std::to_string(info.size) + " bytes");
    return std::optional<Artifact>(Artifact(std::move(bytes), std::move(info)));
  }
  // Streamed: CHUNK frames into a sealed memfd of our own, so callers see one shape.
  auto memfd = detail::MemfdWriter::create("kiln-artifact");
  if (!memfd) return std::move(memfd).error();
  std::uint64_t received = 0;
  for (;;) {
    auto chunk = session.read_frame(*id);
    if (!chunk) return std::move(chunk).error();  // an ERROR ends the stream: discard
    if (chunk->header.type != proto::MsgType::chunk) return bad("expected a CHUNK frame");
    received += chunk->body.size();
    if (received > info.size) return bad("more bytes than the artifact's size");
    if (auto st = memfd->write(chunk->body); !st) {
      session.disconnect();  // the rest of the stream is unread
      return std::move(st).error();
    }
    if (chunk->header.flags & proto::kFlagEnd) break;
  }
  if (received != info.size)
    return bad("stream ended after " + std::to_string(received) + " of " + std::to_string(info.size) + " bytes");
  auto fd = memfd->seal();
  if (!fd) return std::move(fd).error();
  return std::optional<Artifact>(Artifact(fd->release(), std::move(info)));
}

// ---- put ----------------------------------------------------------------------------

Result<ArtifactInfo> Client::put(const Key& key, std::span<const std::byte> data, const PutOptions& options) {
  detail::BufferSource source(data);
  std::lock_guard lock(impl_->mutex);
  return impl_->put(key, source, options);
}

Result<ArtifactInfo> Client::put_file(const Key& key, const std::filesystem::path& file, const PutOptions& options) {
  auto source = detail::FileSource::open(file);
  if (!source) return std::move(source).error();
  std::lock_guard lock(impl_->mutex);
  return impl_->put(key, *source, options);
}

namespace {
// A PutSource that reports the bytes read from it (PutOptions::on_progress).
class CountingSource final : public detail::PutSource {
 public:
  CountingSource(detail::PutSource& inner, const std::function<void(std::uint64_t, std::uint64_t)>& report)
      : inner_(inner), report_(report) {}
  std::uint64_t size() const override { return inner_.size(); }
  Result<std::size_t> read(std::span<std::byte> into) override {
    auto n = inner_.read(into);
    if (n) {
      read_ += *n;
      report_(read_, inner_.size());
    }
    return n;
  }

 private:
  detail::PutSource& inner_;
  const std::function<void(std::uint64_t, std::uint64_t)>& report_;
  std::uint64_t read_ = 0;
};
}  // namespace

Result<ArtifactInfo> Client::Impl::put(const Key& key, detail::PutSource& plain_source, const PutOptions& put_options) {
  CountingSource counting(plain_source, put_options.on_progress);
  detail::PutSource& source = put_options.on_progress ? static_cast<detail::PutSource&>(counting) : plain_source;
  proto::PutRequest req;
  req.key = key;
  req.size = source.size();
  req.pin = put_options.pin;
  req.build_seconds = put_options.build_seconds;
  if (put_options.origin == PutOrigin::imported) req.origin = "import";
  if (put_options.created_at > 0) req.created_at = put_options.created_at;
  auto got = stream_request(proto::MsgType::put, proto::encode(req), source);
  if (!got) return std::move(got).error();
  if (got->header.type != proto::MsgType::ok) {
    session.disconnect();
    return make_error(Errc::protocol_error, "kilnd's PUT reply: unexpected frame type");
  }
  auto reply = proto::decode<proto::PutReply>(got->text());
  if (!reply) {
    session.disconnect();
    return make_error(Errc::protocol_error, "kilnd's PUT reply: " + reply.error().message);
  }
  return detail::from_meta(std::move(reply->info));
}

Result<Received> Client::Impl::stream_request(proto::MsgType type, const std::string& body, detail::PutSource& source) {
  auto id = session.send_request(type, body);
  if (!id) return std::move(id).error();

  // Stream the chunks; stop early if the daemon has already answered (an early ERROR:
  // refused role, bad key). The END frame is always sent so the daemon can close the
  // request; a local read error ends the stream short and the daemon rejects the size.
  std::vector<std::byte> buffer(session.chunk_size());
  std::optional<Error> local_error;
  for (;;) {
    if (session.frame_waiting()) {
      KILN_TRY(session.send_chunk(*id, {}, /*end=*/true));
      break;
    }
    auto n = source.read(buffer);
    if (!n) {
      local_error = std::move(n).error();
      KILN_TRY(session.send_chunk(*id, {}, /*end=*/true));
      break;
    }
    const bool end = *n < buffer.size();
    KILN_TRY(session.send_chunk(*id, std::span(buffer).first(*n), end));
    if (end) break;
  }
  auto got = session.read_frame(*id);
  if (local_error) return *local_error;  // what the daemon says about a short stream is secondary
  return got;
}

Result<SourceInfo> Client::put_source(const std::string& model_hash, const std::string& name,
                                      const std::filesystem::path& file) {
  auto source = detail::FileSource::open(file);
  if (!source) return std::move(source).error();
  proto::PutSourceRequest req;
  req.model_hash = model_hash;
  req.name = name;
  req.size = source->size();
  std::lock_guard lock(impl_->mutex);
  auto got = impl_->stream_request(proto::MsgType::put_source, proto::encode(req), *source);
  if (!got) return std::move(got).error();
  auto reply = got->header.type == proto::MsgType::ok ? proto::decode<proto::PutSourceReply>(got->text())
                                                      : Result<proto::PutSourceReply>(make_error(Errc::protocol_error, "unexpected frame type"));
  if (!reply) {
    impl_->session.disconnect();
    return make_error(Errc::protocol_error, "kilnd's PUT_SOURCE reply: " + reply.error().message);
  }
  auto& m = reply->source;
  return SourceInfo{std::move(m.model_hash), m.blob_digest, m.size, m.created_at, std::move(m.name), m.stored_size,
                    std::move(m.aliases)};
}

// ---- metadata -------------------------------------------------------------------------

Result<std::optional<ArtifactInfo>> Client::stat(const Lookup& what) {
  std::lock_guard lock(impl_->mutex);
  auto reply = impl_->call<proto::StatReply>(proto::MsgType::stat, proto::StatRequest{detail::to_ref(what)});
  if (!reply) return std::move(reply).error();
  if (!reply->found || !reply->info) return std::optional<ArtifactInfo>{};
  return std::optional<ArtifactInfo>(detail::from_meta(std::move(*reply->info)));
}

Result<ListPage> Client::list(const ListQuery& query) {
  proto::ListRequest req;
  req.filters = query.filters;
  req.pinned = query.pinned;
  req.accessed_before = query.accessed_before;
  req.limit = static_cast<std::uint32_t>(std::min<std::size_t>(query.limit, UINT32_MAX));
  req.offset = query.offset;
  std::lock_guard lock(impl_->mutex);
  auto reply = impl_->call<proto::ListReply>(proto::MsgType::list, req);
  if (!reply) return std::move(reply).error();
  ListPage page;
  page.entries.reserve(reply->items.size());
  for (auto& item : reply->items) page.entries.push_back(detail::from_meta(std::move(item)));
  if (reply->next_offset) page.next_offset = static_cast<std::size_t>(*reply->next_offset);
  return page;
}

// DELETE/PIN/UNPIN: not_found from the daemon is "false", not an error.
Result<bool> Client::Impl::key_op(proto::MsgType type, const Lookup& what) {
  auto reply = call<proto::KeyOpReply>(type, proto::KeyOpRequest{detail::to_ref(what)});
  if (reply) return true;
  if (reply.error().code == Errc::not_found) return false;
  return std::move(reply).error();
}

Result<bool> Client::remove(const Lookup& what) {
  std::lock_guard lock(impl_->mutex);
  return impl_->key_op(proto::MsgType::del, what);
}
Result<bool> Client::pin(const Lookup& what) {
  std::lock_guard lock(impl_->mutex);
  return impl_->key_op(proto::MsgType::pin, what);
}
Result<bool> Client::unpin(const Lookup& what) {
  std::lock_guard lock(impl_->mutex);
  return impl_->key_op(proto::MsgType::unpin, what);
}

Result<Stats> Client::stats() {
  std::lock_guard lock(impl_->mutex);
  auto reply = impl_->call<proto::StatsReply>(proto::MsgType::stats, proto::StatsRequest{});
  if (!reply) return std::move(reply).error();
  return detail::from_stats(std::move(*reply));
}

Result<DaemonStatus> Client::status() {
  std::lock_guard lock(impl_->mutex);
  auto reply = impl_->call<proto::StatusReply>(proto::MsgType::status, proto::StatusRequest{});
  if (!reply) return std::move(reply).error();
  return detail::from_status(std::move(*reply));
}


// ---- sources (LIST_SOURCES, GET_SOURCE) ----------------------------------------------

namespace {
bool lower_hex(std::string_view s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}
SourceInfo from_source_meta(proto::SourceMeta&& m) {
  return SourceInfo{std::move(m.model_hash), m.blob_digest, m.size,           m.created_at,
                    std::move(m.name),  m.stored_size,  std::move(m.aliases)};
}
}  // namespace

Result<SourcePage> Client::list_sources(const SourceQuery& query) {
  if (query.model_hash_prefix.size() > 64 || !lower_hex(query.model_hash_prefix))
    return make_error(Errc::invalid_argument, "model hash prefix '" + query.model_hash_prefix +
                                                  "': expected 0 to 64 lowercase hex characters");
  proto::ListSourcesRequest req;
  req.model_hash_prefix = query.model_hash_prefix;
  req.limit = static_cast<std::uint32_t>(std::min<std::size_t>(query.limit, UINT32_MAX));
  req.offset = query.offset;
  std::lock_guard lock(impl_->mutex);
  auto reply = impl_->call<proto::ListSourcesReply>(proto::MsgType::list_sources, req);
  if (!reply) return std::move(reply).error();
  SourcePage page;
  page.sources.reserve(reply->items.size());
  for (auto& item : reply->items) page.sources.push_back(from_source_meta(std::move(item)));
  if (reply->next_offset) page.next_offset = static_cast<std::size_t>(*reply->next_offset);
  return page;
}

Result<Source> Client::get_source(const std::string& model_hash) {
  if (model_hash.size() != 64 || !lower_hex(model_hash))
    return make_error(Errc::invalid_argument,
                      "model hash '" + model_hash + "': expected 64 lowercase hex characters");
  proto::GetSourceRequest req;
  req.model_hash = model_hash;
  req.delivery = impl_->options.transfer == Transfer::stream ? proto::Delivery::stream : proto::Delivery::fd;
  std::lock_guard lock(impl_->mutex);
  auto& session = impl_->session;
  auto id = session.send_request(proto::MsgType::get_source, proto::encode(req));
  if (!id) return std::move(id).error();
  auto first = session.read_frame(*id);
  if (!first) return std::move(first).error();  // not_found, corrupt, permission_denied, ...
  auto reply = first->header.type == proto::MsgType::ok
                   ? proto::decode<proto::GetSourceReply>(first->text())
                   : Result<proto::GetSourceReply>(make_error(Errc::protocol_error, "unexpected frame type"));
  if (!reply) {
    session.disconnect();
    return make_error(Errc::protocol_error, "kilnd's GET_SOURCE reply: " + reply.error().message);
  }
  SourceInfo info = from_source_meta(std::move(reply->source));
  auto fd = detail::receive_bytes(session, *id, *first, reply->delivery, info.size, "source " + model_hash);
  if (!fd) return std::move(fd).error();
  return Source(fd->release(), std::move(info));
}

}  // namespace kiln::client
