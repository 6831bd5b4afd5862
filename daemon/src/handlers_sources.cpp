// Handlers for listing and fetching sources (LIST_SOURCES, GET_SOURCE). A fetched source
// is read from the store (its digest verified, as for an artifact) into a sealed memfd and
// handed over by the same delivery code as a GET hit (deliver.hpp).
#include "handlers_sources.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <optional>
#include <utility>

#include "deliver.hpp"
#include "handlers_common.hpp"
#include "offload.hpp"

namespace kiln::daemon {

namespace proto = kiln::protocol;
using proto::MsgType;

namespace {

constexpr std::uint32_t kMaxListLimit = 10000;

// The blob file's size on disk: what the source costs the store. 0 when it cannot be
// read (a concurrent removal): the listing is still right about everything else.
std::uint64_t stored_size(storage::Store& store, const Digest& blob) {
  std::error_code ec;
  auto n = std::filesystem::file_size(store.blob_path(blob), ec);
  return ec ? 0 : static_cast<std::uint64_t>(n);
}

proto::SourceMeta to_source_meta(storage::Store& store, const storage::SourceInfo& s) {
  return proto::SourceMeta{s.model_hash, s.blob_digest, s.size, s.created_at, s.name, stored_size(store, s.blob_digest)};
}

Error not_registered(const std::string& model_hash) {
  return make_error(Errc::not_found, "no source is registered for model hash " + model_hash +
                                         "; register the block's torch.export archive with kilnctl source add FILE "
                                         "--model-hash " + model_hash);
}

Status write_all(int fd, std::span<const std::byte> data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return error_from_errno(errno, "write source copy to memfd");
    }
    data = data.subspan(static_cast<std::size_t>(n));
  }
  return {};
}

struct SourceCopy {
  std::shared_ptr<const ArtifactCopy> copy;
  proto::SourceMeta meta;
};

// Reads the source (verified by the store; a damaged one is quarantined there and
// reported corrupt) into a sealed memfd. nullopt when none is registered. Blocking.
Result<std::optional<SourceCopy>> make_source_copy(storage::Store& store, const std::string& model_hash) {
  const std::string name = "kiln-src-" + model_hash.substr(0, 16);
  int raw = ::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (raw < 0) return error_from_errno(errno, "memfd_create for source copy");
  auto copy = std::make_shared<ArtifactCopy>();
  copy->memfd.reset(raw);
  auto info = store.read_source(model_hash, [raw](std::span<const std::byte> data) { return write_all(raw, data); });
  if (!info) return std::move(info).error();
  if (!*info) return std::optional<SourceCopy>();
  copy->size = (*info)->size;
  off_t end = ::lseek(raw, 0, SEEK_END);
  if (end < 0 || static_cast<std::uint64_t>(end) != copy->size)
    return make_error(Errc::corrupt, "source " + model_hash + ": store delivered " + std::to_string(end) +
                                         " bytes, index says " + std::to_string(copy->size));
  if (::fcntl(raw, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return error_from_errno(errno, "seal source memfd");
  return std::optional<SourceCopy>(SourceCopy{std::move(copy), to_source_meta(store, **info)});
}

asio::awaitable<Outcome> handle_list_sources(Connection& c, const Request& r) {
  auto req = proto::decode<proto::ListSourcesRequest>(r.body);
  if (!req) co_return fail(req.error());
  if (req->limit > kMaxListLimit)
    co_return fail(make_error(Errc::invalid_argument, "list_sources.limit: at most " + std::to_string(kMaxListLimit)));
  const std::uint64_t limit = req->limit ? req->limit : 1000;
  auto& s = c.state();
  auto job = [&s, prefix = req->model_hash_prefix, offset = req->offset, limit]() -> Result<proto::ListSourcesReply> {
    auto all = s.store.list_sources();  // ordered by model hash
    if (!all) return std::move(all).error();
    proto::ListSourcesReply reply;
    std::uint64_t matched = 0;
    for (const auto& src : *all) {
      if (src.model_hash.compare(0, prefix.size(), prefix) != 0) continue;
      if (matched++ < offset) continue;
      if (reply.items.size() == limit) {
        reply.next_offset = offset + limit;
        break;
      }
      reply.items.push_back(to_source_meta(s.store, src));
    }
    return reply;
  };
  auto reply = co_await offload(s.pool, job);
  if (!reply) co_return fail(reply.error());
  co_return co_await reply_ok(c, r, proto::encode(*reply), std::to_string(reply->items.size()) + " sources");
}

asio::awaitable<Outcome> handle_get_source(Connection& c, const Request& r) {
  auto req = proto::decode<proto::GetSourceRequest>(r.body);
  if (!req) co_return fail(req.error());
  auto& s = c.state();
  auto job = [&s, hash = req->model_hash] { return make_source_copy(s.store, hash); };
  auto got = co_await offload(s.pool, job);
  if (!got) co_return fail(got.error());
  if (!*got) co_return fail(not_registered(req->model_hash));
  const SourceCopy& src = **got;
  proto::GetSourceReply reply{req->delivery, src.meta};
  const std::string body = proto::encode(reply);
  const std::string note = "source " + req->model_hash.substr(0, 16) + " " + std::to_string(src.copy->size) + "B";
  if (req->delivery == proto::Delivery::fd) co_return co_await deliver_fd(c, r, src.copy, body, note);
  co_return co_await deliver_stream(c, r, *src.copy, body, note);
}

}  // namespace

asio::awaitable<Outcome> handle_source_request(Connection& c, const Request& r) {
  switch (r.type) {
    case MsgType::list_sources: co_return co_await handle_list_sources(c, r);
    case MsgType::get_source: co_return co_await handle_get_source(c, r);
    default:
      co_return fail(make_error(Errc::protocol_error, "no source handler for " + std::string(proto::type_name(r.type))));
  }
}

}  // namespace kiln::daemon
