// kiln/fleet/fleet_build_service.hpp — the fleet in front of the node's builds: a
// BuildService (kiln/daemon/build_service.hpp) that, for a key the store lacks, looks in
// the registry first (pull, verify, store), fetches a missing source from the registry,
// and only then asks the inner service to build. A finished build's push was queued by
// the store with the artifact (StoreOptions::push_outbox); this wakes the pusher.
//
// Seam for fleet-wide build coordination (etcd, to come): a BuildCoordinator, when set,
// is asked before a key the registry lacks is built here.
//
// Thread safety: as BuildService. The inner service and the Fleet must outlive this.
#pragma once

#include <functional>
#include <memory>

#include "kiln/daemon/build_service.hpp"
#include "kiln/fleet/fleet.hpp"

namespace kiln::fleet {

// Decides whether this node builds a key the registry lacks (a fleet-wide claim). Called
// on a fleet thread; `proceed(true)` builds here, `proceed(false)` means another node
// builds it and the caller should look in the registry again. Not implemented yet.
class BuildCoordinator {
 public:
  virtual ~BuildCoordinator() = default;
  virtual void before_build(const Key& key, const Digest& key_digest, std::function<void(bool build_here)> proceed) = 0;
};

std::unique_ptr<daemon::BuildService> make_fleet_build_service(daemon::BuildService& inner, Fleet& fleet,
                                                               BuildCoordinator* coordinator = nullptr);

}  // namespace kiln::fleet
