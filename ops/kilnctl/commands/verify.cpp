// kilnctl verify: re-hash every stored blob; quarantine and report what fails.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <ostream>
#include <thread>

#include "kilnctl/byte_progress.hpp"
#include "kilnctl/commands/commands.hpp"
#include "kilnctl/commands/ops_util.hpp"

namespace kiln::ctl {

void add_verify(CommandSet& set) {
  Context& ctx = set.context();
  CLI::App* sub = set.add("verify", "Re-hash every stored artifact; quarantine and list the corrupt ones", [&ctx] {
    auto client = ctx.connect();
    if (!client) return ctx.fail(client.error());
    Result<protocol::VerifyReply> r = make_error(Errc::internal, "unset");
    if (!progress_on_terminal(ctx.json)) {
      r = call_typed<protocol::VerifyReply>(*client, protocol::MsgType::verify, protocol::VerifyRequest{});
    } else {
      // On a terminal: the request runs on a thread; this one reads kilnd's progress
      // (STATUS "verify") over a second connection and redraws one line.
      std::mutex mu;
      std::condition_variable cv;
      bool finished = false;  // guarded by mu
      std::thread worker([&] {
        auto reply = call_typed<protocol::VerifyReply>(*client, protocol::MsgType::verify, protocol::VerifyRequest{});
        std::lock_guard lock(mu);
        r = std::move(reply);
        finished = true;
        cv.notify_one();
      });
      auto watcher = ctx.connect();
      bool drawn = false;
      for (;;) {
        {
          // Redraw every 250 ms; leave as soon as the reply is in.
          std::unique_lock lock(mu);
          if (cv.wait_for(lock, std::chrono::milliseconds(250), [&] { return finished; })) break;
        }
        if (!watcher) continue;
        auto s = watcher->status();
        if (!s || s->verify_total == 0) continue;
        ctx.err << "\r\x1b[2K" << verify_progress_text(s->verify_checked, s->verify_total) << std::flush;
        drawn = true;
      }
      worker.join();
      if (drawn) ctx.err << "\r\x1b[2K" << std::flush;
    }
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
      ctx.out << "checked " << r->checked << " artifact(s): " << r->corrupt.size() << " corrupt, "
              << r->orphans_removed << " orphan blob(s) removed, " << r->missing_removed
              << " entr(ies) with a missing blob removed, " << r->foreign_moved
              << " foreign file(s) moved to quarantine/\n";
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
