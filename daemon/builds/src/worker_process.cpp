// Spawning a worker in its own process group and supervising it with poll(2).
#include "kiln/builds/worker_process.hpp"

#include "worker_spawn.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>


namespace kiln::build {

namespace {

using Clock = std::chrono::steady_clock;

struct Pipe {
  int r = -1, w = -1;
  bool open() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return false;
    r = fds[0];
    w = fds[1];
    return true;
  }
};

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// The worker's whole environment is an allowlist (schema/worker-protocol.md,
// "Environment"): a variable of kilnd's own environment reaches it only when named here or
// in `pass` ([builds] worker_env). CXX, CC, PYTHONPATH, LD_PRELOAD, ... change what the worker
// compiles or loads without being in the key (CXX was the compiler of the package's wrapper).
std::vector<std::string> build_env(const std::map<std::string, std::string>& extra,
                                   const std::vector<std::string>& pass) {
  std::map<std::string, std::string> env{{"PATH", std::string(kWorkerPath)}, {"LANG", "C.UTF-8"}};
  for (const char* name : {"HOME", "TMPDIR"})
    if (const char* v = std::getenv(name)) env[name] = v;
  for (const auto& name : pass)
    if (const char* v = std::getenv(name.c_str())) env[name] = v;
  for (const auto& [k, v] : extra) env[k] = v;
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

}  // namespace

bool is_scrubbed_env_var(std::string_view name) {
  for (std::string_view prefix : {"TORCHINDUCTOR_", "TRITON_", "TORCHDYNAMO_", "TORCH_COMPILE_", "TORCH_INDUCTOR_",
                                  "INDUCTOR_"}) {
    if (name.substr(0, prefix.size()) == prefix) return true;
  }
  for (std::string_view exact : {"TORCH_CUDA_ARCH_LIST", "NVIDIA_TF32_OVERRIDE", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
                                 "CUBLAS_WORKSPACE_CONFIG", "CXX", "CC", "CXXFLAGS", "CFLAGS", "LDFLAGS", "CPPFLAGS",
                                 "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "LD_PRELOAD", "LD_AUDIT",
                                 "KILN_WORKER_PRELOADED"}) {
    if (name == exact) return true;
  }
  return false;
}

namespace {

// Appends to `log`, keeping only the last `max` bytes.
void append_tail(std::string& log, bool& truncated, const char* data, std::size_t n, std::size_t max) {
  log.append(data, n);
  if (log.size() > max) {
    log.erase(0, log.size() - max);
    truncated = true;
  }
}

void kill_group(pid_t pid, int sig) { ::kill(-pid, sig); }

// A sandboxed worker whose command sets no TMPDIR (the toolchain probe) gets a private one
// for its run, under kilnd's TMPDIR: the sandbox lets it write nowhere else, and
// torch.export.load unpacks an archive there. Removed with everything in it when the run
// ends. A build's TMPDIR is its job folder's (build_runner.cpp), a source check's beside its
// check file (source_check.cpp).
class PrivateTmp {
 public:
  PrivateTmp() = default;
  PrivateTmp(const PrivateTmp&) = delete;
  PrivateTmp& operator=(const PrivateTmp&) = delete;
  ~PrivateTmp() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  // "" on success (or nothing to do), else why the worker cannot be started.
  std::string make_if_needed(WorkerSandbox& sandbox, std::map<std::string, std::string>& env) {
    if (!sandbox.enabled || env.count("TMPDIR")) return {};
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/kiln-worker-XXXXXX";
    if (!::mkdtemp(templ.data())) return "cannot create a TMPDIR for the worker in " + templ + ": " + std::strerror(errno);
    path_ = templ;
    if (sandbox.user && ::chown(templ.c_str(), sandbox.user->uid, sandbox.user->gid) != 0)
      return "cannot give the worker's TMPDIR " + templ + " to worker_user " + sandbox.user->name + ": " +
             std::strerror(errno);
    env["TMPDIR"] = templ;
    sandbox.writable.push_back(path_);
    return {};
  }

 private:
  std::filesystem::path path_;
};

// write(2) to a pipe whose reader is gone raises SIGPIPE in the writing thread, which
// would kill a process that has not ignored it. Blocked for the call; a pending one is
// consumed, so only EPIPE remains.
ssize_t write_no_sigpipe(int fd, const char* data, std::size_t n) {
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  ssize_t w = ::write(fd, data, n);
  if (w < 0 && errno == EPIPE) {
    int saved = errno;
    timespec zero{0, 0};
    while (::sigtimedwait(&pipe_set, nullptr, &zero) > 0) {
    }
    errno = saved;
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return w;
}

}  // namespace

std::string WorkerExit::describe() const {
  switch (how) {
    case How::exited:
      return "exited with status " + std::to_string(code);
    case How::signaled:
      return "killed by signal " + std::to_string(signal) + " (" + ::strsignal(signal) + ")";
    case How::timed_out:
      return "timed out after " + std::to_string(static_cast<long>(seconds)) + " s; its process group was killed";
    case How::cancelled:
      return "cancelled; its process group was killed";
    case How::stdout_overflow:
      return "wrote more than the protocol allows on stdout (garbage); it was killed";
    case How::spawn_failed:
      return "could not be started: " + spawn_error;
  }
  return "?";
}

WorkerExit run_worker(const WorkerCommand& command, std::string_view request, const WorkerLimits& limits,
                      const std::atomic<bool>* cancel) {
  std::string copy(request);
  return run_worker(command, PendingRequest([&copy]() -> std::optional<std::string> { return std::move(copy); }), limits,
                    cancel);
}

WorkerExit run_worker(const WorkerCommand& command, const PendingRequest& pending, const WorkerLimits& limits,
                      const std::atomic<bool>* cancel) {
  WorkerExit result;
  if (command.argv.empty()) {
    result.spawn_error = "no worker command configured";
    return result;
  }
  Pipe in, out, err;
  if (!in.open() || !out.open() || !err.open()) {
    result.spawn_error = std::string("pipe: ") + std::strerror(errno);
    close_fd(in.r), close_fd(in.w), close_fd(out.r), close_fd(out.w), close_fd(err.r), close_fd(err.w);
    return result;
  }

  // Own process group (pgid = its pid) so that the whole tree can be killed at once;
  // default signal dispositions and an empty mask whatever the daemon's threads use; the
  // sandbox applied before exec (worker_spawn.hpp).
  // No PR_SET_PDEATHSIG: it would cover only the leader, not the compiler processes in its
  // group, and it fires when the spawning *thread* exits, not kilnd. What a killed kilnd
  // leaves is stopped by the next kilnd's start-up sweep instead, from the group recorded
  // through on_spawn.
  WorkerSandbox sandbox = command.sandbox;
  std::map<std::string, std::string> extra_env = command.env;
  PrivateTmp tmp;
  std::string refused = worker_user_refusal(sandbox);
  if (refused.empty()) refused = tmp.make_if_needed(sandbox, extra_env);
  if (!refused.empty()) {
    result.spawn_error = refused;
    close_fd(in.r), close_fd(in.w), close_fd(out.r), close_fd(out.w), close_fd(err.r), close_fd(err.w);
    return result;
  }
  const auto tmpdir = extra_env.find("TMPDIR");
  const SandboxPlan plan =
      SandboxPlan::prepare(sandbox, tmpdir == extra_env.end() ? std::filesystem::path() : std::filesystem::path(tmpdir->second));
  result.sandbox = plan.description();
  if (!plan.refusal().empty()) {
    result.spawn_error = plan.refusal();
    close_fd(in.r), close_fd(in.w), close_fd(out.r), close_fd(out.w), close_fd(err.r), close_fd(err.w);
    return result;
  }
  const std::vector<std::string> env = build_env(extra_env, command.pass_env);
  const auto started = Clock::now();
  auto spawned = spawn_confined(command.argv, env, in.r, out.w, err.w, plan);
  close_fd(in.r), close_fd(out.w), close_fd(err.w);
  if (!spawned) {
    result.spawn_error = spawned.error().message;
    close_fd(in.w), close_fd(out.r), close_fd(err.r);
    return result;
  }
  const pid_t pid = *spawned;
  ::fcntl(in.w, F_SETFL, O_NONBLOCK);
  if (command.on_spawn) command.on_spawn(pid);

  std::size_t written = 0;
  std::string request;
  bool have_request = false;
  bool reaped = false, killing = false;
  int status = 0;
  WorkerExit::How forced = WorkerExit::How::exited;
  Clock::time_point kill_at{};
  const auto deadline = started + limits.timeout;
  std::array<char, 65536> buf;

  auto start_kill = [&](WorkerExit::How why) {
    if (killing) return;
    killing = true;
    forced = why;
    kill_group(pid, SIGTERM);
    kill_at = Clock::now() + limits.kill_grace;
  };

  while (!reaped || out.r >= 0 || err.r >= 0) {
    pollfd fds[3];
    int n = 0;
    int idx_out = -1, idx_err = -1, idx_in = -1;
    if (out.r >= 0) idx_out = n, fds[n++] = {out.r, POLLIN, 0};
    if (err.r >= 0) idx_err = n, fds[n++] = {err.r, POLLIN, 0};
    if (in.w >= 0 && !have_request) {
      if (auto r = pending()) {
        request = std::move(*r);
        have_request = true;
        if (request.empty()) close_fd(in.w);
      }
    }
    if (in.w >= 0 && have_request) idx_in = n, fds[n++] = {in.w, POLLOUT, 0};
    ::poll(fds, static_cast<nfds_t>(n), 50);

    if (idx_in >= 0 && (fds[idx_in].revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t w = write_no_sigpipe(in.w, request.data() + written, request.size() - written);
      if (w > 0) written += static_cast<std::size_t>(w);
      if ((w < 0 && errno != EAGAIN && errno != EINTR) || written == request.size()) close_fd(in.w);
    }
    if (idx_out >= 0 && (fds[idx_out].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t r = ::read(out.r, buf.data(), buf.size());
      if (r > 0) {
        if (result.out.size() + static_cast<std::size_t>(r) > limits.max_stdout) {
          start_kill(WorkerExit::How::stdout_overflow);
          close_fd(out.r);
        } else {
          result.out.append(buf.data(), static_cast<std::size_t>(r));
        }
      } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
        close_fd(out.r);
      }
    }
    if (idx_err >= 0 && (fds[idx_err].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t r = ::read(err.r, buf.data(), buf.size());
      if (r > 0) append_tail(result.log, result.log_truncated, buf.data(), static_cast<std::size_t>(r), limits.max_log);
      else if (r == 0 || (errno != EAGAIN && errno != EINTR)) close_fd(err.r);
    }

    if (!reaped) {
      pid_t w = ::waitpid(pid, &status, WNOHANG);
      if (w == pid) {
        reaped = true;
        // The worker is gone; whatever it left in its group (compiler pools, a child
        // holding our pipes open) goes with it.
        kill_group(pid, SIGKILL);
      }
    }
    const auto now = Clock::now();
    if (!reaped) {
      if (cancel && cancel->load()) start_kill(WorkerExit::How::cancelled);
      else if (now >= deadline) start_kill(WorkerExit::How::timed_out);
      if (killing && now >= kill_at) kill_group(pid, SIGKILL);
    } else if (out.r >= 0 || err.r >= 0) {
      // Reaped and the group killed: pipes reach EOF at once unless something outside
      // the group holds them; give that a moment, not forever.
      if (kill_at == Clock::time_point{}) kill_at = now + std::chrono::milliseconds(500);
      if (now >= kill_at) close_fd(out.r), close_fd(err.r);
    }
  }
  close_fd(in.w);
  result.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  if (killing) {
    result.how = forced;
  } else if (WIFEXITED(status)) {
    result.how = WorkerExit::How::exited;
    result.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.how = WorkerExit::How::signaled;
    result.signal = WTERMSIG(status);
  }
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

}  // namespace kiln::build
