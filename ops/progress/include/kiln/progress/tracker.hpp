// kiln/progress/tracker.hpp — what a batch of builds (kilnctl prewarm) is doing: counts of
// outcomes, what runs, and an estimate of the time left. Pure bookkeeping; the caller
// passes the time in, so tests drive it with made-up clocks.
//
// Thread safety: not safe for concurrent use; the caller serializes events.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace kiln::progress {

enum class Outcome {
  built,    // built by this run
  present,  // already in the store (a hit): nothing to build
  failed,   // the build (or the request) failed
};
const char* outcome_name(Outcome o) noexcept;  // "built", "present", "failed"

struct Finished {
  std::size_t item = 0;
  std::string label;
  Outcome outcome = Outcome::built;
  double seconds = 0;   // the build's own duration (0 for present)
  std::string detail;   // the error for failed; the key digest otherwise
};

struct RunningItem {
  std::string label;
  double seconds = 0;   // running for
};

struct Snapshot {
  std::size_t total = 0, built = 0, present = 0, failed = 0, running = 0, queued = 0;
  double elapsed = 0;
  std::optional<double> eta;            // seconds; nullopt until a build has finished
  std::vector<RunningItem> running_items;  // longest running first
  std::vector<Finished> recent_failures;   // newest last, at most 3
  std::size_t done() const { return built + present + failed; }
};

// Items are numbered 0..total-1 and start queued.
class Tracker {
 public:
  // `parallelism`: how many builds the node runs at once (its GPUs); used for the ETA
  // until more than that are seen running together.
  Tracker(std::size_t total, std::vector<std::string> labels, double start_time, std::size_t parallelism = 1);

  void started(std::size_t item, double now);  // queued -> running
  // running or queued -> finished. A second finish of one item is ignored.
  void finished(std::size_t item, Outcome outcome, double build_seconds, std::string detail, double now);

  Snapshot snapshot(double now) const;
  const std::vector<Finished>& finished_items() const { return finished_; }
  bool all_done() const { return finished_.size() == labels_.size(); }

 private:
  enum class State { queued, running, done };
  std::vector<std::string> labels_;
  std::vector<State> state_;
  std::vector<double> started_at_;
  std::vector<Finished> finished_;
  double start_;
  std::size_t parallelism_;
  std::size_t running_ = 0;
  std::size_t max_running_ = 0;
  double build_seconds_sum_ = 0;  // over builds that ran to an outcome (built or failed)
  std::size_t builds_timed_ = 0;
};

}  // namespace kiln::progress
