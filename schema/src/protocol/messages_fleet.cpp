// JSON bodies of the wire protocol: the fleet's admin transfers (FLEET_PUSH, FLEET_PULL,
// FLEET_PRUNE; schema/protocol.md).
#include <algorithm>

#include "kiln/key.hpp"
#include "kiln/protocol/messages.hpp"
#include "messages_common.hpp"

namespace kiln::protocol {

namespace detail {

std::string conv(const json& j, FleetItem& m) {
  In in(j, "item");
  in.req("key_digest", m.key_digest).req("state", m.state).opt("error", m.error).opt("size", m.size);
  in.opt("created_at", m.created_at);
  return in.error() ? in.error()->message : std::string{};
}

}  // namespace detail

using namespace detail;

namespace {

json items_json(const std::vector<FleetItem>& items) {
  json out = json::array();
  for (const auto& i : items) {
    json j{{"key_digest", i.key_digest.hex()}, {"state", i.state}};
    if (i.error) j["error"] = *i.error;
    if (i.size) j["size"] = *i.size;
    if (i.created_at) j["created_at"] = *i.created_at;
    out.push_back(std::move(j));
  }
  return out;
}

// The filters name key fields, as LIST's do (checked here so a typo fails before any
// registry traffic).
void check_filters(In& in, const Filters& filters) {
  const auto& names = key_field_names();
  for (const auto& [field, value] : filters) {
    if (std::find(names.begin(), names.end(), field) != names.end()) continue;
    std::string known;
    for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
    in.fail("filter '" + field + "' is not a key field (the fields are: " + known + ")");
    return;
  }
}

}  // namespace

std::string encode(const FleetPushRequest& m) {
  json j{{"wait", m.wait}};
  if (!m.filters.empty()) j["filters"] = m.filters;
  return dump(j);
}
template <>
Result<FleetPushRequest> decode<FleetPushRequest>(std::string_view text) {
  KILN_DECODE_BEGIN("fleet_push");
  FleetPushRequest m;
  in.opt("filters", m.filters).opt("wait", m.wait);
  if (!in.error()) check_filters(in, m.filters);
  KILN_DECODE_END(m);
}

std::string encode(const FleetPushReply& m) {
  return dump(json{{"matched", m.matched}, {"from_registry", m.from_registry}, {"queued", m.queued},
                   {"pushed", m.pushed},   {"failed", m.failed},               {"bytes", m.bytes},
                   {"items", items_json(m.items)}});
}
template <>
Result<FleetPushReply> decode<FleetPushReply>(std::string_view text) {
  KILN_DECODE_BEGIN("fleet_push reply");
  FleetPushReply m;
  in.req("matched", m.matched).opt("from_registry", m.from_registry).req("queued", m.queued).opt("pushed", m.pushed);
  in.opt("failed", m.failed).opt("bytes", m.bytes).opt("items", m.items);
  KILN_DECODE_END(m);
}

std::string encode(const FleetPullRequest& m) {
  json j{{"dry_run", m.dry_run}, {"sources", m.sources}};
  if (!m.filters.empty()) j["filters"] = m.filters;
  return dump(j);
}
template <>
Result<FleetPullRequest> decode<FleetPullRequest>(std::string_view text) {
  KILN_DECODE_BEGIN("fleet_pull");
  FleetPullRequest m;
  in.opt("filters", m.filters).opt("dry_run", m.dry_run).opt("sources", m.sources);
  if (!in.error()) check_filters(in, m.filters);
  KILN_DECODE_END(m);
}

std::string encode(const FleetPullReply& m) {
  return dump(json{{"listed", m.listed}, {"matched", m.matched},
                   {"local", m.local},   {"pulled", m.pulled},
                   {"failed", m.failed}, {"sources_pulled", m.sources_pulled},
                   {"bytes", m.bytes},   {"dry_run", m.dry_run},
                   {"items", items_json(m.items)}});
}
template <>
Result<FleetPullReply> decode<FleetPullReply>(std::string_view text) {
  KILN_DECODE_BEGIN("fleet_pull reply");
  FleetPullReply m;
  in.req("listed", m.listed).req("matched", m.matched).opt("local", m.local).opt("pulled", m.pulled);
  in.opt("failed", m.failed).opt("sources_pulled", m.sources_pulled).opt("bytes", m.bytes).opt("dry_run", m.dry_run);
  in.opt("items", m.items);
  KILN_DECODE_END(m);
}

std::string encode(const FleetPruneRequest& m) {
  json j{{"older_than_s", m.older_than_s}, {"dry_run", m.dry_run}};
  if (!m.filters.empty()) j["filters"] = m.filters;
  return dump(j);
}
template <>
Result<FleetPruneRequest> decode<FleetPruneRequest>(std::string_view text) {
  KILN_DECODE_BEGIN("fleet_prune");
  FleetPruneRequest m;
  in.req("older_than_s", m.older_than_s).opt("filters", m.filters).opt("dry_run", m.dry_run);
  if (!in.error() && m.older_than_s == 0) in.fail("older_than_s must be at least 1 (seconds)");
  if (!in.error()) check_filters(in, m.filters);
  KILN_DECODE_END(m);
}

std::string encode(const FleetPruneReply& m) {
  return dump(json{{"examined", m.examined}, {"matched", m.matched}, {"pruned", m.pruned},
                   {"failed", m.failed},     {"dry_run", m.dry_run},  {"items", items_json(m.items)}});
}
template <>
Result<FleetPruneReply> decode<FleetPruneReply>(std::string_view text) {
  KILN_DECODE_BEGIN("fleet_prune reply");
  FleetPruneReply m;
  in.req("examined", m.examined).req("matched", m.matched).opt("pruned", m.pruned).opt("failed", m.failed);
  in.opt("dry_run", m.dry_run).opt("items", m.items);
  KILN_DECODE_END(m);
}

}  // namespace kiln::protocol
