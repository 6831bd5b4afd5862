// The work of `kilnctl prewarm`, apart from its command line and its display: stat every
// planned key, register the sources that missing keys need, submit the missing keys at
// once (PREWARM_SUBMIT: kilnd spreads them over its GPUs), and follow them (BUILD_STATUS)
// until each is built or failed, feeding a progress Tracker.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "kiln/client/client.hpp"
#include "kiln/prewarm/manifest.hpp"
#include "kiln/progress/tracker.hpp"

namespace kiln::ctl {

struct PrewarmOptions {
  bool force = false;                                   // rebuild keys that are stored
  std::chrono::milliseconds poll{200};                  // BUILD_STATUS interval
};

struct PrewarmItem {
  std::string label;
  std::string key_digest;      // empty when the daemon found the key invalid
  progress::Outcome outcome = progress::Outcome::failed;
  double seconds = 0;          // build time for built items
  std::string error;
  // Where a built item came from, as kilnd's BUILD_STATUS says it ("built on this node", or
  // on a node of a fleet "taken from the registry (built by another node, or before)").
  std::string where;
};

struct PrewarmOutcome {
  std::vector<PrewarmItem> items;   // in manifest order
  std::size_t duplicates = 0;
  double elapsed = 0;
  std::size_t count(progress::Outcome o) const;
};

// Called after every change with the tracker's state, and once per finished item.
struct PrewarmObserver {
  std::function<void(const progress::Tracker&, double now)> tick;
  std::function<void(const progress::Finished&)> finished;
};

// Seconds on a monotonic clock; the tracker's time base.
double monotonic_seconds();

// Errors (the run stops): unsupported (kilnd has no build scheduler, or, outside a fleet,
// the node cannot build: "this node cannot build: " and STATUS's reason), unavailable (kilnd
// went away), permission_denied (this user may not build), a source file unreadable.
// Failed builds are not errors: they are items with outcome failed.
Result<PrewarmOutcome> run_prewarm(client::Client& client, const prewarm::Manifest& manifest,
                                   const PrewarmOptions& options, const PrewarmObserver& observer);

}  // namespace kiln::ctl
