#include "kiln/client/json.hpp"

#include <nlohmann/json.hpp>

namespace kiln::client {

namespace {

nlohmann::json info_json(const ArtifactInfo& info) {
  nlohmann::json j;
  auto key = nlohmann::json::parse(info.key.to_json(), nullptr, /*allow_exceptions=*/false);
  j["key"] = key.is_discarded() ? nlohmann::json::object() : key;
  j["key_digest"] = info.key_digest.hex();
  j["blob_digest"] = info.blob_digest.hex();
  j["size"] = info.size;
  j["stored_size"] = info.stored_size;
  j["created_at"] = info.created_at;
  j["last_access"] = info.last_access;
  j["hits"] = info.hits;
  j["build_seconds"] = info.build_seconds;
  j["pinned"] = info.pinned;
  if (!info.origin.empty()) j["origin"] = info.origin;
  if (!info.signer.empty()) j["signer"] = info.signer;
  return j;
}

}  // namespace

std::string to_json(const ArtifactInfo& info) { return info_json(info).dump(); }

std::string to_json(const ListPage& page) {
  nlohmann::json j;
  j["items"] = nlohmann::json::array();
  for (const auto& e : page.entries) j["items"].push_back(info_json(e));
  if (page.next_offset) j["next_offset"] = *page.next_offset;
  return j.dump();
}

std::string to_json(const Stats& stats) {
  nlohmann::json j;
  j["store"] = stats.store;
  j["daemon"] = stats.daemon;
  return j.dump();
}

std::string to_json(const DaemonStatus& s) {
  nlohmann::json j;
  j["server"] = s.server;
  j["version"] = s.protocol_version;
  j["pid"] = s.pid;
  j["uptime_s"] = s.uptime_s;
  j["socket"] = s.socket;
  j["store"] = s.store;
  j["node"] = s.node;
  j["roles"] = s.roles;
  j["capabilities"] = s.capabilities;
  if (!s.metrics.empty()) j["metrics"] = s.metrics;
  j["draining"] = s.draining;
  j["gpus"] = nlohmann::json::array();
  for (const auto& g : s.gpus)
    j["gpus"].push_back({{"index", g.index}, {"name", g.name}, {"arch", g.arch}, {"memory_bytes", g.memory_bytes},
                         {"uuid", g.uuid}});
  if (!s.gpu_note.empty()) j["gpu_note"] = s.gpu_note;
  j["can_build"] = s.builds_unavailable.empty();
  if (!s.builds_unavailable.empty()) j["builds_unavailable"] = s.builds_unavailable;
  if (s.builds_probing) j["builds_probing"] = true;
  if (s.verify_total) j["verify"] = {{"checked", s.verify_checked}, {"total", s.verify_total}};
  if (!s.fleet.empty()) {
    auto f = nlohmann::json::parse(s.fleet, nullptr, false);
    if (!f.is_discarded()) j["fleet"] = std::move(f);
  }
  if (!s.torch_cache_socket.empty() || !s.torch_cache_listen.empty()) {
    auto& t = j["torch_cache"] = nlohmann::json::object();
    if (!s.torch_cache_socket.empty()) t["socket"] = s.torch_cache_socket;
    if (!s.torch_cache_listen.empty()) t["listen"] = s.torch_cache_listen;
    if (!s.torch_cache_durability.empty()) t["durability"] = s.torch_cache_durability;
    if (s.torch_cache_durability == "deferred")
      t["queued"] = {{"entries", s.torch_cache_queued_entries}, {"bytes", s.torch_cache_queued_bytes}};
    t["fleet"] = s.torch_cache_fleet;
  }
  j["build_slots"] = nlohmann::json::array();
  for (const auto& b : s.build_slots)
    j["build_slots"].push_back({{"name", b.name}, {"gpu_arch", b.gpu_arch}, {"gpu_name", b.gpu_name},
                                {"running", b.running}, {"queued", b.queued}, {"builds_at_once", b.builds_at_once}});
  return j.dump();
}

namespace {
nlohmann::json source_json(const SourceInfo& s) {
  nlohmann::json j = {{"model_hash", s.model_hash}, {"blob_digest", s.blob_digest.hex()}, {"size", s.size},
                      {"stored_size", s.stored_size}, {"created_at", s.created_at}, {"name", s.name}};
  if (!s.aliases.empty()) j["aliases"] = s.aliases;
  return j;
}
}  // namespace

std::string to_json(const SourceInfo& source) { return source_json(source).dump(); }

std::string to_json(const SourcePage& page) {
  nlohmann::json j;
  j["items"] = nlohmann::json::array();
  for (const auto& s : page.sources) j["items"].push_back(source_json(s));
  if (page.next_offset) j["next_offset"] = *page.next_offset;
  return j.dump();
}

}  // namespace kiln::client
