// JSON bodies of the wire protocol: admin, source and build messages.
#include "kiln/protocol/messages.hpp"

#include "json_codec.hpp"
#include "messages_common.hpp"

namespace kiln::protocol {

namespace detail {

std::string conv(const json& j, PrewarmResult& r) {
  In in(j, "result");
  in.opt("key_digest", r.key_digest).req("state", r.state).opt("error", r.error);
  return in.error() ? in.error()->message : std::string{};
}

std::string conv(const json& j, BuildState& b) {
  In in(j, "build");
  in.req("key_digest", b.key_digest).req("state", b.state).opt("queued_at", b.queued_at);
  in.opt("started_at", b.started_at).opt("finished_at", b.finished_at).opt("progress", b.progress).opt("error", b.error);
  return in.error() ? in.error()->message : std::string{};
}

std::string conv(const json& j, BuildLog& b) {
  In in(j, "record");
  in.req("key_digest", b.key_digest).opt("started_at", b.started_at).opt("finished_at", b.finished_at);
  in.opt("ok", b.ok).opt("error", b.error).opt("log", b.log);
  return in.error() ? in.error()->message : std::string{};
}

}  // namespace detail

using namespace detail;

namespace {
template <class T>
void put_opt(json& j, const char* name, const std::optional<T>& v) {
  if (v) j[name] = *v;
}
}  // namespace

// ---- evict / verify / gc / reload / cancel -------------------------------------------

std::string encode(const EvictRequest& m) {
  json j = json::object();
  put_opt(j, "target_bytes", m.target_bytes);
  if (!m.filters.empty()) j["filters"] = m.filters;
  if (m.accessed_before) j["accessed_before"] = m.accessed_before;
  if (m.older_than_s) j["older_than_s"] = m.older_than_s;
  if (m.dry_run) j["dry_run"] = true;
  return dump(j);
}
template <>
Result<EvictRequest> decode<EvictRequest>(std::string_view text) {
  KILN_DECODE_BEGIN("evict");
  EvictRequest m;
  in.opt("target_bytes", m.target_bytes).opt("filters", m.filters).opt("accessed_before", m.accessed_before);
  in.opt("older_than_s", m.older_than_s).opt("dry_run", m.dry_run);
  if (!in.error() && !m.target_bytes && m.filters.empty() && !m.accessed_before && !m.older_than_s)
    in.fail("give target_bytes, or at least one of filters, accessed_before, older_than_s");
  if (!in.error() && m.target_bytes && (!m.filters.empty() || m.accessed_before || m.older_than_s))
    in.fail("target_bytes cannot be combined with filters or ages");
  KILN_DECODE_END(m);
}
std::string encode(const EvictReply& m) {
  json removed = json::array();
  for (const auto& a : m.removed) removed.push_back(to_json(a));
  return dump(json{{"evicted", m.evicted}, {"removed", std::move(removed)}, {"freed_bytes", m.freed_bytes},
                   {"pinned_kept", m.pinned_kept}, {"dry_run", m.dry_run}});
}
template <>
Result<EvictReply> decode<EvictReply>(std::string_view text) {
  KILN_DECODE_BEGIN("evict reply");
  EvictReply m;
  in.req("evicted", m.evicted).opt("removed", m.removed).opt("freed_bytes", m.freed_bytes);
  in.opt("pinned_kept", m.pinned_kept).opt("dry_run", m.dry_run);
  KILN_DECODE_END(m);
}

std::string encode(const VerifyRequest&) { return "{}"; }
template <>
Result<VerifyRequest> decode<VerifyRequest>(std::string_view text) {
  KILN_DECODE_BEGIN("verify");
  KILN_DECODE_END(VerifyRequest{});
}
std::string encode(const VerifyReply& m) {
  json corrupt = json::array(), missing = json::array();
  for (const auto& d : m.corrupt) corrupt.push_back(d.hex());
  for (const auto& d : m.missing) missing.push_back(d.hex());
  return dump(json{{"checked", m.checked}, {"corrupt", std::move(corrupt)},
                   {"orphans_removed", m.orphans_removed}, {"missing_removed", m.missing_removed},
                   {"missing", std::move(missing)}, {"foreign_moved", m.foreign_moved}});
}
template <>
Result<VerifyReply> decode<VerifyReply>(std::string_view text) {
  KILN_DECODE_BEGIN("verify reply");
  VerifyReply m;
  in.req("checked", m.checked).opt("corrupt", m.corrupt).opt("orphans_removed", m.orphans_removed);
  in.opt("missing_removed", m.missing_removed).opt("missing", m.missing).opt("foreign_moved", m.foreign_moved);
  KILN_DECODE_END(m);
}

std::string encode(const GcRequest&) { return "{}"; }
template <>
Result<GcRequest> decode<GcRequest>(std::string_view text) {
  KILN_DECODE_BEGIN("gc");
  KILN_DECODE_END(GcRequest{});
}
std::string encode(const GcReply& m) { return dump(json{{"evicted", m.evicted}, {"stored_bytes", m.stored_bytes}}); }
template <>
Result<GcReply> decode<GcReply>(std::string_view text) {
  KILN_DECODE_BEGIN("gc reply");
  GcReply m;
  in.req("evicted", m.evicted).opt("stored_bytes", m.stored_bytes);
  KILN_DECODE_END(m);
}

std::string encode(const ReloadRequest&) { return "{}"; }
template <>
Result<ReloadRequest> decode<ReloadRequest>(std::string_view text) {
  KILN_DECODE_BEGIN("reload");
  KILN_DECODE_END(ReloadRequest{});
}
std::string encode(const ReloadReply& m) { return dump(json{{"reloaded", m.reloaded}}); }
template <>
Result<ReloadReply> decode<ReloadReply>(std::string_view text) {
  KILN_DECODE_BEGIN("reload reply");
  ReloadReply m;
  in.req("reloaded", m.reloaded);
  KILN_DECODE_END(m);
}

std::string encode(const CancelRequest& m) { return dump(json{{"request_id", m.request_id}}); }
template <>
Result<CancelRequest> decode<CancelRequest>(std::string_view text) {
  KILN_DECODE_BEGIN("cancel");
  CancelRequest m;
  in.req("request_id", m.request_id);
  KILN_DECODE_END(m);
}
std::string encode(const CancelReply& m) { return dump(json{{"cancelled", m.cancelled}}); }
template <>
Result<CancelReply> decode<CancelReply>(std::string_view text) {
  KILN_DECODE_BEGIN("cancel reply");
  CancelReply m;
  in.req("cancelled", m.cancelled);
  KILN_DECODE_END(m);
}

// ---- sources -------------------------------------------------------------------------

std::string encode(const PutSourceRequest& m) {
  json j{{"name", m.name}};
  if (!m.model_hash.empty()) j["model_hash"] = m.model_hash;
  put_opt(j, "size", m.size);
  return dump(j);
}
template <>
Result<PutSourceRequest> decode<PutSourceRequest>(std::string_view text) {
  KILN_DECODE_BEGIN("put_source");
  PutSourceRequest m;
  in.opt("model_hash", m.model_hash).opt("name", m.name).opt("size", m.size);
  KILN_DECODE_END(m);
}
std::string encode(const PutSourceReply& m) { return dump(json{{"source", to_json(m.source)}}); }
template <>
Result<PutSourceReply> decode<PutSourceReply>(std::string_view text) {
  KILN_DECODE_BEGIN("put_source reply");
  PutSourceReply m;
  in.req("source", m.source);
  KILN_DECODE_END(m);
}

// ---- builds --------------------------------------------------------------------------

std::string encode(const BuildRequest& m) {
  json j{{"key", key_json(m.key)}, {"force", m.force}, {"wait", m.wait}};
  if (m.wait_ms) j["wait_ms"] = m.wait_ms;
  if (m.idle) j["idle"] = true;
  return dump(j);
}
template <>
Result<BuildRequest> decode<BuildRequest>(std::string_view text) {
  KILN_DECODE_BEGIN("build");
  BuildRequest m;
  in.req("key", m.key).opt("force", m.force).opt("wait", m.wait).opt("wait_ms", m.wait_ms).opt("idle", m.idle);
  KILN_DECODE_END(m);
}
std::string encode(const BuildReply& m) {
  json j{{"state", m.state}, {"key_digest", m.key_digest.hex()}};
  put_opt(j, "handle", m.handle);
  if (m.info) j["info"] = to_json(*m.info);
  return dump(j);
}
template <>
Result<BuildReply> decode<BuildReply>(std::string_view text) {
  KILN_DECODE_BEGIN("build reply");
  BuildReply m;
  in.req("state", m.state).req("key_digest", m.key_digest).opt("handle", m.handle).opt("info", m.info);
  KILN_DECODE_END(m);
}

std::string encode(const PrewarmRequest& m) {
  json keys = json::array();
  for (const auto& k : m.keys) keys.push_back(key_json(k));
  return dump(json{{"keys", std::move(keys)}, {"force", m.force}, {"events", m.events}});
}
template <>
Result<PrewarmRequest> decode<PrewarmRequest>(std::string_view text) {
  KILN_DECODE_BEGIN("prewarm_submit");
  PrewarmRequest m;
  in.req("keys", m.keys).opt("force", m.force).opt("events", m.events);
  KILN_DECODE_END(m);
}
std::string encode(const PrewarmReply& m) {
  json results = json::array();
  for (const auto& r : m.results) {
    json e{{"state", r.state}};
    if (r.key_digest) e["key_digest"] = r.key_digest->hex();
    put_opt(e, "error", r.error);
    results.push_back(std::move(e));
  }
  return dump(json{{"handle", m.handle}, {"results", std::move(results)}});
}
template <>
Result<PrewarmReply> decode<PrewarmReply>(std::string_view text) {
  KILN_DECODE_BEGIN("prewarm reply");
  PrewarmReply m;
  in.req("handle", m.handle).req("results", m.results);
  KILN_DECODE_END(m);
}

std::string encode(const BuildEvent& m) {
  json j{{"key_digest", m.key_digest.hex()}, {"state", m.state}};
  put_opt(j, "error", m.error);
  if (m.info) j["info"] = to_json(*m.info);
  return dump(j);
}
template <>
Result<BuildEvent> decode<BuildEvent>(std::string_view text) {
  KILN_DECODE_BEGIN("event");
  BuildEvent m;
  in.req("key_digest", m.key_digest).req("state", m.state).opt("error", m.error).opt("info", m.info);
  KILN_DECODE_END(m);
}

std::string encode(const BuildStatusRequest& m) {
  json j = json::object();
  put_opt(j, "handle", m.handle);
  if (m.key_digest) j["key_digest"] = m.key_digest->hex();
  return dump(j);
}
template <>
Result<BuildStatusRequest> decode<BuildStatusRequest>(std::string_view text) {
  KILN_DECODE_BEGIN("build_status");
  BuildStatusRequest m;
  in.opt("handle", m.handle).opt("key_digest", m.key_digest);
  KILN_DECODE_END(m);
}
std::string encode(const BuildStatusReply& m) {
  json builds = json::array();
  for (const auto& b : m.builds) {
    json e{{"key_digest", b.key_digest.hex()}, {"state", b.state}, {"queued_at", b.queued_at}};
    put_opt(e, "started_at", b.started_at);
    put_opt(e, "finished_at", b.finished_at);
    put_opt(e, "progress", b.progress);
    put_opt(e, "error", b.error);
    builds.push_back(std::move(e));
  }
  return dump(json{{"builds", std::move(builds)}});
}
template <>
Result<BuildStatusReply> decode<BuildStatusReply>(std::string_view text) {
  KILN_DECODE_BEGIN("build_status reply");
  BuildStatusReply m;
  in.req("builds", m.builds);
  KILN_DECODE_END(m);
}

std::string encode(const LogsRequest& m) { return dump(json{{"key_digest", m.key_digest.hex()}}); }
template <>
Result<LogsRequest> decode<LogsRequest>(std::string_view text) {
  KILN_DECODE_BEGIN("logs");
  LogsRequest m;
  in.req("key_digest", m.key_digest);
  KILN_DECODE_END(m);
}
std::string encode(const LogsReply& m) {
  json j{{"found", m.found}};
  if (m.record) {
    const auto& r = *m.record;
    j["record"] = json{{"key_digest", r.key_digest.hex()}, {"started_at", r.started_at},
                       {"finished_at", r.finished_at}, {"ok", r.ok}, {"error", r.error}, {"log", r.log}};
  }
  return dump(j);
}
template <>
Result<LogsReply> decode<LogsReply>(std::string_view text) {
  KILN_DECODE_BEGIN("logs reply");
  LogsReply m;
  in.req("found", m.found).opt("record", m.record);
  KILN_DECODE_END(m);
}

}  // namespace kiln::protocol
