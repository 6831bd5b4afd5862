// JSON bodies of the wire protocol: listing and fetching sources (LIST_SOURCES,
// GET_SOURCE), and the node's GPUs and build slots in STATUS.
#include "kiln/protocol/messages.hpp"

#include "json_codec.hpp"
#include "messages_common.hpp"

namespace kiln::protocol {

namespace detail {

std::string conv(const json& j, GpuEntry& g) {
  In in(j, "gpu");
  in.req("index", g.index).opt("name", g.name).opt("arch", g.arch).opt("memory_bytes", g.memory_bytes);
  in.opt("uuid", g.uuid);
  return in.error() ? in.error()->message : std::string{};
}

std::string conv(const json& j, BuildSlotEntry& s) {
  In in(j, "build_slot");
  in.req("name", s.name).opt("gpu_arch", s.gpu_arch).opt("gpu_name", s.gpu_name);
  in.opt("running", s.running).opt("queued", s.queued).opt("builds_at_once", s.builds_at_once);
  return in.error() ? in.error()->message : std::string{};
}

void put_gpus(json& j, const std::vector<GpuEntry>& gpus, const std::string& note,
              const std::vector<BuildSlotEntry>& slots) {
  json g = json::array();
  for (const auto& e : gpus)
    g.push_back(json{{"index", e.index}, {"name", e.name}, {"arch", e.arch}, {"memory_bytes", e.memory_bytes},
                     {"uuid", e.uuid}});
  j["gpus"] = std::move(g);
  if (!note.empty()) j["gpu_note"] = note;
  json s = json::array();
  for (const auto& e : slots)
    s.push_back(json{{"name", e.name}, {"gpu_arch", e.gpu_arch}, {"gpu_name", e.gpu_name}, {"running", e.running},
                     {"queued", e.queued}, {"builds_at_once", e.builds_at_once}});
  j["build_slots"] = std::move(s);
}

}  // namespace detail

using namespace detail;

namespace {

bool lower_hex(std::string_view s) {
  for (char ch : s)
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return false;
  return true;
}

// Sources are delivered "fd" or "stream" (protocol.md GET_SOURCE); nothing else.
void read_source_delivery(In& in, Delivery& out) {
  std::string s;
  in.opt("delivery", s);
  if (in.error() || s.empty()) return;
  if (s == "fd") out = Delivery::fd;
  else if (s == "stream") out = Delivery::stream;
  else in.fail("delivery: expected \"fd\" or \"stream\"");
}

std::string source_delivery_name(Delivery d) { return d == Delivery::stream ? "stream" : "fd"; }

}  // namespace

std::string encode(const ListSourcesRequest& m) {
  json j{{"limit", m.limit}, {"offset", m.offset}};
  if (!m.model_hash_prefix.empty()) j["model_hash_prefix"] = m.model_hash_prefix;
  return dump(j);
}
template <>
Result<ListSourcesRequest> decode<ListSourcesRequest>(std::string_view text) {
  KILN_DECODE_BEGIN("list_sources");
  ListSourcesRequest m;
  in.opt("model_hash_prefix", m.model_hash_prefix).opt("limit", m.limit).opt("offset", m.offset);
  if (!in.error() && (m.model_hash_prefix.size() > 64 || !lower_hex(m.model_hash_prefix)))
    in.fail("model_hash_prefix: expected 0 to 64 lowercase hex characters");
  KILN_DECODE_END(m);
}
std::string encode(const ListSourcesReply& m) {
  json items = json::array();
  for (const auto& s : m.items) items.push_back(to_json(s));
  json j{{"items", std::move(items)}};
  if (m.next_offset) j["next_offset"] = *m.next_offset;
  return dump(j);
}
template <>
Result<ListSourcesReply> decode<ListSourcesReply>(std::string_view text) {
  KILN_DECODE_BEGIN("list_sources reply");
  ListSourcesReply m;
  in.req("items", m.items).opt("next_offset", m.next_offset);
  KILN_DECODE_END(m);
}

std::string encode(const GetSourceRequest& m) {
  return dump(json{{"model_hash", m.model_hash}, {"delivery", source_delivery_name(m.delivery)}});
}
template <>
Result<GetSourceRequest> decode<GetSourceRequest>(std::string_view text) {
  KILN_DECODE_BEGIN("get_source");
  GetSourceRequest m;
  in.req("model_hash", m.model_hash);
  read_source_delivery(in, m.delivery);
  if (!in.error() && (m.model_hash.size() != 64 || !lower_hex(m.model_hash)))
    in.fail("model_hash: expected 64 lowercase hex characters");
  KILN_DECODE_END(m);
}
std::string encode(const GetSourceReply& m) {
  return dump(json{{"delivery", source_delivery_name(m.delivery)}, {"source", to_json(m.source)}});
}
template <>
Result<GetSourceReply> decode<GetSourceReply>(std::string_view text) {
  KILN_DECODE_BEGIN("get_source reply");
  GetSourceReply m;
  in.req("source", m.source);
  read_source_delivery(in, m.delivery);
  KILN_DECODE_END(m);
}

}  // namespace kiln::protocol
