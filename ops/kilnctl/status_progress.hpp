// Progress of a long request that kilnd reports in STATUS (kilnctl verify, push, pull,
// fleet prune): the request runs on a thread of its own while this thread reads kilnd's
// STATUS over a second connection every 250 ms and redraws one line on stderr. The line is
// erased when the request ends; a STATUS that fails or says nothing draws nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "kiln/client/client.hpp"
#include "kilnctl/command.hpp"

namespace kiln::ctl {

// The line to draw for a STATUS reply, or nullopt when it reports nothing (yet).
using StatusLine = std::function<std::optional<std::string>(const client::DaemonStatus&)>;

// Runs `request` to its end. With progress_on_terminal(ctx.json) false it simply runs it.
void run_with_status_progress(const Context& ctx, const std::function<void()>& request, const StatusLine& line);

// The fleet's "transfer" in STATUS as a line: "pushing  3 / 10 artifacts   12.0 MiB",
// for `op` "push" | "pull" | "prune"; nullopt when no transfer of that op runs.
std::optional<std::string> fleet_transfer_line(const client::DaemonStatus& status, const std::string& op);

}  // namespace kiln::ctl
