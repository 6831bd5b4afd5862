// A PUT_SOURCE's bytes held in work_dir/checks, and the worker's `hash` op that verifies
// them before anything is stored (kiln/daemon/build_service.hpp, SourceCheck;
// schema/sources.md). Internal to kiln_daemon_builds.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "kiln/builds/worker_process.hpp"
#include "kiln/daemon/build_service.hpp"
#include "kiln/result.hpp"

namespace kiln::build {

// One check's work, run on a scheduler check thread: `cancel` is set at shutdown.
using CheckWork = std::function<Status(const std::atomic<bool>* cancel)>;
// Queues `work`; `done` gets its outcome (or Errc::cancelled if it never runs).
using CheckQueue = std::function<void(CheckWork work, std::function<void(Status)> done)>;

// Blocking: runs `worker`'s hash op on `file` (bounded by `timeout`) and returns the model
// hash it prints; compared with `model_hash` unless that is empty. Errors as
// SourceCheck::verify says.
Result<std::string> verify_source_file(const WorkerCommand& worker, const std::filesystem::path& file,
                                       const std::string& model_hash, std::chrono::milliseconds timeout,
                                       const std::atomic<bool>* cancel);

// A new, empty check file in `dir` (created), whose checks run through `queue`.
Result<std::unique_ptr<daemon::SourceCheck>> make_source_check(const std::filesystem::path& dir, WorkerCommand worker,
                                                               std::chrono::milliseconds timeout, CheckQueue queue);

}  // namespace kiln::build
