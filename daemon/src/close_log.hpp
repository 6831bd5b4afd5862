// The log line for a client connection kilnd closes on its own decision (a timeout, a
// limit, a protocol error, a refusal), on either socket: who (the peer's uid and pid, or
// its TCP address) and why, so an operator chasing a client's ConnectionError finds it.
// Internal to kiln_daemon.
//
// Rate-limited, shared by both sockets: at most kBurst lines at once and kPerSecond lines a
// second after that; closes past it are counted and the next line written says how many
// went unlogged. A flood of bad clients cannot fill the journal.
//
// Thread safety: any thread.
#pragma once

#include <string_view>

namespace kiln::daemon {

// `what` names the socket's connection ("torch cache connection", "connection"), `peer`
// the client ("uid=1000 pid=42"), `why` the reason. Written at warning level.
void log_closed_by_kilnd(std::string_view what, std::string_view peer, std::string_view why);

}  // namespace kiln::daemon
