// kiln/daemon/fleet_service.hpp — the seam between the socket server and the fleet tier
// (daemon/fleet/): the OCI registry a fleet of nodes shares artifacts through. The server
// calls it; kiln_daemon_fleet implements it.
//
// Without a FleetService (nullptr) a miss is a miss (or a build) and STATUS reports no
// fleet. Builds reach the registry through the BuildService the fleet wraps
// (kiln/fleet/fleet_build_service.hpp), not through this interface.
//
// Thread safety: every method may be called from any thread, concurrently, and must not
// block on the network: fetch() reports through its callback, from any thread.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kiln/digest.hpp"
#include "kiln/protocol/messages.hpp"
#include "kiln/result.hpp"

namespace kiln::daemon {

class FleetService {
 public:
  virtual ~FleetService() = default;

  // Looks for `key_digest` in the registry: pulls it, verifies its signature and every
  // digest, and stores it. done(true) once it is in the local store; done(false) when the
  // registry lacks it, pulls are off, the registry cannot be reached, or what it holds was
  // refused (each logged and counted). Concurrent fetches of one key share one pull.
  virtual void fetch(const Digest& key_digest, std::function<void(bool stored)> done) = 0;
  // Whether fetch() looks in the registry at all ([fleet] pull); false: it answers false at once.
  virtual bool pulls() const = 0;
  // The store's outbox has a new row (a torch cache entry stored with Publish::yes): the
  // pusher looks now rather than at its next poll (every 5 s). Cheap; never blocks.
  virtual void outbox_grew() = 0;
  // kilnd is stopping (SIGTERM): registry work in flight ends at once, queued and later
  // fetches answer false without asking, no registry request starts after it, and queued
  // pushes stay queued for the next start. Returns at once; idempotent.
  virtual void stop() {}

  // The fleet's state for STATUS, as a JSON object (schema/protocol.md, "fleet"). Cheap:
  // no network call (reachability is the last request's outcome).
  virtual std::string status_json() const = 0;
  // Prometheus text lines (kiln_fleet_*), appended to kilnd's /metrics.
  virtual std::string metrics_text() const = 0;

  // The operator's transfers (FLEET_PUSH, FLEET_PULL, FLEET_PRUNE; schema/protocol.md).
  // Each runs on the fleet's own thread, one at a time in the order asked, and reports
  // once through `done`, from that thread. While one runs, status_json() has its
  // "transfer" progress. unsupported when the node's [fleet] does not allow it (push or
  // pull off, no signing key); unavailable when the registry cannot be reached; cancelled
  // when kilnd stops first.
  //
  // push: queues `keys` (stored artifacts) on the durable push queue; with `wait`, reports
  // once each is in the registry or an attempt at it has failed (it stays queued).
  virtual void push(std::vector<Digest> keys, bool wait,
                    std::function<void(Result<protocol::FleetPushReply>)> done) = 0;
  // pull: every artifact in the repository that matches the filters and is not stored
  // here, pulled and verified as a miss's pull is.
  virtual void pull(protocol::FleetPullRequest request,
                    std::function<void(Result<protocol::FleetPullReply>)> done) = 0;
  // prune: deletes the matching artifact manifests (and their signatures) created before
  // now minus older_than_s; the registry's garbage collection frees the blobs.
  virtual void prune(protocol::FleetPruneRequest request,
                     std::function<void(Result<protocol::FleetPruneReply>)> done) = 0;
};

}  // namespace kiln::daemon
