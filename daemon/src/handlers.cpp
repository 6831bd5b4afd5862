// Handlers for hello and the artifact operations (get, put, stat, list, delete, pin,
// unpin, stats, status). Admin and build operations are in handlers_admin.cpp.
#include "handlers.hpp"

#include "kiln/aoti_metadata.hpp"

#include <unistd.h>

#include <algorithm>

#include <spdlog/spdlog.h>

#include "deliver.hpp"
#include "handlers_common.hpp"
#include "handlers_sources.hpp"
#include "offload.hpp"

namespace kiln::daemon {

namespace proto = kiln::protocol;
using proto::MsgType;

asio::awaitable<Status> wait_for_builds(ServerState& s) {
  if (s.builds_ready()) co_return Status{};
  // Named, not a temporary in the co_await (GCC 12; see offload.hpp).
  auto job = [&s](std::function<void(bool)> done) { s.when_builds_ready(std::move(done)); };
  if (co_await await_callback<bool>(job)) co_return Status{};
  co_return make_error(Errc::unavailable, "kilnd is stopping before its build service finished probing this node");
}

asio::awaitable<Status> wait_for_node(ServerState& s, const proto::KeyRef& ref) {
  if (s.builds_ready() || !ref.key) co_return Status{};
  // Any field left to the node, not only those unknown so far: the probe may also replace
  // one kilnd detected itself (cpu_isa as torch sees it).
  if (leaves_node_fields(*ref.key)) co_return co_await wait_for_builds(s);
  co_return Status{};
}

Result<Digest> resolve_key(ServerState& s, Key& key) {
  fill_node_fields(key, s.node());
  auto missing = key.missing_fields();
  if (!missing.empty()) {
    std::string names;
    for (const auto& m : missing) names += (names.empty() ? "" : ", ") + m;
    return make_error(Errc::invalid_argument,
                      "key is incomplete: " + names +
                          " empty, and this node does not know them (give them in the key, or set [node] in kilnd.toml)");
  }
  return key.digest();
}

Result<Digest> resolve_ref(ServerState& s, proto::KeyRef& ref) {
  if (ref.key_digest) return *ref.key_digest;
  return resolve_key(s, *ref.key);
}

std::map<std::string, std::string> node_map(const NodeFields& n) {
  return {{"gpu_arch", n.gpu_arch},         {"gpu_name", n.gpu_name},         {"torch_version", n.torch_version},
          {"torch_git", n.torch_git},       {"cuda_version", n.cuda_version}, {"triton_version", n.triton_version},
          {"platform", n.platform},         {"machine", n.machine},           {"cpu_isa", n.cpu_isa}};
}

std::vector<std::string> capabilities(const ServerState& s) {
  std::vector<std::string> caps{"fd", "stream", "auto"};
  if (s.builds) {
    caps.emplace_back("build");
    caps.emplace_back("events");
  }
  if (!s.metrics_url.empty()) caps.emplace_back("metrics");
  return caps;
}

Result<std::string> handle_hello(Connection& c, const Request& r, std::uint32_t& client_max_frame) {
  auto req = proto::decode<proto::HelloRequest>(r.body);
  if (!req) return std::move(req).error();
  if (std::find(req->versions.begin(), req->versions.end(), proto::kVersion) == req->versions.end())
    return make_error(Errc::unsupported, "no common protocol version: kilnd speaks version " +
                                             std::to_string(proto::kVersion) + " only");
  client_max_frame = std::clamp<std::uint32_t>(req->max_frame, 4096, proto::kHardMaxFrame);
  auto& s = c.state();
  auto cfg = s.config();
  proto::HelloReply reply;
  reply.version = proto::kVersion;
  reply.server = kServerName;
  reply.capabilities = capabilities(s);
  reply.max_frame = cfg->limits.max_frame_bytes;
  reply.max_inflight = cfg->limits.max_inflight;
  reply.inline_max = std::min(cfg->limits.inline_max_bytes, client_max_frame);
  reply.roles = proto::role_names_upto(c.role());
  reply.node = node_map(s.node());
  return proto::encode(reply);
}

Status needs_role(Connection& c, proto::Role need, std::string_view what) {
  const proto::Role have = c.role();
  if (have >= need) return {};
  const std::string name(proto::role_name(need));
  return make_error(Errc::permission_denied,
                    std::string(what) + " needs the " + name + " role; uid " + std::to_string(c.peer().uid) +
                        " has " + (have == proto::Role::none ? std::string("no role") : "only " + std::string(proto::role_name(have))) +
                        " (grant it in kilnd.toml [access] " + name + "_users or " + name + "_groups)");
}

namespace {

// What a GET asking for `asked` gets for an artifact of `size` bytes (see GET "auto").
proto::Delivery effective_delivery(Connection& c, proto::Delivery asked, std::uint64_t size) {
  if (asked != proto::Delivery::automatic) return asked;
  const auto cfg = c.state().config();
  const std::uint64_t limit = std::min<std::uint64_t>(cfg->limits.inline_max_bytes, c.client_max_frame());
  return size <= limit ? proto::Delivery::stream : proto::Delivery::fd;
}

asio::awaitable<Outcome> serve_hit(Connection& c, const Request& r, const proto::GetRequest& req, const HotHit& hit,
                                   bool hot) {
  auto& s = c.state();
  if (!req.quiet) s.metrics.record_get(true, hot);
  if (hot && !req.quiet) s.note_hot_hit(hit.meta->key_digest);
  const Digest key_digest = hit.meta->key_digest;
  const std::uint64_t size = hit.copy->size;
  const proto::Delivery delivery = effective_delivery(c, req.delivery, size);
  proto::GetReply reply;
  reply.found = true;
  reply.delivery = delivery;
  std::string note;  // for the request's log line, built only when it is written
  if (spdlog::should_log(spdlog::level::info)) note = std::string(hot ? "hit hot " : "hit cold ") + std::to_string(size) + "B";
  // The encoded reply, cached per hot copy and delivery: a repeated hit does not re-encode the key.
  auto reply_body = [&] {
    std::shared_ptr<const std::string> body = delivery == proto::Delivery::fd ? hit.fd_reply : hit.stream_reply;
    if (!body) {
      reply.info = *hit.meta;
      body = std::make_shared<const std::string>(proto::encode(reply));
      s.hot.cache_reply(key_digest, delivery, body);
    }
    return body;
  };
  if (delivery == proto::Delivery::fd) co_return co_await deliver_fd(c, r, hit.copy, *reply_body(), note);
  if (hit.copy->bytes.size() == size && size <= c.client_max_frame()) {
    // Small and kept in memory: the reply and its one CHUNK in a single write.
    auto body = reply_body();
    const Connection::OutFrame frames[2] = {
        {{proto::kVersion, MsgType::ok, proto::kFlagMore, r.id, 0}, std::as_bytes(std::span(*body))},
        {{proto::kVersion, MsgType::chunk, proto::kFlagEnd, r.id, 0}, std::as_bytes(std::span(hit.copy->bytes))}};
    co_await c.send_frames(frames);
    co_return Outcome{{}, note + " inline", true};
  }
  reply.info = *hit.meta;
  const std::string body = proto::encode(reply);
  co_return co_await deliver_stream(c, r, *hit.copy, body, note);  // the code GET_SOURCE streams with too
}

asio::awaitable<Outcome> handle_get(Connection& c, const Request& r) {
  auto req = proto::decode<proto::GetRequest>(r.body);
  if (!req) co_return fail(req.error());
  auto& s = c.state();
  if (auto waited = co_await wait_for_node(s, req->ref); !waited) co_return fail(waited.error());
  auto digest = resolve_ref(s, req->ref);
  if (!digest) co_return fail(digest.error());
  const Digest d = *digest;

  if (auto hit = s.hot.find(d)) co_return co_await serve_hit(c, r, *req, *hit, true);

  if (req->quiet) {
    // Not a use (an export): read without counting, and keep the hot set for real traffic.
    auto once = co_await offload(s.pool, [&s, d] { return make_copy_or_null(s.store, d, storage::Access::quiet); });
    if (!once) co_return fail(once.error());
    if (*once) {
      HotHit hit;
      hit.copy = *once;
      hit.meta = std::make_shared<const proto::ArtifactMeta>((*once)->meta);
      co_return co_await serve_hit(c, r, *req, hit, false);
    }
    proto::GetReply reply;
    reply.key_digest = d;
    co_await c.send_ok(r.id, proto::encode(reply));
    co_return Outcome{{}, "miss (quiet)", true};
  }

  auto fetch = [&s, d] { return s.hot.get_or_make(d, [&s, d] { return make_copy_or_null(s.store, d); }); };
  auto got = co_await offload(s.pool, fetch);
  if (!got) co_return fail(got.error());
  if (*got) co_return co_await serve_hit(c, r, *req, **got, false);

  // The fleet's registry, before a miss is answered (a build looks there itself: the
  // fleet wraps the build service).
  if (s.fleet && (req->on_miss != proto::OnMiss::build || !s.builds)) {
    auto* fleet = s.fleet;
    auto job = [fleet, d](std::function<void(bool)> done) { fleet->fetch(d, std::move(done)); };
    const bool pulled = co_await await_callback<bool>(job);
    if (pulled) {
      got = co_await offload(s.pool, fetch);
      if (!got) co_return fail(got.error());
      if (*got) co_return co_await serve_hit(c, r, *req, **got, false);
    }
  }

  if (req->on_miss == proto::OnMiss::build) {
    if (auto st = needs_role(c, proto::Role::build, "get with on_miss=build"); !st) co_return fail(st.error());
    if (!s.builds) co_return fail(make_error(Errc::unsupported, "this kilnd has no build service; a miss cannot be built here"));
    if (!req->ref.key)
      co_return fail(make_error(Errc::invalid_argument, "get.on_miss=build needs the key's fields, not only its digest"));
    EnsureOptions opts;
    opts.wait_ms = req->wait_ms;
    Key key = *req->ref.key;
    auto built = co_await await_build(c, r, key, d, opts);
    if (!built) co_return fail(built.error());
    got = co_await offload(s.pool, fetch);
    if (!got) co_return fail(got.error());
    if (*got) co_return co_await serve_hit(c, r, *req, **got, false);
    co_return fail(make_error(Errc::internal, "the build of " + d.hex() + " finished but the store does not have it"));
  }

  s.metrics.record_get(false, false);
  proto::GetReply reply;
  reply.found = false;
  reply.key_digest = d;
  co_await c.send_ok(r.id, proto::encode(reply));
  co_return Outcome{{}, "miss", true};
}

}  // namespace

asio::awaitable<bool> try_hot_get(Connection& c, const Request& r) {
  auto req = proto::decode<proto::GetRequest>(r.body);
  if (!req || req->delivery == proto::Delivery::stream) co_return false;
  auto& s = c.state();
  auto d = resolve_ref(s, req->ref);
  if (!d) co_return false;
  auto hit = s.hot.find(*d);
  if (!hit) co_return false;
  // Descriptors and small kept bytes only: a longer stream takes the normal path.
  if (effective_delivery(c, req->delivery, hit->copy->size) != proto::Delivery::fd &&
      hit->copy->bytes.size() != hit->copy->size)
    co_return false;
  Outcome o = co_await serve_hit(c, r, *req, *hit, true);
  if (!o.status && !o.replied) co_await c.send_error(r.id, o.status.error());
  c.log_request(r, o);
  co_return true;
}

namespace {

asio::awaitable<Outcome> handle_stat(Connection& c, const Request& r) {
  auto req = proto::decode<proto::StatRequest>(r.body);
  if (!req) co_return fail(req.error());
  auto& s = c.state();
  if (auto waited = co_await wait_for_node(s, req->ref); !waited) co_return fail(waited.error());
  auto d = resolve_ref(s, req->ref);
  if (!d) co_return fail(d.error());
  std::string signer;
  auto job = [&s, &signer, d = *d] {
    s.flush_hot_hits();  // hits served from hot copies show in the count
    auto i = s.store.stat(d);
    if (i && *i && (*i)->origin == "registry") {
      if (auto sig = s.store.signature("artifact:" + d.hex()); sig && *sig) signer = (*sig)->signer;
    }
    return i;
  };
  auto info = co_await offload(s.pool, job);
  if (!info) co_return fail(info.error());
  proto::StatReply reply;
  reply.found = info->has_value();
  reply.key_digest = *d;
  if (*info) {
    reply.info = to_meta(**info);
    reply.info->signer = signer;
  }
  co_return co_await reply_ok(c, r, proto::encode(reply), reply.found ? "found" : "not stored");
}

asio::awaitable<Outcome> handle_list(Connection& c, const Request& r) {
  auto req = proto::decode<proto::ListRequest>(r.body);
  if (!req) co_return fail(req.error());
  if (req->limit > 10000) co_return fail(make_error(Errc::invalid_argument, "list.limit: at most 10000"));
  const std::size_t limit = req->limit ? req->limit : 1000;
  storage::ListQuery q;
  q.filters = req->filters;
  q.pinned = req->pinned;
  q.accessed_before = req->accessed_before;
  q.limit = limit + 1;  // one more tells whether a next page exists
  q.offset = req->offset;
  auto& s = c.state();
  auto job = [&s, q] {
    s.flush_hot_hits();  // HITS agrees with STAT's
    return s.store.list(q);
  };
  auto items = co_await offload(s.pool, job);
  if (!items) co_return fail(items.error());
  proto::ListReply reply;
  for (std::size_t i = 0; i < items->size() && i < limit; ++i) reply.items.push_back(to_meta((*items)[i]));
  if (items->size() > limit) reply.next_offset = req->offset + limit;
  co_return co_await reply_ok(c, r, proto::encode(reply), std::to_string(reply.items.size()) + " items");
}

asio::awaitable<Outcome> handle_key_op(Connection& c, const Request& r) {
  auto req = proto::decode<proto::KeyOpRequest>(r.body);
  if (!req) co_return fail(req.error());
  auto& s = c.state();
  if (auto waited = co_await wait_for_node(s, req->ref); !waited) co_return fail(waited.error());
  auto d = resolve_ref(s, req->ref);
  if (!d) co_return fail(d.error());
  const Digest digest = *d;
  const MsgType type = r.type;
  auto existed = co_await offload(s.pool, [&s, digest, type]() -> Result<bool> {
    if (type == MsgType::del) return s.store.remove(digest);
    return s.store.set_pinned(digest, type == MsgType::pin);
  });
  if (!existed) co_return fail(existed.error());
  if (!*existed) co_return fail(make_error(Errc::not_found, "no artifact with key digest " + digest.hex()));
  if (type == MsgType::del) s.forget_copies(digest);
  else s.hot.set_pinned(digest, type == MsgType::pin);
  co_return co_await reply_ok(c, r, proto::encode(proto::KeyOpReply{digest}), digest.hex().substr(0, 16));
}

asio::awaitable<Outcome> handle_stats(Connection& c, const Request& r) {
  auto req = proto::decode<proto::StatsRequest>(r.body);
  if (!req) co_return fail(req.error());
  auto& s = c.state();
  auto st = co_await offload(s.pool, [&s] {
    s.flush_hot_hits();
    return s.store.stats();
  });
  if (!st) co_return fail(st.error());
  proto::StatsReply reply;
  reply.store = {{"entries", st->entries},         {"stored_bytes", st->stored_bytes},
                 {"uncompressed_bytes", st->uncompressed_bytes}, {"hits", st->hits},
                 {"misses", st->misses},           {"evictions", st->evictions},
                 {"quarantined", st->quarantined}, {"quota_bytes", st->quota_bytes},
                 {"hard_limit_bytes", st->hard_limit_bytes}};
  reply.daemon = {{"uptime_s", s.uptime_s()},       {"connections", s.metrics.connections()},
                  {"requests", s.metrics.requests()}, {"hot_entries", s.hot.entries()},
                  {"hot_bytes", s.hot.bytes()},      {"hot_capacity_bytes", s.hot.capacity()},
                  {"bytes_served", s.metrics.bytes_served()}};
  co_return co_await reply_ok(c, r, proto::encode(reply), "");
}

asio::awaitable<Outcome> handle_status(Connection& c, const Request& r) {
  auto req = proto::decode<proto::StatusRequest>(r.body);
  if (!req) co_return fail(req.error());
  auto& s = c.state();
  auto cfg = s.config();
  proto::StatusReply reply;
  reply.server = kServerName;
  reply.version = proto::kVersion;
  reply.pid = ::getpid();
  reply.uptime_s = s.uptime_s();
  reply.socket = cfg->socket.string();
  reply.store = cfg->store.string();
  reply.node = node_map(s.node());
  reply.roles = proto::role_names_upto(c.role());
  reply.capabilities = capabilities(s);
  if (!s.metrics_url.empty()) reply.metrics = s.metrics_url;
  reply.draining = s.draining.load();
  // GPUs are learned by the build scheduler's probe at start; without builds none is probed.
  proto::GpuReport gpus;
  if (s.builds) gpus = s.builds->gpu_report();
  else gpus.note = "builds are disabled on this node: GPUs are not probed";
  reply.gpus = std::move(gpus.gpus);
  reply.gpu_note = std::move(gpus.note);
  reply.build_slots = std::move(gpus.slots);
  reply.builds_note = s.builds ? std::move(gpus.builds_note) : s.builds_off_reason;
  reply.builds_probing = !s.builds_ready();
  if (!s.builds && reply.builds_note.empty()) reply.builds_note = "builds are disabled on this node";
  reply.torch_cache_socket = cfg->torch_cache.socket.string();
  reply.torch_cache_listen = cfg->torch_cache.listen;
  if (cfg->torch_cache.enabled()) {
    reply.torch_cache_durability = s.torch_deferred ? "deferred" : "sync";
    reply.torch_cache_fleet = s.fleet && cfg->torch_cache.fleet;
    if (s.torch_deferred) {
      const auto q = s.torch_queue.stats();
      reply.torch_cache_queued_entries = q.entries;
      reply.torch_cache_queued_bytes = q.bytes;
    }
  }
  reply.verify_total = s.verify_total.load();
  reply.verify_checked = s.verify_checked.load();
  if (s.fleet) {
    auto* fleet = s.fleet;
    auto job = [fleet] { return fleet->status_json(); };
    reply.fleet = co_await offload(s.pool, job);
  }
  co_return co_await reply_ok(c, r, proto::encode(reply), "");
}

}  // namespace

asio::awaitable<Outcome> reply_ok(Connection& c, const Request& r, const std::string& body, std::string note) {
  co_await c.send_ok(r.id, body);
  co_return Outcome{{}, std::move(note), true};
}

asio::awaitable<Outcome> handle_request(Connection& c, const Request& r) {
  switch (r.type) {
    case MsgType::get: co_return co_await handle_get(c, r);
    case MsgType::stat: co_return co_await handle_stat(c, r);
    case MsgType::list: co_return co_await handle_list(c, r);
    case MsgType::del:
    case MsgType::pin:
    case MsgType::unpin: co_return co_await handle_key_op(c, r);
    case MsgType::stats: co_return co_await handle_stats(c, r);
    case MsgType::status: co_return co_await handle_status(c, r);
    case MsgType::list_sources:
    case MsgType::get_source: co_return co_await handle_source_request(c, r);
    default: co_return co_await handle_admin_request(c, r);
  }
}

// ---- uploads -------------------------------------------------------------------------

Result<Upload> prepare_upload(Connection& c, const Request& r) {
  auto& s = c.state();
  const auto max = s.config()->limits.max_artifact_bytes;
  Upload up;
  up.type = r.type;
  up.received = r.received;
  if (r.type == MsgType::put) {
    auto req = proto::decode<proto::PutRequest>(r.body);
    if (!req) return std::move(req).error();
    auto d = resolve_key(s, req->key);
    if (!d) return std::move(d).error();
    up.key = std::move(req->key);
    up.key_digest = *d;
    up.meta.pin = req->pin;
    up.meta.build_seconds = req->build_seconds;
    if (req->origin != "put" && req->origin != "import")
      return make_error(Errc::invalid_argument, "put.origin: \"" + req->origin.substr(0, 64) +
                                                    "\" is kilnd's own to say; a client puts \"put\" or \"import\"");
    up.meta.origin = req->origin;
    up.meta.created_at = req->created_at.value_or(0);
    up.expect_size = req->size;
    up.expect_blob = req->blob_digest;
    up.keep_aoti_copy = up.key.kind == ArtifactKind::aoti;
  } else {
    auto req = proto::decode<proto::PutSourceRequest>(r.body);
    if (!req) return std::move(req).error();
    // No model hash: the node computes it (its build worker's hash op) and the reply says it.
    if (!req->model_hash.empty() && (req->model_hash.size() != 64 || !Digest::from_hex(req->model_hash)))
      return make_error(Errc::invalid_argument, "put_source.model_hash: expected 64 hex chars");
    up.model_hash = req->model_hash;
    up.name = req->name;
    up.expect_size = req->size;
  }
  if (up.expect_size && *up.expect_size > max)
    return make_error(Errc::invalid_argument, "size " + std::to_string(*up.expect_size) +
                                                  " exceeds limits.max_artifact_bytes (" + std::to_string(max) + ")");
  if (up.expect_blob) up.sha = std::make_unique<Sha256>();
  return up;
}

Status check_upload(Upload& up) {
  if (up.expect_size && *up.expect_size != up.received_bytes)
    return make_error(Errc::invalid_argument, "upload ended after " + std::to_string(up.received_bytes) +
                                                  " bytes; its size promised " + std::to_string(*up.expect_size));
  if (up.keep_aoti_copy) {
    // The package's own metadata must agree with the key it is filed under (a package for
    // another GPU or host under this key would crash or mis-run in every consumer).
    auto meta = read_aoti_metadata(std::as_bytes(std::span(up.aoti_copy.data(), up.aoti_copy.size())));
    if (!meta) return std::move(meta).error();
    if (*meta) {
      if (auto st = check_aoti_metadata(up.key, **meta); !st)
        return make_error(Errc::invalid_argument, "PUT refused: " + st.error().message);
    }
  }
  if (up.sha) {
    Digest got = up.sha->finish();
    if (got != *up.expect_blob)
      return make_error(Errc::invalid_argument, "upload's SHA-256 " + got.hex() +
                                                    " differs from the blob_digest it promised " + up.expect_blob->hex());
  }
  return {};
}

asio::awaitable<Outcome> commit_upload(Connection& c, std::uint32_t id, const std::shared_ptr<Upload>& shared) {
  auto& s = c.state();
  Request r{shared->type, id, {}, shared->received};
  if (shared->type == MsgType::put_source) {
    // A node that can build hashes every source before storing it; one that cannot (no
    // build slot, no worker toolchain) stores the bytes as sent, which is storing bytes
    // made elsewhere: put's, not build's.
    if (!shared->check) {
      if (auto st = needs_role(c, proto::Role::put, "put_source on a node that cannot verify sources"); !st) {
        (void)co_await offload(s.pool, [shared] {
          shared->stream.reset();
          return true;
        });
        co_return fail(st.error());
      }
    }
    if (shared->check) {
      // The worker's hash op, on the builds' own threads (bounded by source_check_timeout_s):
      // a source that does not hash to its model hash is never stored (schema/sources.md).
      auto verify = [shared](std::function<void(Result<std::string>)> done) {
        shared->check->verify(shared->model_hash, std::move(done));
      };
      Result<std::string> verified = co_await await_callback<Result<std::string>>(verify);
      auto drop = [shared] {
        shared->check.reset();  // removes the check's file
        if (shared->stream) shared->stream.reset();
        return true;
      };
      if (!verified) {
        (void)co_await offload(s.pool, drop);
        co_return fail(verified.error());
      }
      if (shared->model_hash.empty()) {
        shared->model_hash = *verified;
        shared->computed_hash = true;
      }
    }
    auto job = [&s, shared]() -> Result<storage::SourceInfo> {
      shared->check.reset();
      // Registering a program by its bytes alone is idempotent: another process's export
      // of the same program (same hash; archives are not byte-stable) is that source.
      // Its name (kiln.torch's kiln-fp-<fingerprint>) is kept as one of the source's, so
      // that a later process with that name finds it without exporting again.
      if (shared->computed_hash) {
        auto named = s.store.add_source_name(shared->model_hash, shared->name);
        if (named || named.error().code != Errc::not_found) {
          shared->stream.reset();
          return named;
        }
      }
      return s.store.put_source(shared->model_hash, std::move(shared->stream), shared->name);
    };
    auto src = co_await offload(s.pool, job);
    if (!src) co_return fail(src.error());
    proto::PutSourceReply reply;
    reply.source = {src->model_hash, src->blob_digest, src->size, src->created_at, src->name, 0, src->aliases};
    co_return co_await reply_ok(c, r, proto::encode(reply), std::to_string(src->size) + "B");
  }
  auto job = [&s, shared] { return s.store.commit(std::move(shared->stream), shared->key, shared->meta); };
  auto info = co_await offload(s.pool, job);
  if (!info) co_return fail(info.error());
  s.forget_copies(shared->key_digest);  // a copy of the replaced artifact must not be served
  proto::PutReply reply{to_meta(*info)};
  co_return co_await reply_ok(c, r, proto::encode(reply), std::to_string(info->size) + "B " + info->key_digest.hex().substr(0, 16));
}

}  // namespace kiln::daemon
