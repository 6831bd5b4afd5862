// kiln/builds/worker_sandbox.hpp — what confines a build worker (schema/worker-protocol.md,
// "Sandbox"; SECURITY.md says why).
//
// A worker loads and compiles sources that build-role users registered, so a crafted
// source can run code in it. With the sandbox on (the default), each worker process and
// everything it starts:
//  - cannot gain privileges (PR_SET_NO_NEW_PRIVS: setuid binaries do not elevate);
//  - writes only beneath `writable` (its build's folder, which holds its private TMPDIR
//    and compiler caches), a few device nodes (/dev/null, the NVIDIA devices: a GPU is
//    opened read-write), /dev/shm (POSIX semaphores of Python's multiprocessing) and
//    /proc's files as their permissions allow (CUDA's driver writes its process's own).
//    Reads are not confined. Landlock (Linux 5.13+); on ABI 6+ it also cannot signal
//    processes outside its sandbox (kilnd) or reach abstract Unix sockets outside it, and
//    on every ABI it cannot ptrace them;
//  - has no network: socket(2) is refused (EPERM) for every family but AF_UNIX and
//    AF_NETLINK, and io_uring (which would bypass that filter) with ENOSYS; ptrace and
//    process_vm_* with EPERM. seccomp (a BPF filter written here, no libseccomp);
//  - runs as `user` when one is given, sandbox on or off (kilnd must be root to switch:
//    setgroups, setgid, setuid in the child, before exec). The build's folder is then
//    given to that user, and the folders above it must let it through (x for others: the
//    default work_dir, <store>/builds, under a store of mode 0700 does not).
// What the kernel cannot do is skipped, never a failed build: a kernel without Landlock
// runs the worker with the rest, and the plan's description (the build log, STATUS) says
// what was applied. Switching to `user` is the exception: a worker that should not run as
// kilnd's user and cannot be made not to is not started (spawn_failed, with the reason).
//
// Thread safety: a SandboxPlan is immutable once prepared; apply_in_child is for the
// child of fork(2) of a multi-threaded process, so it makes system calls only.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kiln/posix/fd.hpp"
#include "kiln/result.hpp"

struct sock_filter;

namespace kiln::build {

// A user to run workers as ([builds] worker_user), resolved from the passwd database.
struct WorkerIdentity {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;   // its supplementary groups (getgrouplist)
};

// not_found: no such user; invalid_argument: the user is root.
[[nodiscard]] Result<WorkerIdentity> resolve_worker_user(const std::string& name);

struct WorkerSandbox {
  bool enabled = true;         // false: no Landlock, seccomp or no_new_privs ([builds] sandbox)
  // Folders (or files) beneath which the worker may create, write, rename and remove. kilnd
  // adds the build's own folder per build; a folder every build shares (a node-wide
  // compiler cache) belongs here too. A path that does not exist is left out (and said).
  std::vector<std::filesystem::path> writable;
  std::optional<WorkerIdentity> user;   // run as this user (kilnd must be root), even if !enabled
};

// What one worker gets, prepared in the parent (allocations, opening paths) so that the
// forked child only makes system calls.
class SandboxPlan {
 public:
  // Never fails: what this kernel cannot do is left out and described. A `user` that
  // kilnd (not root) cannot switch to makes refusal() non-empty.
  // `tmpdir`: the worker's TMPDIR. With the sandbox on and kilnd root, the worker gets it as
  // /tmp too, in a mount namespace of its own: code that ignores TMPDIR (torch 2.11's
  // AOTInductor package loader unpacks into mkdtemp("/tmp/XXXXXX")) then writes there and
  // nowhere else. Not for an empty or relative one, nor one beneath /tmp (the bind would
  // hide its own path).
  static SandboxPlan prepare(const WorkerSandbox& sandbox, const std::filesystem::path& tmpdir = {});

  SandboxPlan(SandboxPlan&&) noexcept;
  SandboxPlan& operator=(SandboxPlan&&) noexcept;
  ~SandboxPlan();

  // Non-empty: the worker must not be started, and why (e.g. worker_user set for a kilnd
  // that is not root).
  const std::string& refusal() const { return refusal_; }
  // One line for the build log and STATUS: "off ([builds] sandbox = false)", or what is
  // applied, e.g. "landlock ABI 7 (writes: /x/jobs/ab-1, /dev/shm, devices), seccomp (no
  // network sockets, no io_uring, no ptrace), no_new_privs, uid 65534 (nobody)"; a part the
  // kernel lacks says "landlock unavailable (...)".
  const std::string& description() const { return description_; }
  bool landlock_applied() const { return ruleset_.valid(); }

  // In the forked child, before execve. 0, or the errno of the step named in *step.
  int apply_in_child(const char** step) const noexcept;

 private:
  SandboxPlan() = default;
  bool enabled_ = false;
  posix::UniqueFd ruleset_;                  // Landlock ruleset, restricted in the child
  std::vector<sock_filter> filter_;          // seccomp program; empty = none
  std::optional<WorkerIdentity> user_;
  std::string private_tmp_;                  // bound over /tmp in the child; "" = none
  std::string description_, refusal_;
};

// Why a worker with `sandbox` must not be started ("" = it may): its user is one kilnd,
// not being root, cannot switch to. SandboxPlan::refusal says the same.
std::string worker_user_refusal(const WorkerSandbox& sandbox);

// For kilnd's start-up log and STATUS: what a worker on this kernel gets with `sandbox`
// (its description without per-build paths), e.g. "on: landlock ABI 7, seccomp,
// no_new_privs" or "on: seccomp, no_new_privs; landlock unavailable (...)".
std::string describe_sandbox_support(const WorkerSandbox& sandbox);

}  // namespace kiln::build
