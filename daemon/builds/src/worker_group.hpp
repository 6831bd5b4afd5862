// A running worker's process group, recorded in its job folder so that a kilnd started
// after a killed one can stop what that one's workers left running (schema/worker-protocol.md,
// "The job folder").
//
// Why: a worker runs in its own process group (worker_process.hpp), so nothing ties it to
// kilnd. When kilnd is SIGKILLed or crashes, its workers (Python holding a GPU, Inductor's
// compile subprocesses in the same group) keep running. The record names the group and
// its leader's start time; the start-up sweep kills the group only when a process with
// that pid AND that start time still exists, so a pid the kernel has since given to some
// unrelated process is never signalled. Without a record nothing is killed.
//
// Callers: run_build writes the record right after the worker is spawned; BuildScheduler::
// create calls kill_leftover_group for each job folder before removing it, while holding
// work_dir/LOCK (so no live kilnd owns the folder). Thread safety: free functions, no state.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>

#include "kiln/result.hpp"

namespace kiln::build {

inline constexpr const char* kWorkerGroupFile = "worker.pgid";

// Field 22 of /proc/<pid>/stat (start time, clock ticks since boot); nullopt when the
// process is gone or its stat cannot be read or parsed.
std::optional<std::uint64_t> process_start_time(pid_t pid);

// Writes <job_dir>/worker.pgid ("<pgid> <start time>\n") atomically (temp + rename).
// `pgid` is the worker's pid (it leads its own group) and must not be reaped yet.
// io_error: the file cannot be written; not_found: the process is already gone.
[[nodiscard]] Status write_worker_group(const std::filesystem::path& job_dir, pid_t pgid);

enum class LeftoverGroup {
  no_record,   // no (readable, well-formed) record: nothing is killed
  gone,        // the recorded leader no longer exists
  reused,      // a process has that pid, but started at another time: not ours, left alone
  killed,      // the group was SIGKILLed and is gone
  lingering,   // SIGKILLed, but members were still there after `wait` (e.g. unreaped zombies)
};

// If <job_dir>/worker.pgid names a group whose leader still runs with the recorded start
// time, SIGKILLs the whole group and polls (every 10 ms, up to `wait`) until it is gone.
// Logs one warning per group killed. Never removes anything; the caller removes the folder.
LeftoverGroup kill_leftover_group(const std::filesystem::path& job_dir,
                                  std::chrono::milliseconds wait = std::chrono::milliseconds(2000));

}  // namespace kiln::build
