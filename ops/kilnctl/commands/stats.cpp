// kilnctl stats: the store's and the daemon's counters.
#include <algorithm>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "kiln/client/json.hpp"
#include "kilnctl/commands/build_counts.hpp"
#include "kilnctl/commands/commands.hpp"
#include "kilnctl/output.hpp"

namespace kiln::ctl {

void add_stats(CommandSet& set) {
  Context& ctx = set.context();
  set.add("stats", "Show the store's size, entries, hits and misses, and the daemon's counters", [&ctx] {
    auto client = ctx.connect();
    if (!client) return ctx.fail(client.error());
    auto s = client->stats();
    if (!s) return ctx.fail(s.error());
    auto builds = build_counts(*client);  // ops: builds by state, next to the store's counters
    if (!builds) return ctx.fail(builds.error());
    if (ctx.json) {
      auto j = nlohmann::json::parse(client::to_json(*s));
      j["builds"] = *builds ? to_json(**builds) : nlohmann::json(nullptr);
      ctx.out << j.dump() << "\n";
      return 0;
    }
    auto line = [&](const std::string& name, const std::string& value) {
      // Never run together: a name as long as the column still gets its space.
      ctx.out << std::left << std::setw(static_cast<int>(std::max<std::size_t>(22, name.size() + 2))) << name << value
              << "\n";
    };
    line("entries", std::to_string(s->entries));
    line("stored", format_bytes(s->stored_bytes) +
                       (s->quota_bytes ? " of quota " + format_bytes(s->quota_bytes) : std::string{}));
    line("uncompressed", format_bytes(s->uncompressed_bytes));
    const std::uint64_t lookups = s->hits + s->misses;
    std::ostringstream rate;
    if (lookups) rate << " (" << std::fixed << std::setprecision(1) << 100.0 * double(s->hits) / double(lookups) << "% hit rate)";
    line("hits", std::to_string(s->hits) + rate.str());
    line("misses", std::to_string(s->misses));
    line("evictions", std::to_string(s->evictions));
    line("quarantined", std::to_string(s->quarantined));
    line("builds", *builds ? describe(**builds) : "not built on this node");
    for (const auto& [name, value] : s->daemon) {
      const bool bytes = name.find("bytes") != std::string::npos;
      line("daemon." + name, bytes ? format_bytes(value) : std::to_string(value));
    }
    return 0;
  });
}

}  // namespace kiln::ctl
