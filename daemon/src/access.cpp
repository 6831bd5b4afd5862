// Roles from peer credentials.
#include "access.hpp"

#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
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
  if (trust_owner_ && (p.uid == owner_ || p.uid == 0)) return Role::admin;
  if (admin_.matches(p)) return Role::admin;
  if (put_.matches(p)) return Role::put;
  if (build_.matches(p)) return Role::build;
  if (read_.matches(p)) return Role::read;
  return Role::none;
}

}  // namespace kiln::daemon
