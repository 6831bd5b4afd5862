// kilnctl status: is kilnd up, what it is, and what this user may do.
#include <iomanip>
#include <nlohmann/json.hpp>
#include <ostream>

#include "kiln/client/json.hpp"
#include "kilnctl/commands/build_counts.hpp"
#include "kilnctl/commands/commands.hpp"
#include "kilnctl/output.hpp"

namespace kiln::ctl {

void add_status(CommandSet& set) {
  Context& ctx = set.context();
  set.add("status", "Show kilnd's version, uptime, socket, store, node, GPUs, build slots and this user's roles", [&ctx] {
    auto client = ctx.connect();
    if (!client) return ctx.fail(client.error());
    auto s = client->status();
    if (!s) return ctx.fail(s.error());
    // The store against its quota and the builds in flight (ops: what an operator checks first).
    auto store = client->stats();
    if (!store) return ctx.fail(store.error());
    auto builds = build_counts(*client);
    if (!builds) return ctx.fail(builds.error());
    if (ctx.json) {
      auto j = nlohmann::json::parse(client::to_json(*s));
      j["store_usage"] = {{"entries", store->entries}, {"stored_bytes", store->stored_bytes},
                          {"quota_bytes", store->quota_bytes}, {"hard_limit_bytes", store->hard_limit_bytes}};
      j["builds"] = *builds ? to_json(**builds) : nlohmann::json(nullptr);
      ctx.out << j.dump() << "\n";
      return 0;
    }
    auto line = [&](const std::string& name, const std::string& value) {
      ctx.out << std::left << std::setw(16) << name << value << "\n";
    };
    line("server", s->server + (s->draining ? " (shutting down)" : ""));
    line("protocol", std::to_string(s->protocol_version));
    line("pid", std::to_string(s->pid));
    line("uptime", std::to_string(s->uptime_s) + " s");
    line("socket", client->socket_path().string());
    line("store", s->store);
    std::string roles, caps;
    for (const auto& r : s->roles) roles += (roles.empty() ? "" : ",") + r;
    for (const auto& c : s->capabilities) caps += (caps.empty() ? "" : ",") + c;
    line("your roles", roles.empty() ? "(none)" : roles);
    line("capabilities", caps);
    if (!s->metrics.empty()) line("metrics", s->metrics);
    // torch.compile's caches: the URL to give torch (TORCHINDUCTOR_REDIS_URL).
    std::string torch_cache;
    if (!s->torch_cache_socket.empty()) torch_cache = "unix://" + s->torch_cache_socket;
    if (!s->torch_cache_listen.empty()) torch_cache += (torch_cache.empty() ? "redis://" : ", redis://") + s->torch_cache_listen;
    line("torch cache", torch_cache.empty() ? "not served" : torch_cache);
    if (s->torch_cache_durability == "deferred")
      line("torch writes", "deferred (+OK once in memory): " + std::to_string(s->torch_cache_queued_entries) +
                                  " entries, " + format_bytes(s->torch_cache_queued_bytes) + " queued for the store");
    else if (!s->torch_cache_durability.empty())
      line("torch writes", "sync (+OK once durable)");
    if (!s->torch_cache_durability.empty())
      line("torch fleet", s->torch_cache_fleet ? "shared through the fleet's registry (signed)" : "this node only");
    for (const auto& [name, value] : s->node) line(name, value.empty() ? "(unknown)" : value);
    line("store size", format_bytes(store->stored_bytes) + " in " + std::to_string(store->entries) + " artifact(s)" +
                           (store->quota_bytes ? ", quota " + format_bytes(store->quota_bytes) : ", no quota") +
                           (store->hard_limit_bytes ? ", hard limit " + format_bytes(store->hard_limit_bytes) : ""));
    // The node's GPUs as kilnd's build scheduler probed them at start, then its build slots.
    for (const auto& [name, value] : gpu_status_lines(*s)) line(name, value);
    line("builds", *builds ? describe(**builds) : "not built on this node");
    return 0;
  });
}

}  // namespace kiln::ctl
