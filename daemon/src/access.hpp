// Who may do what: a peer's role from its SO_PEERCRED credentials and the [access]
// configuration. The socket's file mode and group are the first gate (set when the
// socket is created); this is the second.
#pragma once

#include <sys/types.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kiln/daemon/config.hpp"
#include "kiln/protocol/messages.hpp"
#include "kiln/result.hpp"

namespace kiln::daemon {

struct PeerCred {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;   // supplementary groups (SO_PEERGROUPS), primary included
  // A process of kilnd's own user (not root) under more seccomp filters than kilnd: a build
  // worker in its sandbox, or something it started (kiln/builds/worker_sandbox.hpp). It gets
  // no role, whatever [access] says of its user: a worker a crafted source took over must not
  // be kilnd's owner on its socket. Also true when such a peer's /proc status cannot be
  // read (it exited right after connecting): what cannot be checked is not trusted.
  bool in_worker_sandbox = false;
};

// Credentials of the process at the other end of a connected Unix socket.
Result<PeerCred> peer_credentials(int socket_fd);

// The group of the socket file `listen_fd` is bound to (getsockname, then stat), which
// access's kSocketGroup names; nullopt when the socket has no path or cannot be stat'ed.
std::optional<gid_t> socket_file_group(int listen_fd);

// Resolved [access] lists. Immutable; cheap to copy behind a shared_ptr.
class AccessPolicy {
 public:
  // Resolves user and group names to ids. invalid_argument naming an unknown user or
  // group, so a typo in the config is caught at start or reload, not at a refusal.
  // `socket_group` is what kSocketGroup ("@socket") stands for; without it that entry
  // grants nothing (kilnd --check-config, which has no socket). Logs a warning when the
  // config still used the old write role (AccessConfig::legacy_write).
  static Result<AccessPolicy> make(const AccessConfig& config, std::optional<gid_t> socket_group = std::nullopt);

  // The highest role the peer holds (roles are cumulative); Role::none if none, and for a
  // peer in_worker_sandbox.
  protocol::Role role_of(const PeerCred& peer) const;

 private:
  struct Ids {
    bool anyone = false;
    std::set<uid_t> users;
    std::set<gid_t> groups;
    bool matches(const PeerCred& p) const;
  };
  bool trust_owner_ = true;
  uid_t owner_ = 0;
  Ids read_, build_, put_, admin_;
};

}  // namespace kiln::daemon
