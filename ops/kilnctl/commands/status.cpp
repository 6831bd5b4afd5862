// kilnctl status: is kilnd up, what it is, and what this user may do.
#include <iomanip>
#include <ostream>

#include "kiln/client/json.hpp"
#include "kilnctl/commands/commands.hpp"

namespace kiln::ctl {

void add_status(CommandSet& set) {
  Context& ctx = set.context();
  set.add("status", "Show kilnd's version, uptime, socket, store, node and this user's roles", [&ctx] {
    auto client = ctx.connect();
    if (!client) return ctx.fail(client.error());
    auto s = client->status();
    if (!s) return ctx.fail(s.error());
    if (ctx.json) {
      ctx.out << client::to_json(*s) << "\n";
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
    for (const auto& [name, value] : s->node) line(name, value.empty() ? "(unknown)" : value);
    return 0;
  });
}

}  // namespace kiln::ctl
