// Starting a worker process confined by its SandboxPlan. Internal to kiln_daemon_builds.
//
// Why not posix_spawn: the sandbox (no_new_privs, Landlock, seccomp, the user switch) must be
// applied in the child between fork and exec, and posix_spawn has no hook for that.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "kiln/builds/worker_sandbox.hpp"
#include "kiln/result.hpp"

namespace kiln::build {

// Runs argv (argv[0] looked up in kilnd's PATH when it has no '/') with exactly `env` as
// its environment, fds in/out/err as its stdin/stdout/stderr, in a new process group of
// its own (pgid = its pid), with default signal dispositions and an empty signal mask,
// and `plan` applied. Returns its pid once it has exec'd. Errors (io_error, not_found)
// name the program and the step that failed: the sandbox's or exec's. Reentrant: it
// forks a multi-threaded process, so the child makes system calls only.
[[nodiscard]] Result<pid_t> spawn_confined(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                                           int in, int out, int err, const SandboxPlan& plan);

}  // namespace kiln::build
