// kiln/builds/daemon_builds.hpp — kilnd's builds, started from its configuration.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>

#include "kiln/builds/options.hpp"
#include "kiln/builds/scheduler.hpp"
#include "kiln/daemon/build_service.hpp"

namespace kiln::build {

struct DaemonBuilds {
  std::unique_ptr<BuildScheduler> scheduler;       // null when [builds] enabled = false
  std::unique_ptr<daemon::BuildService> service;   // null when disabled
  NodeFields node;                                 // "this node": host + what the probes found
  std::string off_reason;                          // why `service` is null ("" when it is not)
};

// Reads [builds] from `config_file` (if any), probes the GPUs and the worker's toolchain
// (this waits for the worker, up to probe_timeout_s), and starts the scheduler. A node
// without GPU or torch still gets a scheduler: it refuses builds with the reason. A
// read-only store gets none (nothing built could be stored); kilnd serves reads.
// Destroy `service` before `scheduler`, and both before `store`.
// Errors: invalid_argument (bad [builds] options), io_error (config unreadable, work folder).
Result<DaemonBuilds> start_daemon_builds(const std::optional<std::filesystem::path>& config_file,
                                         const std::filesystem::path& store_root, storage::Store& store,
                                         const NodeFields& host);

}  // namespace kiln::build
