// Runs one build to its outcome: the source materialized, the worker run, its answer
// checked, the artifact stored, the outcome and log recorded. Internal to kiln_daemon_build.
#pragma once

#include <atomic>
#include <cstdint>

#include "kiln/build/scheduler.hpp"

namespace kiln::build {

struct BuildJobSpec {
  Key key;
  Digest digest;
  bool force = false;
  std::uint64_t seq = 0;        // unique per scheduler: names the scratch folder
};

struct BuildRunResult {
  Result<storage::ArtifactInfo> info = make_error(Errc::internal, "not run");
  bool ran_worker = false;      // false: answered from the store, the negative cache, or refused
};

// Blocks until the build is done. Records the outcome (Store::record_build) when a worker
// ran and was not cancelled. Never throws.
BuildRunResult run_build(storage::Store& store, const SchedulerOptions& options, const SlotConfig& slot,
                         const BuildJobSpec& job, const std::atomic<bool>& cancel);

// A recent failure of this key still inside `ttl`, as the error to answer with; nullopt
// when there is none (or ttl is 0).
std::optional<Error> recent_failure(storage::Store& store, const Digest& digest, std::chrono::seconds ttl);

}  // namespace kiln::build
