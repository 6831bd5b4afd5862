// Runs one build to its outcome: the source materialized, the worker run, its answer
// checked, the artifact stored, the outcome and log recorded. Internal to kiln_daemon_builds.
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>

#include "kiln/builds/scheduler.hpp"
#include "source_copies.hpp"

namespace kiln::build {

struct BuildJobSpec {
  Key key;
  Digest digest;
  bool force = false;
  std::uint64_t seq = 0;        // unique per scheduler: names the scratch folder
};

// Set by the scheduler to stop a build: its worker's process group is killed (as for a
// timeout) and the build ends with Errc::cancelled.
struct BuildCancel {
  std::atomic<bool> requested{false};
  std::atomic<bool> unwanted{false};   // why: nobody wants it any more (false: shutdown)
  std::atomic<bool> set_aside{false};  // why: an idle build gives its slot to another build
};

struct BuildRunResult {
  Result<storage::ArtifactInfo> info = make_error(Errc::internal, "not run");
  bool ran_worker = false;      // false: answered from the store, the negative cache, or refused
  bool cancelled = false;       // stopped through BuildCancel (info is Errc::cancelled)
};

// A build record whose error starts with this was cancelled, not failed: it keeps the log
// (`kilnctl logs`) but is no negative-cache entry.
inline constexpr std::string_view kCancelledRecordPrefix = "cancelled: ";

// Blocks until the build is done. Records the outcome (Store::record_build) when a worker
// ran, except for a cancel at shutdown. The build's scratch folder (work_dir/jobs/...) is
// removed in every outcome (a failed one's is kept with keep_failed_work) and its lease on
// the source copy released. Never throws.
BuildRunResult run_build(storage::Store& store, const SchedulerOptions& options, SourceCopies& sources,
                         const SlotConfig& slot, const BuildJobSpec& job, const BuildCancel& cancel);

// A recent failure of this key still inside `ttl`, as the error to answer with; nullopt
// when there is none (or ttl is 0). Cancelled builds are not failures.
std::optional<Error> recent_failure(storage::Store& store, const Digest& digest, std::chrono::seconds ttl);

}  // namespace kiln::build
