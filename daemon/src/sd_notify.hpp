// The systemd readiness protocol (sd_notify(3)), without libsystemd: one datagram of
// "KEY=VALUE" lines to the socket named by $NOTIFY_SOCKET. kilnd says READY=1 once it
// listens, RELOADING=1/READY=1 around a SIGHUP reload and STOPPING=1 when it drains, so
// kilnd.service can be Type=notify and anything starting kilnd (tests too) can wait for
// "ready" without probing the socket.
#pragma once

#include <string_view>

namespace kiln::daemon {

// Sends `state` when $NOTIFY_SOCKET is set (a path, or "@name" for the abstract
// namespace); does nothing otherwise. Never fails the caller: readiness is advisory.
void sd_notify(std::string_view state) noexcept;

}  // namespace kiln::daemon
