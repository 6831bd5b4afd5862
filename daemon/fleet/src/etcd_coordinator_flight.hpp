// EtcdCoordinator's private parts shared by its two files (etcd_coordinator.cpp: the
// decisions and the holder's end; etcd_coordinator_lease.cpp: the lease, its keepalive,
// status and metrics). See kiln/fleet/etcd_coordinator.hpp.
#pragma once

#include <unistd.h>

#include <chrono>
#include <ctime>

#include "kiln/fleet/etcd_coordinator.hpp"

namespace kiln::fleet {

namespace coordinator_detail {

using Clock = std::chrono::steady_clock;

inline std::int64_t unix_now() { return static_cast<std::int64_t>(std::time(nullptr)); }

inline std::string short_hex(const std::string& hex) { return hex.substr(0, 16); }

// Outcomes, in the order metrics list them.
inline constexpr const char* kOutcomes[] = {"won", "lost", "expired", "taken_over", "hedged", "failed", "unavailable"};

}  // namespace coordinator_detail

struct EtcdCoordinator::Flight {
  Key key;
  Digest digest;
  std::string hex;
  // Guarded by mu_.
  std::vector<std::function<void(BuildDecision)>> waiters;  // callers waiting for the decision
  bool deciding = true;
  std::uint64_t ticket = 0;    // once decided build_here
  int builders = 0;            // build_here callers whose after_build is still to come
  bool claimed = false;        // this node holds the claim, under `lease`
  std::int64_t lease = 0;
  bool outcome_done = false;   // the build ended (ok or failed); the claim is being released
  bool awaiting_push = false;  // built; the claim goes once the push lands
  bool retry_failed = false;   // a forced caller: the claim clears the fleet's failure record
  // Touched only by the one job that runs this flight's claim or poll at a time.
  std::chrono::milliseconds backoff{0};
  bool counted_lost = false;
  bool warned_malformed = false;
  std::int64_t first_seen = 0;  // unix seconds this node first saw the current claim
  std::int64_t seen_mod = 0;    // its mod revision
};

}  // namespace kiln::fleet
