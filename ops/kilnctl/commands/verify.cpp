// kilnctl verify: re-hash every stored blob; quarantine and report what fails.
#include <nlohmann/json.hpp>
#include <ostream>

#include "kilnctl/commands/commands.hpp"
#include "kilnctl/commands/ops_util.hpp"

namespace kiln::ctl {

void add_verify(CommandSet& set) {
  Context& ctx = set.context();
  CLI::App* sub = set.add("verify", "Re-hash every stored artifact; quarantine and list the corrupt ones", [&ctx] {
    auto client = ctx.connect();
    if (!client) return ctx.fail(client.error());
    auto r = call_typed<protocol::VerifyReply>(*client, protocol::MsgType::verify, protocol::VerifyRequest{});
    if (!r) return ctx.fail(r.error());
    if (ctx.json) {
      nlohmann::json corrupt = nlohmann::json::array();
      for (const auto& d : r->corrupt) corrupt.push_back(d.hex());
      ctx.out << nlohmann::json{{"checked", r->checked}, {"corrupt", corrupt}, {"orphans_removed", r->orphans_removed},
                                {"missing_removed", r->missing_removed}}.dump()
              << "\n";
    } else {
      ctx.out << "checked " << r->checked << " artifact(s): " << r->corrupt.size() << " corrupt, "
              << r->orphans_removed << " orphan blob(s) removed, " << r->missing_removed
              << " entr(ies) with a missing blob removed\n";
      for (const auto& d : r->corrupt) ctx.out << "corrupt  " << d.hex() << "  (quarantined, no longer served)\n";
    }
    return r->corrupt.empty() ? 0 : kExitFailuresFound;
  });
  sub->footer(std::string(
                  "Needs the admin role. A corrupt artifact is moved to the store's quarantine folder\n"
                  "and unindexed: the next request for its key is a miss (and is rebuilt where builds\n"
                  "are enabled). Exit code 6 when anything was corrupt.\n\n") +
              sub->get_footer());
}

}  // namespace kiln::ctl
