#include "convert.hpp"

namespace kiln::client::detail {

protocol::KeyRef to_ref(const Lookup& what) {
  protocol::KeyRef ref;
  if (const auto* key = std::get_if<Key>(&what)) {
    ref.key = *key;
  } else {
    ref.key_digest = std::get<Digest>(what);
  }
  return ref;
}

ArtifactInfo from_meta(protocol::ArtifactMeta&& m) {
  ArtifactInfo info;
  info.key = std::move(m.key);
  info.key_digest = m.key_digest;
  info.blob_digest = m.blob_digest;
  info.size = m.size;
  info.stored_size = m.stored_size;
  info.created_at = m.created_at;
  info.last_access = m.last_access;
  info.hits = m.hits;
  info.build_seconds = m.build_seconds;
  info.pinned = m.pinned;
  info.origin = m.origin;
  info.signer = m.signer;
  return info;
}

Stats from_stats(protocol::StatsReply&& reply) {
  Stats s;
  auto get = [&](const char* name) {
    auto it = reply.store.find(name);
    return it == reply.store.end() ? std::uint64_t{0} : it->second;
  };
  s.entries = get("entries");
  s.stored_bytes = get("stored_bytes");
  s.uncompressed_bytes = get("uncompressed_bytes");
  s.hits = get("hits");
  s.misses = get("misses");
  s.evictions = get("evictions");
  s.quarantined = get("quarantined");
  s.quota_bytes = get("quota_bytes");
  s.hard_limit_bytes = get("hard_limit_bytes");
  s.store = std::move(reply.store);
  s.daemon = std::move(reply.daemon);
  return s;
}

DaemonStatus from_status(protocol::StatusReply&& r) {
  DaemonStatus s;
  s.server = std::move(r.server);
  s.protocol_version = r.version;
  s.pid = r.pid;
  s.uptime_s = r.uptime_s;
  s.socket = std::move(r.socket);
  s.store = std::move(r.store);
  s.node = std::move(r.node);
  s.roles = std::move(r.roles);
  s.capabilities = std::move(r.capabilities);
  s.metrics = r.metrics.value_or("");
  s.draining = r.draining;
  for (auto& g : r.gpus) s.gpus.push_back(GpuInfo{g.index, std::move(g.name), std::move(g.arch), g.memory_bytes, std::move(g.uuid)});
  s.gpu_note = std::move(r.gpu_note);
  s.builds_unavailable = std::move(r.builds_note);
  s.builds_probing = r.builds_probing;
  s.torch_cache_socket = std::move(r.torch_cache_socket);
  s.torch_cache_listen = std::move(r.torch_cache_listen);
  s.torch_cache_durability = std::move(r.torch_cache_durability);
  s.torch_cache_queued_entries = r.torch_cache_queued_entries;
  s.torch_cache_queued_bytes = r.torch_cache_queued_bytes;
  s.torch_cache_fleet = r.torch_cache_fleet;
  s.verify_checked = r.verify_checked;
  s.verify_total = r.verify_total;
  s.fleet = std::move(r.fleet);
  for (auto& b : r.build_slots)
    s.build_slots.push_back(BuildSlotInfo{std::move(b.name), std::move(b.gpu_arch), std::move(b.gpu_name), b.running, b.queued,
                                          b.builds_at_once});
  return s;
}

}  // namespace kiln::client::detail
