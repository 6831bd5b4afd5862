// Handlers for listing and fetching sources (LIST_SOURCES, GET_SOURCE). A fetched source
// is read from the store (its digest verified, as for an artifact) into a sealed memfd and
// handed over by the same delivery code as a GET hit (deliver.hpp).
#include "handlers_sources.hpp"

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
  return proto::SourceMeta{s.model_hash, s.blob_digest, s.size,       s.created_at,
                           s.name,       stored_size(store, s.blob_digest), s.aliases};
}

Error not_registered(const std::string& model_hash) {
  return make_error(Errc::not_found, "no source is registered for model hash " + model_hash +
                                         "; register the block's torch.export archive with kilnctl source add FILE "
                                         "--model-hash " + model_hash);
}

struct SourceCopy {
  std::shared_ptr<const ArtifactCopy> copy;
  proto::SourceMeta meta;
};

// Reads the source (verified by the store; a damaged one is quarantined there and
// reported corrupt) into a sealed memfd. nullopt when none is registered. Blocking.
Result<std::optional<SourceCopy>> make_source_copy(storage::Store& store, const std::string& model_hash) {
  std::optional<storage::SourceInfo> found;
  auto copy = make_sealed_copy("kiln-src-" + model_hash.substr(0, 16), "source " + model_hash,
                               [&](const storage::ByteSink& sink) -> Result<std::optional<std::uint64_t>> {
                                 auto info = store.read_source(model_hash, sink);
                                 if (!info) return std::move(info).error();
                                 if (!*info) return std::optional<std::uint64_t>();
                                 found = std::move(**info);
                                 return std::optional<std::uint64_t>(found->size);
                               });
  if (!copy) return std::move(copy).error();
  if (!*copy) return std::optional<SourceCopy>();
  return std::optional<SourceCopy>(SourceCopy{std::move(*copy), to_source_meta(store, *found)});
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
