// Roles from peer credentials.
#include "access.hpp"

#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

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

Result<AccessPolicy> AccessPolicy::make(const AccessConfig& c) {
  AccessPolicy a;
  a.trust_owner_ = c.trust_owner;
  a.owner_ = ::geteuid();
  auto fill = [](Ids& ids, const std::vector<std::string>& users, const std::vector<std::string>& groups) -> Status {
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
      auto id = resolve_group(g);
      if (!id) return std::move(id).error();
      ids.groups.insert(*id);
    }
    return {};
  };
  KILN_TRY(fill(a.read_, c.read_users, c.read_groups));
  KILN_TRY(fill(a.write_, c.write_users, c.write_groups));
  KILN_TRY(fill(a.admin_, c.admin_users, c.admin_groups));
  return a;
}

protocol::Role AccessPolicy::role_of(const PeerCred& p) const {
  using protocol::Role;
  if (trust_owner_ && (p.uid == owner_ || p.uid == 0)) return Role::admin;
  if (admin_.matches(p)) return Role::admin;
  if (write_.matches(p)) return Role::write;
  if (read_.matches(p)) return Role::read;
  return Role::none;
}

}  // namespace kiln::daemon
