// Prewarms (PREWARM_SUBMIT, BUILD without wait) on a node of a fleet: each key goes the
// fleet's way — the registry first, then the coordinator's one build per key across the
// fleet, and only then a build here, at prewarm priority — instead of straight to the
// node's scheduler. A prewarm run on every node of a fleet builds each key once per node
// class; the other nodes of that class take it from the registry.
//
// This keeps the submissions' handles and states for BUILD_STATUS, as the scheduler does
// for its own ("f<n>" here, "p<n>" there). A key's state is "queued" while the fleet
// decides (its progress says so), "running" once it builds on this node, then "done"
// (progress: built here, or taken from the registry) or "failed".
//
// Forced (`force`): a key this node lacks goes the same way, retrying a failure the fleet
// recorded once for the fleet; a key it holds is rebuilt here, for this node only
// (kiln/fleet/fleet_build_service.hpp says why).
//
// Thread safety: every method from any thread; callbacks from any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kiln/daemon/build_service.hpp"
#include "kiln/storage/store.hpp"

namespace kiln::fleet {

class FleetSubmissions {
 public:
  // `route` is the fleet's BuildService, whose ensure() each missing key is handed to.
  FleetSubmissions(daemon::BuildService& route, storage::Store& store) : route_(route), store_(store) {}

  // As BuildService::submit.
  Result<protocol::PrewarmReply> submit(const std::vector<Key>& keys, const daemon::SubmitOptions& options,
                                          daemon::BuildService::EventSink sink);
  // BUILD_STATUS by one of this object's handles; nullopt for any other request.
  std::optional<protocol::BuildStatusReply> status(const protocol::BuildStatusRequest& request) const;

 private:
  struct Submission;
  static void finish(const std::shared_ptr<Submission>& sub, std::size_t i, const Status& outcome,
                     std::optional<protocol::ArtifactMeta> info);

  daemon::BuildService& route_;
  storage::Store& store_;
  mutable std::mutex mu_;
  std::uint64_t next_ = 0;                                      // guarded by mu_
  std::map<std::string, std::shared_ptr<Submission>> handles_;  // guarded by mu_; the newest 1024
  std::deque<std::string> order_;                               // guarded by mu_; oldest first
};

}  // namespace kiln::fleet
