// Internal to the handlers: helpers they share.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "connection.hpp"

namespace kiln::daemon {

inline constexpr const char* kServerName = "kilnd/0.1.0";

inline Outcome fail(Error e) { return Outcome{std::move(e), {}, false}; }
// permission_denied naming `what`, the role it needs, the peer's uid and role, and the
// [access] options that grant it, unless the peer holds `need` (or more).
Status needs_role(Connection& c, protocol::Role need, std::string_view what);
asio::awaitable<Outcome> reply_ok(Connection& c, const Request& r, const std::string& body, std::string note);
asio::awaitable<Outcome> handle_admin_request(Connection& c, const Request& r);
// Waits for the build service to ensure `key` (GET on_miss=build, BUILD wait=true). The
// waiter is withdrawn when the connection closes or the client CANCELs request `r`
// (then Errc::cancelled), so a build nobody waits for any more can be stopped.
asio::awaitable<Status> await_build(Connection& c, const Request& r, const Key& key, const Digest& digest,
                                    const EnsureOptions& options);
Result<Digest> resolve_ref(ServerState& s, protocol::KeyRef& ref);
// Until the build service's start-up probes end, waits for them (at once after, and
// without a build service): builds, and the toolchain fields of "this node", come from
// them. Call it before asking the build service anything but gpu_report(). unavailable
// when kilnd stops first.
asio::awaitable<Status> wait_for_builds(ServerState& s);
// Waits for them only when `ref` is a key that leaves node fields this node does not know
// yet to this node.
asio::awaitable<Status> wait_for_node(ServerState& s, const protocol::KeyRef& ref);
std::map<std::string, std::string> node_map(const NodeFields& n);
std::vector<std::string> capabilities(const ServerState& s);

}  // namespace kiln::daemon
