// kiln/builds/daemon_builds.hpp — kilnd's builds, started from its configuration.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>

#include "kiln/builds/options.hpp"
#include "kiln/builds/scheduler.hpp"
#include "kiln/daemon/build_service.hpp"

namespace kiln::build {

struct DaemonBuilds {
  // Null when builds are off (off_reason says why). Until its probes end, it answers
  // `unavailable`: wait for when_probed() before asking it anything but gpu_report().
  std::unique_ptr<daemon::BuildService> service;
  NodeFields node;         // "this node" so far: `host`; the probes' findings come to when_probed
  std::string off_reason;  // why `service` is null ("" when it is not)
  // With a service: calls f once the scheduler runs, with "this node" as the probes found
  // it (configured fields win), from the probing thread, or at once if it already runs.
  std::function<void(std::function<void(const NodeFields&)>)> when_probed;
};

// Reads [builds] from `config_file` (if any), prepares the scheduler's work folder, and
// starts the scheduler on a thread of its own: it probes the GPUs and the worker's
// toolchain (up to probe_timeout_s) while kilnd already serves. A node without GPU or
// torch still gets a scheduler: it refuses builds with the reason. A read-only store gets
// none (nothing built could be stored); kilnd serves reads. Destroy `service` before
// `store` (it waits for the probes).
// Errors: invalid_argument (bad [builds] options), io_error (config unreadable, work
// folder), busy (another kilnd holds the work folder).
Result<DaemonBuilds> start_daemon_builds(const std::optional<std::filesystem::path>& config_file,
                                         const std::filesystem::path& store_root, storage::Store& store,
                                         const NodeFields& host);

}  // namespace kiln::build
