// kilnctl gc: apply the store's quota now and drop kilnd's hot copies.
#include <nlohmann/json.hpp>
#include <ostream>

#include "kilnctl/commands/commands.hpp"
#include "kilnctl/commands/ops_util.hpp"
#include "kilnctl/output.hpp"

namespace kiln::ctl {

void add_gc(CommandSet& set) {
  Context& ctx = set.context();
  CLI::App* sub = set.add("gc", "Apply the store's quota now (evicting least-recently-used unpinned artifacts) and drop kilnd's in-memory copies", [&ctx] {
    auto client = ctx.connect();
    if (!client) return ctx.fail(client.error());
    auto r = call_typed<protocol::GcReply>(*client, protocol::MsgType::gc, protocol::GcRequest{});
    if (!r) return ctx.fail(r.error());
    if (ctx.json) {
      ctx.out << nlohmann::json{{"evicted", r->evicted}, {"stored_bytes", r->stored_bytes}}.dump() << "\n";
    } else {
      ctx.out << "evicted " << r->evicted << " artifact(s); store now holds " << format_bytes(r->stored_bytes) << "\n";
    }
    return 0;
  });
  sub->footer(std::string("Needs the admin role. Pinned artifacts are never evicted.\n\n") + sub->get_footer());
}

}  // namespace kiln::ctl
