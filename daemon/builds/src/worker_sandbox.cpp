// Landlock, seccomp and a user switch for build workers. See kiln/builds/worker_sandbox.hpp.
#include "kiln/builds/worker_sandbox.hpp"

#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pwd.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kiln::build {

namespace {

namespace fs = std::filesystem;

// Landlock's ABI, spelled here: Debian's kernel headers stop at ABI 2, the running kernel
// may offer more (the kernel takes a larger attribute whose unknown fields are zero).
constexpr int kRulePathBeneath = 1;
constexpr unsigned kCreateRulesetVersion = 1u << 0;
enum : std::uint64_t {
  kWriteFile = 1ull << 1,
  kRemoveDir = 1ull << 4,
  kRemoveFile = 1ull << 5,
  kMakeChar = 1ull << 6,
  kMakeDir = 1ull << 7,
  kMakeReg = 1ull << 8,
  kMakeSock = 1ull << 9,
  kMakeFifo = 1ull << 10,
  kMakeBlock = 1ull << 11,
  kMakeSym = 1ull << 12,
  kRefer = 1ull << 13,      // ABI 2
  kTruncate = 1ull << 14,   // ABI 3
  kNetBindTcp = 1ull << 0,  // ABI 4, handled_access_net
  kNetConnectTcp = 1ull << 1,
  kScopeAbstractUnix = 1ull << 0,  // ABI 6, scoped
  kScopeSignal = 1ull << 1,
};
struct RulesetAttr {
  std::uint64_t handled_access_fs = 0, handled_access_net = 0, scoped = 0;
};
struct __attribute__((packed)) PathBeneathAttr {
  std::uint64_t allowed_access;
  std::int32_t parent_fd;
};

int landlock_abi() {
  long v = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, kCreateRulesetVersion);
  return v < 0 ? -errno : static_cast<int>(v);
}

// Every right that writes, as far as this ABI knows it. Reads, execution and ioctl are not
// handled, so they stay as DAC allows.
std::uint64_t write_rights(int abi) {
  std::uint64_t r = kWriteFile | kRemoveDir | kRemoveFile | kMakeChar | kMakeDir | kMakeReg | kMakeSock | kMakeFifo |
                    kMakeBlock | kMakeSym;
  if (abi >= 2) r |= kRefer;
  if (abi >= 3) r |= kTruncate;
  return r;
}

// Adds "may do `rights` beneath `path`"; false when the path cannot be opened (it is left
// out: nothing beneath it is writable).
bool allow(int ruleset, const fs::path& path, std::uint64_t rights) {
  posix::UniqueFd fd(::open(path.c_str(), O_PATH | O_CLOEXEC));
  if (!fd.valid()) return false;
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) return false;
  // A rule on a file may hold only the rights of files.
  if (!S_ISDIR(st.st_mode)) rights &= kWriteFile | kTruncate;
  PathBeneathAttr attr{rights, fd.get()};
  return ::syscall(SYS_landlock_add_rule, ruleset, kRulePathBeneath, &attr, 0) == 0;
}

// Device nodes a worker opens read-write: the null devices, and the NVIDIA ones (CUDA opens
// /dev/nvidiactl, /dev/nvidia<N>, /dev/nvidia-uvm read-write). Opening for write only;
// nothing is created or removed in /dev.
std::vector<fs::path> device_nodes() {
  std::vector<fs::path> out{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"};
  std::error_code ec;
  for (fs::directory_iterator it("/dev", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with("nvidia")) out.push_back(it->path());
  }
  return out;
}

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string s;
  for (const auto& p : parts) s += (s.empty() ? "" : sep) + p;
  return s;
}

// The native architecture's audit number; 0 where kiln has no filter for it.
constexpr std::uint32_t native_arch() {
#if defined(__x86_64__)
  return AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
  return AUDIT_ARCH_AARCH64;
#else
  return 0;
#endif
}

sock_filter stmt(std::uint16_t code, std::uint32_t k) { return sock_filter{code, 0, 0, k}; }
sock_filter jump(std::uint16_t code, std::uint32_t k, std::uint8_t jt, std::uint8_t jf) {
  return sock_filter{code, jt, jf, k};
}

// The seccomp program: native system calls only; socket(2) only for AF_UNIX and AF_NETLINK;
// no io_uring (its operations would bypass this filter), no ptrace or process_vm_*.
std::vector<sock_filter> network_filter() {
  constexpr std::uint32_t arch = native_arch();
  std::vector<sock_filter> f;
  if (arch == 0) return f;
  const std::uint32_t eperm = SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA);
  const std::uint32_t enosys = SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA);
  f.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)));
  f.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, arch, 1, 0));
  f.push_back(stmt(BPF_RET | BPF_K, enosys));  // another ABI (32-bit code): nothing
  f.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
#if defined(__x86_64__)
  f.push_back(jump(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1));  // x32 numbers
  f.push_back(stmt(BPF_RET | BPF_K, enosys));
#endif
  auto refuse = [&](long nr, std::uint32_t ret) {
    f.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<std::uint32_t>(nr), 0, 1));
    f.push_back(stmt(BPF_RET | BPF_K, ret));
  };
  refuse(SYS_io_uring_setup, enosys);
  refuse(SYS_io_uring_enter, enosys);
  refuse(SYS_io_uring_register, enosys);
  refuse(SYS_ptrace, eperm);
  refuse(SYS_process_vm_readv, eperm);
  refuse(SYS_process_vm_writev, eperm);
  f.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 0, 4));
  f.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])));  // low half: the domain
  f.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 2, 0));
  f.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, AF_NETLINK, 1, 0));
  f.push_back(stmt(BPF_RET | BPF_K, eperm));
  f.push_back(stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  return f;
}

std::string user_text(const WorkerIdentity& u) { return "uid " + std::to_string(u.uid) + " (" + u.name + ")"; }

// What switching to `user` needs, or why it cannot: "" = fine (or nothing to switch).
std::string user_refusal(const std::optional<WorkerIdentity>& user) {
  if (!user || user->uid == ::geteuid()) return {};
  if (::geteuid() != 0)
    return "[builds] worker_user = \"" + user->name + "\" needs kilnd to run as root (it runs as uid " +
           std::to_string(::geteuid()) + "); run kilnd as that user instead, or remove worker_user";
  return {};
}

}  // namespace

std::string worker_user_refusal(const WorkerSandbox& sandbox) { return user_refusal(sandbox.user); }

Result<WorkerIdentity> resolve_worker_user(const std::string& name) {
  std::vector<char> buf(16384);
  passwd pw{}, *found = nullptr;
  int rc = ::getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found);
  if (rc != 0 || !found) return make_error(Errc::not_found, "no user named \"" + name + "\" on this node");
  if (pw.pw_uid == 0) return make_error(Errc::invalid_argument, "\"" + name + "\" is root: workers must not run as root");
  WorkerIdentity id{name, pw.pw_uid, pw.pw_gid, {}};
  int n = 64;
  std::vector<gid_t> groups(static_cast<std::size_t>(n));
  if (::getgrouplist(name.c_str(), pw.pw_gid, groups.data(), &n) < 0) {
    groups.resize(static_cast<std::size_t>(n));
    ::getgrouplist(name.c_str(), pw.pw_gid, groups.data(), &n);
  }
  groups.resize(static_cast<std::size_t>(n));
  id.groups = std::move(groups);
  return id;
}

SandboxPlan::SandboxPlan(SandboxPlan&&) noexcept = default;
SandboxPlan& SandboxPlan::operator=(SandboxPlan&&) noexcept = default;
SandboxPlan::~SandboxPlan() = default;

SandboxPlan SandboxPlan::prepare(const WorkerSandbox& sandbox, const fs::path& tmpdir) {
  SandboxPlan p;
  // The user switch is not part of the switchable sandbox: worker_user holds either way.
  p.refusal_ = user_refusal(sandbox.user);
  if (sandbox.user && p.refusal_.empty() && sandbox.user->uid != ::geteuid()) p.user_ = sandbox.user;
  const std::string as = "uid " + std::to_string(p.user_ ? p.user_->uid : ::geteuid()) +
                         (p.user_ ? " (" + p.user_->name + ")" : ::geteuid() == 0 ? " (root: set [builds] worker_user)" : "");
  if (!sandbox.enabled) {
    p.description_ = "off ([builds] sandbox = false): the worker may write wherever its user may and has the network, " + as;
    return p;
  }
  p.enabled_ = true;
  std::vector<std::string> parts;
  const int abi = landlock_abi();
  if (abi <= 0) {
    parts.push_back("landlock unavailable (" + std::string(std::strerror(-abi)) +
                    "): the worker may write wherever kilnd's user may");
  } else {
    RulesetAttr attr;
    attr.handled_access_fs = write_rights(abi);
    if (abi >= 4) attr.handled_access_net = kNetBindTcp | kNetConnectTcp;
    if (abi >= 6) attr.scoped = kScopeAbstractUnix | kScopeSignal;
    posix::UniqueFd rs(static_cast<int>(::syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0)));
    if (!rs.valid()) {
      parts.push_back("landlock unavailable (" + std::string(std::strerror(errno)) + ")");
    } else {
      std::vector<std::string> writable, missing;
      for (const auto& w : sandbox.writable) (allow(rs.get(), w, attr.handled_access_fs) ? writable : missing).push_back(w.string());
      if (allow(rs.get(), "/dev/shm", attr.handled_access_fs)) writable.push_back("/dev/shm");
      // Devices and /proc's files: written, never made or removed beneath.
      const std::uint64_t file_writes = kWriteFile | (abi >= 3 ? std::uint64_t{kTruncate} : 0);
      for (const auto& d : device_nodes()) (void)allow(rs.get(), d, file_writes);
      writable.push_back("devices");
      // CUDA's driver writes its own process's /proc files at initialisation (without it:
      // "Error 304: OS call failed", every GPU build broken; found on an H200). The rule is
      // made before fork, so it cannot name the worker's pid: /proc's files, as their
      // permissions allow, and nothing created (procfs creates nothing anyway).
      if (allow(rs.get(), "/proc", file_writes)) writable.push_back("/proc files");
      std::string text = "landlock ABI " + std::to_string(abi) + " (writes: " + join(writable, ", ") + ")";
      if (!missing.empty()) text += " (not found, so not writable: " + join(missing, ", ") + ")";
      parts.push_back(std::move(text));
      p.ruleset_ = std::move(rs);
    }
  }
  // A /tmp of its own needs a mount namespace, which needs root (CAP_SYS_ADMIN) before the
  // switch to worker_user. Without it /tmp stays unwritable (Landlock).
  const auto below_tmp = tmpdir.lexically_normal().lexically_relative("/tmp");
  if (tmpdir.is_absolute() && (below_tmp.empty() || *below_tmp.begin() == "..")) {
    if (::geteuid() == 0) {
      p.private_tmp_ = tmpdir.string();
      parts.push_back("/tmp = " + p.private_tmp_ + " (its own mount namespace, where the kernel allows one)");
    } else {
      parts.push_back("no /tmp of its own (kilnd is not root: no mount namespace)");
    }
  }
  p.filter_ = network_filter();
  parts.push_back(p.filter_.empty() ? "seccomp unavailable (no filter for this CPU architecture): the worker has the network"
                                    : "seccomp (no network sockets, no io_uring, no ptrace)");
  parts.push_back("no_new_privs");
  parts.push_back(as);
  p.description_ = join(parts, ", ");
  return p;
}

int SandboxPlan::apply_in_child(const char** step) const noexcept {
  if (!private_tmp_.empty() && enabled_) {
    // Before the user switch (it needs CAP_SYS_ADMIN) and Landlock (which forbids mounts).
    // The namespace's mounts stay private, so the bind is this worker's alone; the folder
    // is in its writable set, so Landlock lets it write beneath /tmp too.
    // Best effort: where the kernel or a container refuses the namespace, /tmp just stays
    // unwritable, as without this (the worker says so when it needs it: aoti.py).
    if (::unshare(CLONE_NEWNS) == 0 && ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0)
      (void)::mount(private_tmp_.c_str(), "/tmp", nullptr, MS_BIND, nullptr);
  }
  if (user_) {
    *step = "setgroups";
    if (::syscall(SYS_setgroups, user_->groups.size(), user_->groups.data()) != 0) return errno;
    *step = "setresgid";
    if (::syscall(SYS_setresgid, user_->gid, user_->gid, user_->gid) != 0) return errno;
    *step = "setresuid";
    if (::syscall(SYS_setresuid, user_->uid, user_->uid, user_->uid) != 0) return errno;
  }
  if (!enabled_) return 0;
  *step = "prctl(PR_SET_NO_NEW_PRIVS)";
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
  if (ruleset_.valid()) {
    *step = "landlock_restrict_self";
    if (::syscall(SYS_landlock_restrict_self, ruleset_.get(), 0) != 0) return errno;
  }
  if (!filter_.empty()) {
    *step = "seccomp";
    sock_fprog prog{static_cast<unsigned short>(filter_.size()), const_cast<sock_filter*>(filter_.data())};
    if (::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) return errno;
  }
  return 0;
}

std::string describe_sandbox_support(const WorkerSandbox& sandbox) {
  if (!sandbox.enabled) {
    std::string s = "off ([builds] sandbox = false): workers may write wherever their user may and have the network";
    if (std::string why = user_refusal(sandbox.user); !why.empty()) s += "; workers refused: " + why;
    else if (sandbox.user) s += "; as " + user_text(*sandbox.user);
    return s;
  }
  std::vector<std::string> on, missing;
  if (int abi = landlock_abi(); abi > 0) on.push_back("landlock ABI " + std::to_string(abi));
  else missing.push_back("landlock unavailable (" + std::string(std::strerror(-abi)) + ")");
  if (native_arch() != 0) on.push_back("seccomp");
  else missing.push_back("seccomp unavailable (no filter for this CPU architecture)");
  on.push_back("no_new_privs");
  if (std::string why = user_refusal(sandbox.user); !why.empty()) missing.push_back("workers refused: " + why);
  else if (sandbox.user) on.push_back("as " + user_text(*sandbox.user));
  else if (::geteuid() == 0) missing.push_back("workers run as root (set [builds] worker_user)");
  std::string s = "on: " + join(on, ", ");
  if (!missing.empty()) s += "; " + join(missing, "; ");
  return s;
}

}  // namespace kiln::build
