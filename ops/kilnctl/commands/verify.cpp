// kilnctl verify: re-hash every stored blob; quarantine and report what fails.
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>

#include "kilnctl/byte_progress.hpp"
#include "kilnctl/commands/commands.hpp"
#include "kilnctl/commands/ops_util.hpp"
#include "kilnctl/output.hpp"
#include "kilnctl/status_progress.hpp"

namespace kiln::ctl {

void add_verify(CommandSet& set) {
  Context& ctx = set.context();
  CLI::App* sub = set.add("verify", "Re-hash every stored artifact; quarantine and list the corrupt ones", [&ctx] {
    auto client = ctx.connect();
    if (!client) return ctx.fail(client.error());
    Result<protocol::VerifyReply> r = make_error(Errc::internal, "unset");
    auto request = [&] { r = call_typed<protocol::VerifyReply>(*client, protocol::MsgType::verify, protocol::VerifyRequest{}); };
    // On a terminal: kilnd's progress (STATUS "verify") on one line while it runs.
    run_with_status_progress(ctx, request, [](const client::DaemonStatus& s) -> std::optional<std::string> {
      if (s.verify_total == 0) return std::nullopt;
      return verify_progress_text(s.verify_checked, s.verify_total);
    });
    if (!r) return ctx.fail(r.error());
    if (ctx.json) {
      nlohmann::json corrupt = nlohmann::json::array(), missing = nlohmann::json::array();
      for (const auto& d : r->corrupt) corrupt.push_back(d.hex());
      for (const auto& d : r->missing) missing.push_back(d.hex());
      ctx.out << nlohmann::json{{"checked", r->checked},
                                {"corrupt", corrupt},
                                {"orphans_removed", r->orphans_removed},
                                {"missing_removed", r->missing_removed},
                                {"missing", missing},
                                {"foreign_moved", r->foreign_moved}}
                     .dump()
              << "\n";
    } else {
      ctx.out << "checked " << count_of(r->checked, "artifact") << ": " << r->corrupt.size() << " corrupt, "
              << count_of(r->orphans_removed, "orphan blob") << " removed, "
              << count_of(r->missing_removed, "entry", "entries") << " with a missing blob removed, "
              << count_of(r->foreign_moved, "foreign file") << " moved to quarantine/\n";
      for (const auto& d : r->corrupt) ctx.out << "corrupt  " << d.hex() << "  (quarantined, no longer served)\n";
      for (const auto& d : r->missing) ctx.out << "dropped  " << d.hex() << "  (its blob file was missing)\n";
    }
    return r->corrupt.empty() && r->missing.empty() ? 0 : kExitFailuresFound;
  });
  sub->footer(std::string(
                  "Needs the admin role. A corrupt artifact is moved to the store's quarantine folder\n"
                  "and unindexed: the next request for its key is a miss (and is rebuilt where builds\n"
                  "are enabled). An artifact whose blob file is gone is dropped from the index. The\n"
                  "first verify after kilnd starts also lists what kilnd's start-up recovery found.\n"
                  "Exit code 6 when anything was corrupt or dropped.\n\n") +
              sub->get_footer());
}

}  // namespace kiln::ctl
