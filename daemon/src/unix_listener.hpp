// Creating kilnd's listening Unix socket, or adopting systemd's.
#pragma once

#include "kiln/daemon/config.hpp"
#include "kiln/result.hpp"
#include "kiln/posix/fd.hpp"

namespace kiln::daemon {

using posix::UniqueFd;

// Creates the socket's folder if missing (mode 0755 for root, 0700 for a user), removes
// a stale socket file (one nobody answers on), binds, applies access.socket_mode and
// access.socket_group, and listens. busy if a live server answers on the path.
// `path` is kilnd's socket or the torch cache's ([torch_cache] socket).
Result<UniqueFd> create_unix_listener(const std::filesystem::path& path, const AccessConfig& access);

}  // namespace kiln::daemon
