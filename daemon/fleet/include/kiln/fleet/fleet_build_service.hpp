// kiln/fleet/fleet_build_service.hpp — the fleet in front of the node's builds: a
// BuildService (kiln/daemon/build_service.hpp) that, for a key the store lacks, looks in
// the registry first (pull, verify, store), fetches a missing source from the registry,
// and only then asks the inner service to build. A finished build's push was queued by
// the store with the artifact (StoreOptions::push_outbox); this wakes the pusher.
// Prewarms (submit: PREWARM_SUBMIT, BUILD without wait) take the same way, key by key, at
// prewarm priority; BUILD_STATUS answers for their handles ("f<n>").
//
// Forced builds (EnsureOptions::force): a key this node lacks takes the same way too, the
// registry first, then one build for the fleet that retries a failure the fleet recorded
// (RecentFailure::retry), so `kilnctl prewarm --force` on every node builds each missing
// key once. A key this node holds is rebuilt here, and the rebuild serves this node only:
// the registry's copy of a key is never replaced (the first push wins, and other nodes
// serve those bytes), so there is nothing a rebuild elsewhere could hand this node.
//
// Fleet-wide build coordination: a BuildCoordinator, when set, decides before a key the
// registry lacks is built here (kiln/fleet/etcd_coordinator.hpp implements it with etcd).
//
// Thread safety: as BuildService. The inner service and the Fleet must outlive this; the
// coordinator must outlive every build this service started (kilnd stops it last).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "kiln/daemon/build_service.hpp"
#include "kiln/fleet/fleet.hpp"

namespace kiln::fleet {

// Whether a claim may be made over the fleet's record of a recent failure of the key.
enum class RecentFailure {
  respect,  // answer the recorded failure (build_failed) without building
  retry,    // a forced build (BUILD or PREWARM_SUBMIT with force): build once more for the fleet
};

// What a node does with a key the registry lacks.
struct BuildDecision {
  enum class Action {
    build_here,  // build it on this node
    pull,        // another node built it: it is in the registry now
    fail,        // answer `failure` (the fleet's build failed; or kilnd is stopping)
  };
  Action action = Action::build_here;
  Status failure;               // fail: build_failed with the failed build's message, or cancelled
  std::uint64_t ticket = 0;     // build_here: hand it back to after_build()
};

class BuildCoordinator {
 public:
  virtual ~BuildCoordinator() = default;
  // Called on a fleet thread for a key this node lacks and the registry lacked a moment
  // ago. `proceed` is called exactly once, from any thread, possibly inside this call,
  // and must not block. It never waits on the coordinator for long: an unreachable
  // coordinator means build_here. With RecentFailure::retry a failure the fleet recorded
  // before this call does not answer it; one recorded while it waits (another node's
  // build, retried for it) does.
  virtual void before_build(const Key& key, const Digest& key_digest, RecentFailure recent_failure,
                            std::function<void(BuildDecision)> proceed) = 0;
  // After every build_here decision, exactly once: what that caller's build ended with
  // (ok: stored; build_failed: the build failed; anything else: this caller stopped
  // waiting). Any thread; must not block.
  virtual void after_build(std::uint64_t ticket, const Status& outcome) = 0;
  // Runs `job` on a coordinator thread at `when` (a waiter's wait_ms runs out while it
  // waits for another node). Dropped once the coordinator is stopping.
  virtual void call_at(std::chrono::steady_clock::time_point when, std::function<void()> job) = 0;
};

std::unique_ptr<daemon::BuildService> make_fleet_build_service(daemon::BuildService& inner, Fleet& fleet,
                                                               BuildCoordinator* coordinator = nullptr);

}  // namespace kiln::fleet
