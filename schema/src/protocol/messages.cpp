// JSON bodies of the wire protocol: shared shapes, hello and the artifact operations.
// Admin and build messages are in messages_admin.cpp.
#include "kiln/protocol/messages.hpp"

#include "json_codec.hpp"
#include "messages_common.hpp"

namespace kiln::protocol {

using detail::In;
using detail::json;

namespace detail {

json to_json(const ArtifactMeta& m) {
  json j{{"key", key_json(m.key)},       {"key_digest", m.key_digest.hex()},
              {"blob_digest", m.blob_digest.hex()}, {"size", m.size},
              {"stored_size", m.stored_size}, {"created_at", m.created_at},
              {"last_access", m.last_access}, {"hits", m.hits},
              {"build_seconds", m.build_seconds}, {"pinned", m.pinned}};
  if (!m.origin.empty()) j["origin"] = m.origin;
  if (!m.signer.empty()) j["signer"] = m.signer;
  return j;
}

std::string conv(const json& j, ArtifactMeta& m) {
  In in(j, "info");
  in.req("key", m.key).req("key_digest", m.key_digest).req("blob_digest", m.blob_digest).req("size", m.size);
  in.opt("stored_size", m.stored_size).opt("created_at", m.created_at).opt("last_access", m.last_access);
  in.opt("hits", m.hits).opt("build_seconds", m.build_seconds).opt("pinned", m.pinned);
  in.opt("origin", m.origin).opt("signer", m.signer);
  return in.error() ? in.error()->message : std::string{};
}

json to_json(const SourceMeta& s) {
  json j{{"model_hash", s.model_hash}, {"blob_digest", s.blob_digest.hex()}, {"size", s.size},
         {"created_at", s.created_at}, {"name", s.name}};
  if (s.stored_size) j["stored_size"] = s.stored_size;
  if (!s.aliases.empty()) j["aliases"] = s.aliases;
  return j;
}

std::string conv(const json& j, SourceMeta& s) {
  In in(j, "source");
  in.req("model_hash", s.model_hash).req("blob_digest", s.blob_digest).req("size", s.size);
  in.opt("created_at", s.created_at).opt("name", s.name).opt("stored_size", s.stored_size).opt("aliases", s.aliases);
  return in.error() ? in.error()->message : std::string{};
}

void put_ref(json& j, const KeyRef& ref) {
  if (ref.key_digest) j["key_digest"] = ref.key_digest->hex();
  if (ref.key) j["key"] = key_json(*ref.key);
}

void read_ref(In& in, KeyRef& ref) {
  in.opt("key_digest", ref.key_digest).opt("key", ref.key);
  if (in.error()) return;
  if (ref.key_digest && ref.key) in.fail("give key_digest or key, not both");
  else if (!ref.key_digest && !ref.key) in.fail("key_digest or key required");
}

}  // namespace detail

using namespace detail;

namespace {
std::string_view delivery_name(Delivery d) {
  switch (d) {
    case Delivery::fd: return "fd";
    case Delivery::stream: return "stream";
    case Delivery::automatic: return "auto";
  }
  return "fd";
}
void read_delivery(In& in, const char* name, Delivery& out) {
  std::string s;
  in.opt(name, s);
  if (in.error() || s.empty()) return;
  if (s == "fd") out = Delivery::fd;
  else if (s == "stream") out = Delivery::stream;
  else if (s == "auto") out = Delivery::automatic;
  else in.fail(std::string(name) + ": expected \"fd\", \"stream\" or \"auto\"");
}
}  // namespace

// ---- error ---------------------------------------------------------------------------

std::string encode(const ErrorBody& e) {
  return json{{"code", static_cast<int>(e.code)}, {"name", std::string(errc_name(e.code))}, {"message", e.message}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}
template <>
Result<ErrorBody> decode<ErrorBody>(std::string_view text) {
  KILN_DECODE_BEGIN("error");
  ErrorBody e;
  std::int64_t code = 0;
  in.req("code", code).opt("message", e.message);
  e.code = (code > 0 && code <= static_cast<int>(Errc::internal)) ? static_cast<Errc>(code) : Errc::internal;
  KILN_DECODE_END(e);
}

// ---- hello ---------------------------------------------------------------------------

std::string encode(const HelloRequest& m) {
  return dump(json{{"versions", m.versions}, {"client", m.client}, {"capabilities", m.capabilities},
                   {"max_frame", m.max_frame}});
}
template <>
Result<HelloRequest> decode<HelloRequest>(std::string_view text) {
  KILN_DECODE_BEGIN("hello");
  HelloRequest m;
  in.req("versions", m.versions).opt("client", m.client).opt("capabilities", m.capabilities).opt("max_frame", m.max_frame);
  KILN_DECODE_END(m);
}
std::string encode(const HelloReply& m) {
  return dump(json{{"version", m.version}, {"server", m.server}, {"capabilities", m.capabilities},
                   {"max_frame", m.max_frame}, {"max_inflight", m.max_inflight}, {"roles", m.roles},
                   {"node", m.node}, {"inline_max", m.inline_max}});
}
template <>
Result<HelloReply> decode<HelloReply>(std::string_view text) {
  KILN_DECODE_BEGIN("hello reply");
  HelloReply m;
  in.req("version", m.version).opt("server", m.server).opt("capabilities", m.capabilities);
  in.opt("max_frame", m.max_frame).opt("max_inflight", m.max_inflight).opt("roles", m.roles).opt("node", m.node);
  in.opt("inline_max", m.inline_max);
  KILN_DECODE_END(m);
}

// ---- get -----------------------------------------------------------------------------

std::string encode(const GetRequest& m) {
  // By digest with no options, what nearly every GET is: the bytes the JSON below would
  // dump (keys sorted, no spaces), written directly; decode<GetRequest> reads them back
  // the same way.
  if (m.ref.key_digest && !m.ref.key && m.on_miss == OnMiss::none && !m.wait_ms && !m.quiet) {
    std::string out;
    out.reserve(96);
    out.append(R"({"delivery":")").append(delivery_name(m.delivery)).append(R"(","key_digest":")");
    out.append(m.ref.key_digest->hex()).append(R"("})");
    return out;
  }
  json j = json::object();
  put_ref(j, m.ref);
  j["delivery"] = delivery_name(m.delivery);
  if (m.on_miss == OnMiss::build) j["on_miss"] = "build";
  if (m.wait_ms) j["wait_ms"] = m.wait_ms;
  if (m.quiet) j["quiet"] = true;
  return dump(j);
}
namespace {
// The body nearly every GET carries, `{"delivery":"auto","key_digest":"<64 hex>"}` as
// encode() writes it (keys sorted, no spaces), read without building a JSON tree: a hot
// hit is answered in microseconds, and the tree (allocated keys, strings, nodes) was one
// of them. Anything else, valid or not, takes the general path, which decides as before.
std::optional<GetRequest> decode_plain_get(std::string_view text) {
  static constexpr std::string_view kHead = R"({"delivery":")", kMid = R"(","key_digest":")", kTail = R"("})";
  if (!text.starts_with(kHead) || !text.ends_with(kTail)) return std::nullopt;
  text.remove_prefix(kHead.size());
  text.remove_suffix(kTail.size());
  GetRequest m;
  if (text.starts_with("auto")) m.delivery = Delivery::automatic;
  else if (text.starts_with("fd")) m.delivery = Delivery::fd;
  else if (text.starts_with("stream")) m.delivery = Delivery::stream;
  else return std::nullopt;
  text.remove_prefix(delivery_name(m.delivery).size());
  if (!text.starts_with(kMid) || text.size() != kMid.size() + 64) return std::nullopt;
  auto digest = Digest::from_hex(text.substr(kMid.size()));
  if (!digest) return std::nullopt;
  m.ref.key_digest = *digest;
  return m;
}
}  // namespace

template <>
Result<GetRequest> decode<GetRequest>(std::string_view text) {
  if (auto plain = decode_plain_get(text)) return std::move(*plain);
  KILN_DECODE_BEGIN("get");
  GetRequest m;
  read_ref(in, m.ref);
  read_delivery(in, "delivery", m.delivery);
  std::string on_miss;
  in.opt("on_miss", on_miss).opt("wait_ms", m.wait_ms).opt("quiet", m.quiet);
  if (on_miss == "build") m.on_miss = OnMiss::build;
  else if (!on_miss.empty() && on_miss != "none") in.fail("on_miss: expected \"none\" or \"build\"");
  KILN_DECODE_END(m);
}
std::string encode(const GetReply& m) {
  json j{{"found", m.found}};
  if (m.found) j["delivery"] = delivery_name(m.delivery);
  if (m.key_digest) j["key_digest"] = m.key_digest->hex();
  if (m.info) j["info"] = to_json(*m.info);
  return dump(j);
}
template <>
Result<GetReply> decode<GetReply>(std::string_view text) {
  KILN_DECODE_BEGIN("get reply");
  GetReply m;
  in.req("found", m.found).opt("key_digest", m.key_digest).opt("info", m.info);
  read_delivery(in, "delivery", m.delivery);
  if (!in.error() && m.found && !m.info) in.fail("info: required on a hit");
  if (!in.error() && m.delivery == Delivery::automatic) in.fail("delivery: a reply says \"fd\" or \"stream\"");
  KILN_DECODE_END(m);
}

// ---- put -----------------------------------------------------------------------------

std::string encode(const PutRequest& m) {
  json j{{"key", key_json(m.key)}, {"pin", m.pin}, {"build_seconds", m.build_seconds}};
  if (m.size) j["size"] = *m.size;
  if (m.blob_digest) j["blob_digest"] = m.blob_digest->hex();
  // Only when not a plain put: a plain PUT reads as it did before these fields.
  if (m.origin != "put") j["origin"] = m.origin;
  if (m.created_at) j["created_at"] = *m.created_at;
  return dump(j);
}
template <>
Result<PutRequest> decode<PutRequest>(std::string_view text) {
  KILN_DECODE_BEGIN("put");
  PutRequest m;
  in.req("key", m.key).opt("size", m.size).opt("blob_digest", m.blob_digest).opt("pin", m.pin);
  in.opt("build_seconds", m.build_seconds).opt("origin", m.origin).opt("created_at", m.created_at);
  KILN_DECODE_END(m);
}
std::string encode(const PutReply& m) { return dump(json{{"info", to_json(m.info)}}); }
template <>
Result<PutReply> decode<PutReply>(std::string_view text) {
  KILN_DECODE_BEGIN("put reply");
  PutReply m;
  in.req("info", m.info);
  KILN_DECODE_END(m);
}

// ---- stat ----------------------------------------------------------------------------

std::string encode(const StatRequest& m) {
  json j = json::object();
  put_ref(j, m.ref);
  return dump(j);
}
template <>
Result<StatRequest> decode<StatRequest>(std::string_view text) {
  KILN_DECODE_BEGIN("stat");
  StatRequest m;
  read_ref(in, m.ref);
  KILN_DECODE_END(m);
}
std::string encode(const StatReply& m) {
  json j{{"found", m.found}};
  if (m.key_digest) j["key_digest"] = m.key_digest->hex();
  if (m.info) j["info"] = to_json(*m.info);
  return dump(j);
}
template <>
Result<StatReply> decode<StatReply>(std::string_view text) {
  KILN_DECODE_BEGIN("stat reply");
  StatReply m;
  in.req("found", m.found).opt("key_digest", m.key_digest).opt("info", m.info);
  if (!in.error() && m.found && !m.info) in.fail("info: required when found");
  KILN_DECODE_END(m);
}

// ---- list ----------------------------------------------------------------------------

std::string encode(const ListRequest& m) {
  json j{{"filters", m.filters}, {"limit", m.limit}, {"offset", m.offset}};
  if (m.pinned) j["pinned"] = *m.pinned;
  if (m.accessed_before) j["accessed_before"] = m.accessed_before;
  return dump(j);
}
template <>
Result<ListRequest> decode<ListRequest>(std::string_view text) {
  KILN_DECODE_BEGIN("list");
  ListRequest m;
  in.opt("filters", m.filters).opt("pinned", m.pinned).opt("accessed_before", m.accessed_before);
  in.opt("limit", m.limit).opt("offset", m.offset);
  KILN_DECODE_END(m);
}
std::string encode(const ListReply& m) {
  json items = json::array();
  for (const auto& i : m.items) items.push_back(to_json(i));
  json j{{"items", std::move(items)}};
  if (m.next_offset) j["next_offset"] = *m.next_offset;
  return dump(j);
}
template <>
Result<ListReply> decode<ListReply>(std::string_view text) {
  KILN_DECODE_BEGIN("list reply");
  ListReply m;
  in.req("items", m.items).opt("next_offset", m.next_offset);
  KILN_DECODE_END(m);
}

// ---- delete / pin / unpin ------------------------------------------------------------

std::string encode(const KeyOpRequest& m) {
  json j = json::object();
  put_ref(j, m.ref);
  return dump(j);
}
template <>
Result<KeyOpRequest> decode<KeyOpRequest>(std::string_view text) {
  KILN_DECODE_BEGIN("request");
  KeyOpRequest m;
  read_ref(in, m.ref);
  KILN_DECODE_END(m);
}
std::string encode(const KeyOpReply& m) { return dump(json{{"key_digest", m.key_digest.hex()}}); }
template <>
Result<KeyOpReply> decode<KeyOpReply>(std::string_view text) {
  KILN_DECODE_BEGIN("reply");
  KeyOpReply m;
  in.req("key_digest", m.key_digest);
  KILN_DECODE_END(m);
}

// ---- stats / status ------------------------------------------------------------------

std::string encode(const StatsRequest&) { return "{}"; }
template <>
Result<StatsRequest> decode<StatsRequest>(std::string_view text) {
  KILN_DECODE_BEGIN("stats");
  KILN_DECODE_END(StatsRequest{});
}
std::string encode(const StatsReply& m) { return dump(json{{"store", m.store}, {"daemon", m.daemon}}); }
template <>
Result<StatsReply> decode<StatsReply>(std::string_view text) {
  KILN_DECODE_BEGIN("stats reply");
  StatsReply m;
  in.req("store", m.store).opt("daemon", m.daemon);
  KILN_DECODE_END(m);
}

std::string encode(const StatusRequest&) { return "{}"; }
template <>
Result<StatusRequest> decode<StatusRequest>(std::string_view text) {
  KILN_DECODE_BEGIN("status");
  KILN_DECODE_END(StatusRequest{});
}
std::string encode(const StatusReply& m) {
  json j{{"server", m.server}, {"version", m.version},   {"pid", m.pid},
         {"uptime_s", m.uptime_s}, {"socket", m.socket}, {"store", m.store},
         {"node", m.node},     {"roles", m.roles},       {"capabilities", m.capabilities},
         {"draining", m.draining}};
  if (m.metrics) j["metrics"] = *m.metrics;
  put_gpus(j, m.gpus, m.gpu_note, m.build_slots);
  if (!m.builds_note.empty()) j["builds_unavailable"] = m.builds_note;
  if (m.builds_probing) j["builds_probing"] = true;
  if (!m.torch_cache_socket.empty() || !m.torch_cache_listen.empty()) {
    json t = json::object();
    if (!m.torch_cache_socket.empty()) t["socket"] = m.torch_cache_socket;
    if (!m.torch_cache_listen.empty()) t["listen"] = m.torch_cache_listen;
    if (!m.torch_cache_durability.empty()) t["durability"] = m.torch_cache_durability;
    if (m.torch_cache_durability == "deferred")
      t["queued"] = json{{"entries", m.torch_cache_queued_entries}, {"bytes", m.torch_cache_queued_bytes}};
    t["fleet"] = m.torch_cache_fleet;
    j["torch_cache"] = std::move(t);
  }
  if (m.verify_total) j["verify"] = json{{"checked", m.verify_checked}, {"total", m.verify_total}};
  if (!m.fleet.empty()) {
    auto f = json::parse(m.fleet, nullptr, false);
    if (!f.is_discarded()) j["fleet"] = std::move(f);
  }
  return dump(j);
}
template <>
Result<StatusReply> decode<StatusReply>(std::string_view text) {
  KILN_DECODE_BEGIN("status reply");
  StatusReply m;
  in.req("server", m.server).opt("version", m.version).opt("pid", m.pid).opt("uptime_s", m.uptime_s);
  in.opt("socket", m.socket).opt("store", m.store).opt("node", m.node).opt("roles", m.roles);
  in.opt("capabilities", m.capabilities).opt("metrics", m.metrics).opt("draining", m.draining);
  in.opt("gpus", m.gpus).opt("gpu_note", m.gpu_note).opt("build_slots", m.build_slots);
  in.opt("builds_unavailable", m.builds_note).opt("builds_probing", m.builds_probing);
  if (auto v = parsed_->find("verify"); v != parsed_->end() && v->is_object()) {
    if (auto c = v->find("checked"); c != v->end() && c->is_number_unsigned()) m.verify_checked = c->get<std::uint64_t>();
    if (auto t = v->find("total"); t != v->end() && t->is_number_unsigned()) m.verify_total = t->get<std::uint64_t>();
  }
  if (auto t = parsed_->find("torch_cache"); t != parsed_->end() && t->is_object()) {
    if (auto s = t->find("socket"); s != t->end() && s->is_string()) m.torch_cache_socket = s->get<std::string>();
    if (auto l = t->find("listen"); l != t->end() && l->is_string()) m.torch_cache_listen = l->get<std::string>();
    if (auto u = t->find("durability"); u != t->end() && u->is_string()) m.torch_cache_durability = u->get<std::string>();
    if (auto f = t->find("fleet"); f != t->end() && f->is_boolean()) m.torch_cache_fleet = f->get<bool>();
    if (auto q = t->find("queued"); q != t->end() && q->is_object()) {
      if (auto e = q->find("entries"); e != q->end() && e->is_number_unsigned())
        m.torch_cache_queued_entries = e->get<std::uint64_t>();
      if (auto b = q->find("bytes"); b != q->end() && b->is_number_unsigned())
        m.torch_cache_queued_bytes = b->get<std::uint64_t>();
    }
  }
  if (auto f = parsed_->find("fleet"); f != parsed_->end() && f->is_object()) m.fleet = f->dump();
  KILN_DECODE_END(m);
}

// ---- roles ---------------------------------------------------------------------------

std::string_view role_name(Role role) noexcept {
  switch (role) {
    case Role::none: return "none";
    case Role::read: return "read";
    case Role::build: return "build";
    case Role::put: return "put";
    case Role::admin: return "admin";
  }
  return "none";
}

Role required_role(MsgType type) noexcept {
  switch (type) {
    case MsgType::get:
    case MsgType::stat:
    case MsgType::list:
    case MsgType::stats:
    case MsgType::status:
    case MsgType::build_status:
    case MsgType::list_sources:
    case MsgType::get_source:
    case MsgType::logs: return Role::read;
    // What lands is made by kilnd's own worker from a source whose hash the node checks.
    case MsgType::put_source:
    case MsgType::build:
    case MsgType::prewarm_submit: return Role::build;
    // Bytes made elsewhere that other users' processes will load.
    case MsgType::put: return Role::put;
    case MsgType::del:
    case MsgType::pin:
    case MsgType::unpin:
    case MsgType::evict:
    case MsgType::verify:
    case MsgType::gc:
    case MsgType::reload:
    case MsgType::fleet_push:
    case MsgType::fleet_pull:
    case MsgType::fleet_prune: return Role::admin;
    default: return Role::none;
  }
}

std::vector<std::string> role_names_upto(Role role) {
  std::vector<std::string> out;
  for (Role r : {Role::read, Role::build, Role::put, Role::admin})
    if (role >= r) out.emplace_back(role_name(r));
  return out;
}

}  // namespace kiln::protocol
