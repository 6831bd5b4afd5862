// Roles from peer credentials.
#include "access.hpp"

#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

namespace kiln::daemon {

namespace {

bool parse_id(const std::string& s, unsigned long& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  out = std::strtoul(s.c_str(), &end, 10);
  return *end == 0;
}

Result<uid_t> resolve_user(const std::string& name) {
  unsigned long id = 0;
  if (parse_id(name, id)) return static_cast<uid_t>(id);
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* out = nullptr;
  int rc = ::getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &out);
  if (rc != 0 || !out) return make_error(Errc::invalid_argument, "access: unknown user \"" + name + "\"");
  return out->pw_uid;
}

Result<gid_t> resolve_group(const std::string& name) {
  unsigned long id = 0;
  if (parse_id(name, id)) return static_cast<gid_t>(id);
  std::vector<char> buf(65536);
  group gr{};
  group* out = nullptr;
  int rc = ::getgrnam_r(name.c_str(), &gr, buf.data(), buf.size(), &out);
  if (rc != 0 || !out) return make_error(Errc::invalid_argument, "access: unknown group \"" + name + "\"");
  return out->gr_gid;
}

// The "Seccomp:" mode and "Seccomp_filters:" count (Linux 5.9+; -1 before) of a process,
// from /proc/<pid>/status; nullopt when it cannot be read (the process is gone).
struct SeccompState {
  int mode = 0;
  int filters = -1;
};
std::optional<SeccompState> seccomp_state(const std::string& pid) {
  FILE* f = std::fopen(("/proc/" + pid + "/status").c_str(), "re");
  if (!f) return std::nullopt;
  SeccompState st;
  bool seen = false;
  char line[256];
  while (std::fgets(line, sizeof line, f)) {
    if (std::sscanf(line, "Seccomp: %d", &st.mode) == 1) seen = true;
    std::sscanf(line, "Seccomp_filters: %d", &st.filters);
  }
  std::fclose(f);
  if (!seen) return std::nullopt;
  return st;
}

// Whether process `pid` of kilnd's own user runs under more seccomp filters than kilnd: a
// build worker's sandbox adds one (filters are inherited and cannot be dropped, so nothing a
// worker starts loses it). Without the filter count (kernels before 5.9): filtered while
// kilnd is not.
bool below_kilnd(pid_t pid) {
  static const std::optional<SeccompState> own = seccomp_state("self");
  const auto theirs = seccomp_state(std::to_string(pid));
  if (!theirs) return true;  // gone, or invisible: not checkable, not trusted
  if (!own) return false;    // kilnd cannot read its own status: no /proc to go by
  if (own->filters >= 0 && theirs->filters >= 0) return theirs->filters > own->filters;
  return theirs->mode == 2 && own->mode != 2;
}

}  // namespace

Result<PeerCred> peer_credentials(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return error_from_errno(errno, "read peer credentials (SO_PEERCRED)");
  PeerCred p;
  p.pid = cred.pid;
  p.uid = cred.uid;
  p.gid = cred.gid;
  p.groups.push_back(cred.gid);
#ifdef SO_PEERGROUPS
  std::vector<gid_t> groups(64);
  for (int attempt = 0; attempt < 4; ++attempt) {
    socklen_t glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) == 0) {
      groups.resize(glen / sizeof(gid_t));
      p.groups.insert(p.groups.end(), groups.begin(), groups.end());
      break;
    }
    if (errno != ERANGE) break;  // old kernel: primary group only
    groups.resize(glen / sizeof(gid_t) + 16);
  }
#endif
  // Only kilnd's own user can be mistaken for kilnd's owner (trust_owner, admin_users);
  // workers of another user ([builds] worker_user) get what [access] gives that user. Not
  // for a kilnd run as root: root clients in a container run under the container's filter
  // too, and such a kilnd's workers are root unless worker_user says otherwise (SECURITY.md).
  if (p.uid == ::geteuid() && p.uid != 0 && below_kilnd(p.pid)) {
    p.in_worker_sandbox = true;
    static std::atomic<std::int64_t> last_warned{0};
    const std::int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                                 std::chrono::steady_clock::now().time_since_epoch()).count();
    if (std::int64_t was = last_warned.load(); now - was >= 10 && last_warned.compare_exchange_strong(was, now))
      spdlog::warn("access: a connection from pid {} (uid {}) comes from inside a build worker's sandbox: it gets no "
                   "role (at most one such line per 10 s)", p.pid, p.uid);
  }
  return p;
}

bool AccessPolicy::Ids::matches(const PeerCred& p) const {
  if (anyone || users.count(p.uid)) return true;
  for (gid_t g : p.groups)
    if (groups.count(g)) return true;
  return false;
}

std::optional<gid_t> socket_file_group(int fd) {
  sockaddr_un addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 || addr.sun_family != AF_UNIX) return std::nullopt;
  const std::size_t max = len > offsetof(sockaddr_un, sun_path) ? len - offsetof(sockaddr_un, sun_path) : 0;
  if (max == 0 || addr.sun_path[0] == 0) return std::nullopt;  // unnamed or abstract
  std::string path(addr.sun_path, ::strnlen(addr.sun_path, std::min(max, sizeof addr.sun_path)));
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return st.st_gid;
}

Result<AccessPolicy> AccessPolicy::make(const AccessConfig& c, std::optional<gid_t> socket_group) {
  AccessPolicy a;
  a.trust_owner_ = c.trust_owner;
  a.owner_ = ::geteuid();
  if (c.legacy_write)
    spdlog::warn("access: write_users / write_groups name the role that was split into build and put; their "
                 "entries get build (register sources, have kilnd build them), not put (store bytes other users "
                 "load). Rename them to build_users / build_groups, or to put_users / put_groups for trusted "
                 "publishers (schema/protocol.md, \"Roles\")");
  auto fill = [socket_group](Ids& ids, const std::vector<std::string>& users,
                             const std::vector<std::string>& groups) -> Status {
    for (const auto& u : users) {
      if (u == "*") {
        ids.anyone = true;
        continue;
      }
      auto id = resolve_user(u);
      if (!id) return std::move(id).error();
      ids.users.insert(*id);
    }
    for (const auto& g : groups) {
      if (g == kSocketGroup) {
        if (socket_group) ids.groups.insert(*socket_group);
        continue;
      }
      auto id = resolve_group(g);
      if (!id) return std::move(id).error();
      ids.groups.insert(*id);
    }
    return {};
  };
  KILN_TRY(fill(a.read_, c.read_users, c.read_groups));
  KILN_TRY(fill(a.build_, c.build_users, c.build_groups));
  KILN_TRY(fill(a.put_, c.put_users, c.put_groups));
  KILN_TRY(fill(a.admin_, c.admin_users, c.admin_groups));
  return a;
}

protocol::Role AccessPolicy::role_of(const PeerCred& p) const {
  using protocol::Role;
  if (p.in_worker_sandbox) return Role::none;
  if (trust_owner_ && (p.uid == owner_ || p.uid == 0)) return Role::admin;
  if (admin_.matches(p)) return Role::admin;
  if (put_.matches(p)) return Role::put;
  if (build_.matches(p)) return Role::build;
  if (read_.matches(p)) return Role::read;
  return Role::none;
}

}  // namespace kiln::daemon
