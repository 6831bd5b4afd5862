// The worker sandbox (kiln/builds/worker_sandbox.hpp) on real processes: python3 trying to
// write, open sockets and signal, under run_worker; a kernel without Landlock played by a
// seccomp filter that answers landlock_create_ruleset with ENOSYS, as an old kernel does.
#include "kiln/builds/worker_sandbox.hpp"

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>

#include <doctest/doctest.h>

#include "kiln/builds/worker_process.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::build;
namespace fs = std::filesystem;

namespace {

// A python3 worker that reports, on stdout, what it may do: "inet=<ok|ERRNO> unix=...
// write:<path>=... kill_parent=..." (the parent: the process that started it).
WorkerCommand prober(const std::vector<fs::path>& writes) {
  std::string paths;
  for (const auto& p : writes) paths += "'" + p.string() + "',";
  const std::string script = R"(
import errno, os, signal, socket, tempfile
def t(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
out = ["inet=" + t(lambda: socket.socket(socket.AF_INET).close()),
       "inet6=" + t(lambda: socket.socket(socket.AF_INET6).close()),
       "unix=" + t(lambda: socket.socket(socket.AF_UNIX).close())]
for p in [)" + paths + R"(]:
    out.append("write:" + p + "=" + t(lambda: open(p, "w").close()))
out.append("kill_parent=" + t(lambda: os.kill(os.getppid(), 0)))
out.append("mkdtemp=" + t(lambda: tempfile.mkdtemp()))
out.append("TMPDIR=" + os.environ.get("TMPDIR", ""))
print(" ".join(out))
)";
  WorkerCommand cmd;
  cmd.argv = {"python3", "-c", script};
  return cmd;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Runs `f` in a child process of this one (to change what the kernel lets it do without
// touching the test process) and returns what it returned.
std::string in_child(const std::function<std::string()>& f) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    std::string s = f();
    (void)!::write(fds[1], s.data(), s.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  return out;
}

// What an old kernel says to Landlock: ENOSYS from landlock_create_ruleset.
void hide_landlock() {
  sock_filter f[] = {
      {BPF_LD | BPF_W | BPF_ABS, 0, 0, static_cast<std::uint32_t>(offsetof(seccomp_data, nr))},
      {BPF_JMP | BPF_JEQ | BPF_K, 0, 1, SYS_landlock_create_ruleset},
      {BPF_RET | BPF_K, 0, 0, SECCOMP_RET_ERRNO | ENOSYS},
      {BPF_RET | BPF_K, 0, 0, SECCOMP_RET_ALLOW},
  };
  sock_fprog prog{4, f};
  ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
}

}  // namespace

TEST_CASE("AConfinedWorkerWritesOnlyBeneathItsFoldersAndHasNoNetwork") {
  test::TempDir dir;
  fs::create_directories(dir / "job");
  fs::create_directories(dir / "other");
  WorkerCommand cmd =
      prober({dir / "job" / "f", dir / "other" / "f", "/dev/null", "/dev/shm/kiln-sandbox-test", "/proc/self/comm"});
  cmd.sandbox.writable = {dir / "job"};
  WorkerExit e = run_worker(cmd, "", WorkerLimits{});
  REQUIRE_MESSAGE(e.clean_exit(), e.describe() << "\n" << e.log);
  MESSAGE(e.out << "sandbox: " << e.sandbox);
  CHECK(has(e.out, "inet=EPERM"));
  CHECK(has(e.out, "inet6=EPERM"));
  CHECK(has(e.out, "unix=ok"));  // pipes and local sockets of its own still work
  CHECK(has(e.out, "write:" + (dir / "job" / "f").string() + "=ok"));
  CHECK(has(e.out, "write:/dev/null=ok"));
  CHECK(has(e.out, "write:/dev/shm/kiln-sandbox-test=ok"));  // Python's multiprocessing semaphores
  CHECK(has(e.out, "write:/proc/self/comm=ok"));  // CUDA's driver writes its process's /proc files
  // No TMPDIR of its own in the command: a private one for the run, gone afterwards.
  CHECK(has(e.out, "mkdtemp=ok"));
  const auto at = e.out.find("TMPDIR=");
  REQUIRE(at != std::string::npos);
  const fs::path private_tmp = e.out.substr(at + 7, e.out.find_first_of(" \n", at) - at - 7);
  CHECK(private_tmp.filename().string().starts_with("kiln-worker-"));
  CHECK_FALSE(fs::exists(private_tmp));
  fs::remove("/dev/shm/kiln-sandbox-test");
  if (has(e.sandbox, "landlock ABI")) {
    CHECK(has(e.out, "write:" + (dir / "other" / "f").string() + "=EACCES"));
    CHECK_FALSE(fs::exists(dir / "other" / "f"));
    // Landlock ABI 6 scopes signals: it cannot signal kilnd (its parent here).
    if (!has(e.sandbox, "landlock ABI 1 ") && !has(e.sandbox, "landlock ABI 2 ") && !has(e.sandbox, "landlock ABI 3 ") &&
        !has(e.sandbox, "landlock ABI 4 ") && !has(e.sandbox, "landlock ABI 5 "))
      CHECK(has(e.out, "kill_parent=EPERM"));
  }
  // Off: the same worker has the network and writes anywhere its user may.
  cmd.sandbox.enabled = false;
  WorkerExit off = run_worker(cmd, "", WorkerLimits{});
  CHECK(has(off.out, "inet=ok"));
  CHECK(has(off.out, "write:" + (dir / "other" / "f").string() + "=ok"));
  CHECK(off.sandbox.starts_with("off ([builds] sandbox = false)"));
}

TEST_CASE("AConfinedWorkerRunByRootGetsItsTmpdirAsItsOwnTmp") {
  // torch 2.11's AOTInductor package loader unpacks into mkdtemp("/tmp/XXXXXX") whatever
  // TMPDIR says; on an H200 every sandboxed build failed at its check run there.
  if (::geteuid() != 0) {
    MESSAGE("not root: kilnd makes no mount namespace, nothing to check");
    return;
  }
  // Outside /tmp, as a build's folder is (bound over /tmp, a folder beneath it would hide
  // its own path).
  const fs::path own = fs::path("/var/tmp") / ("kiln-sandbox-tmp-" + std::to_string(::getpid()));
  fs::create_directories(own);
  const fs::path probe = fs::path("/tmp") / ("kiln-private-tmp-" + std::to_string(::getpid()));
  WorkerCommand cmd = prober({probe});
  cmd.env["TMPDIR"] = own.string();
  cmd.sandbox.writable = {own};
  WorkerExit e = run_worker(cmd, "", WorkerLimits{});
  REQUIRE_MESSAGE(e.clean_exit(), e.describe() << "\n" << e.log);
  MESSAGE(e.out << "sandbox: " << e.sandbox);
  CHECK(has(e.sandbox, "/tmp = " + own.string()));
  CHECK(has(e.out, "write:" + probe.string() + "=ok"));
  CHECK(fs::exists(own / probe.filename()));  // it wrote its own /tmp ...
  CHECK_FALSE(fs::exists(probe));             // ... not the node's
  std::error_code ec;
  fs::remove_all(own, ec);
}

TEST_CASE("OnAKernelWithoutLandlockTheWorkerStillRunsWithSeccompAndItsDescriptionSaysSo") {
  test::TempDir dir;
  fs::create_directories(dir / "job");
  const std::string got = in_child([&] {
    hide_landlock();
    WorkerCommand cmd = prober({dir / "job" / "f"});
    cmd.sandbox.writable = {dir / "job"};
    WorkerExit e = run_worker(cmd, "", WorkerLimits{});
    return std::string(e.clean_exit() ? "ran " : "failed ") + e.out + "sandbox: " + e.sandbox + "\nsupport: " +
           describe_sandbox_support(cmd.sandbox) + "\n" + e.log;
  });
  MESSAGE(got);
  CHECK(got.starts_with("ran "));  // never a failed build
  CHECK(has(got, "inet=EPERM"));   // seccomp still holds
  CHECK(has(got, "write:" + (dir / "job" / "f").string() + "=ok"));
  CHECK(has(got, "sandbox: landlock unavailable (Function not implemented)"));
  CHECK(has(got, "seccomp (no network sockets, no io_uring, no ptrace)"));
  CHECK(has(got, "support: on: seccomp, no_new_privs; landlock unavailable (Function not implemented)"));
}

TEST_CASE("AWorkerUserThatKilndCannotSwitchToIsRefusedNotIgnored") {
  if (::geteuid() != 0) return;  // played below by a child that gives root up
  auto daemon_user = resolve_worker_user("daemon");
  auto nobody = resolve_worker_user("nobody");
  REQUIRE((daemon_user.has_value() && nobody.has_value()));
  const std::string got = in_child([&] {
    if (::setresgid(nobody->gid, nobody->gid, nobody->gid) != 0 || ::setresuid(nobody->uid, nobody->uid, nobody->uid) != 0)
      return std::string("cannot become nobody");
    WorkerCommand cmd{{"/bin/true"}, {}, {}, {}, {}};
    cmd.sandbox.user = *daemon_user;
    WorkerExit e = run_worker(cmd, "", WorkerLimits{});
    return (e.how == WorkerExit::How::spawn_failed ? std::string("refused: ") : std::string("ran: ")) + e.spawn_error;
  });
  CHECK_MESSAGE(got.starts_with("refused: [builds] worker_user = \"daemon\" needs kilnd to run as root"), got);
  CHECK(resolve_worker_user("root").error().code == Errc::invalid_argument);
  CHECK(resolve_worker_user("no-such-kiln-user").error().code == Errc::not_found);
}
