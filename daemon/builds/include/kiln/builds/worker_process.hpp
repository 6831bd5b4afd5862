// kiln/builds/worker_process.hpp — runs one build worker as a separate process.
//
// The worker gets its request on stdin and answers on stdout (schema/worker-protocol.md);
// its stderr is the build log. It runs in its own process group, so a timeout (or a
// cancel) kills it and everything it started (compiler subprocesses, Inductor's worker
// pools), and so does its normal exit: nothing a worker starts outlives it.
//
// Whatever the worker does — crash, hang, print megabytes, close its pipes, never read its
// request — run_worker returns a WorkerExit describing it; it never throws and never
// affects the calling process beyond the time it waits.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/builds/worker_sandbox.hpp"

namespace kiln::build {

struct WorkerCommand {
  std::vector<std::string> argv;             // argv[0] is looked up in PATH if it has no '/'
  // The worker's environment is an allowlist, never kilnd's own (a CXX, PYTHONPATH or
  // LD_PRELOAD there would change what it compiles or loads, outside the key): PATH =
  // kWorkerPath, LANG = C.UTF-8, kilnd's HOME and TMPDIR, the variables of kilnd's
  // environment named in `pass_env` ([builds] worker_env; none that is_scrubbed_env_var
  // names), then `env` (kilnd's own settings: cache folders, CUDA_VISIBLE_DEVICES, ...),
  // which wins over all of them.
  std::map<std::string, std::string> env;
  // Optional: called once, on the calling thread, right after the worker was spawned and
  // before anything is written to it, with its pid (which is also its process group id;
  // the worker is not reaped before this returns, so the pid cannot have been reused).
  // kilnd records the group here so that a later kilnd can kill it (worker_group.hpp).
  std::function<void(int pid)> on_spawn;
  // Names of kilnd's environment variables the worker gets too (see `env`).
  std::vector<std::string> pass_env;
  // What confines the worker (kiln/builds/worker_sandbox.hpp): on by default, writable only
  // beneath `sandbox.writable` (kilnd adds each build's folder). A sandboxed run whose `env`
  // sets no TMPDIR (the toolchain probe) gets a private one under kilnd's
  // TMPDIR, writable and removed when the run ends. A sandbox that refuses (worker_user
  // without root) makes the run spawn_failed.
  WorkerSandbox sandbox;
};

// The worker's PATH unless [builds] worker_env passes kilnd's own.
inline constexpr std::string_view kWorkerPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// True for a variable that [builds] worker_env may not pass from kilnd's environment:
// those that change what torch.compile, Inductor, Triton or the numerics produce without
// being in the key (TORCHINDUCTOR_*, TRITON_*, TORCHDYNAMO_*, TORCH_COMPILE_*,
// TORCH_INDUCTOR_*, INDUCTOR_*, TORCH_CUDA_ARCH_LIST, NVIDIA_TF32_OVERRIDE,
// TORCH_ALLOW_TF32_CUBLAS_OVERRIDE, CUBLAS_WORKSPACE_CONFIG), the compilers (CXX, CC,
// CXXFLAGS, CFLAGS, LDFLAGS, CPPFLAGS), what the worker's Python and loader load
// (PYTHONPATH, PYTHONHOME, PYTHONSTARTUP, LD_PRELOAD, LD_AUDIT) and the worker's own
// re-exec mark (KILN_WORKER_PRELOADED). WorkerCommand::env may still set any of them (kilnd
// sets the cache folders).
bool is_scrubbed_env_var(std::string_view name);

struct WorkerLimits {
  std::chrono::milliseconds timeout{30 * 60 * 1000};
  std::chrono::milliseconds kill_grace{2000};  // SIGTERM to the group, then SIGKILL after this
  std::size_t max_stdout = 1u << 20;           // more is garbage: the worker is killed
  std::size_t max_log = 1u << 20;              // stderr kept: the LAST this many bytes
};

struct WorkerExit {
  enum class How { exited, signaled, timed_out, cancelled, stdout_overflow, spawn_failed };
  How how = How::spawn_failed;
  int code = -1;              // exit status when exited
  int signal = 0;             // when signaled
  std::string out;            // stdout, at most max_stdout bytes
  std::string log;            // stderr, the last max_log bytes
  bool log_truncated = false;
  double seconds = 0;         // wall time from spawn to reaped
  std::string spawn_error;    // when spawn_failed
  std::string sandbox;        // what confined it (SandboxPlan::description)

  bool clean_exit() const { return how == How::exited && code == 0; }
  // "exited with status 1", "killed by signal 11 (Segmentation fault)",
  // "timed out after 30.0 s; its process group was killed", ...
  std::string describe() const;
};

// Runs the worker to completion (or timeout / cancel) and reaps it. `cancel`, if given,
// is polled about every 50 ms; when it becomes true the worker's group is killed.
// Thread safety: reentrant; many workers may run at once from different threads.
WorkerExit run_worker(const WorkerCommand& command, std::string_view request, const WorkerLimits& limits,
                      const std::atomic<bool>* cancel = nullptr);

// The same with a request that is not ready when the worker starts: `request` is polled
// (about every 50 ms, from the calling thread) until it returns the request, which is then
// written to the worker's stdin. kilnd uses this to prepare a build's source while the
// worker starts Python and imports torch. To give up, set `cancel`.
using PendingRequest = std::function<std::optional<std::string>()>;
WorkerExit run_worker(const WorkerCommand& command, const PendingRequest& request, const WorkerLimits& limits,
                      const std::atomic<bool>* cancel = nullptr);

}  // namespace kiln::build
