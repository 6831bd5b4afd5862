// kiln/fleet/etcd_coordinator.hpp — one build per key across the fleet, through etcd
// (schema/etcd-coordination.md). Implements BuildCoordinator (fleet_build_service.hpp).
//
// Before a node builds a key the registry lacks, it claims it: a transaction creates
// "<prefix>/claim/<key digest>" under the node's lease unless a claim or a failure record
// exists. The node that wins builds; the others wait (they look at etcd, then at the
// registry, backing off to poll_max) and pull the artifact once it is in the registry.
// The holder keeps its lease alive while it runs and deletes its claim once its push has
// landed, so a waiter never finds the claim gone and the artifact missing unless the
// holder gave up or died.
//  - The holder dies or is cut off from etcd: its lease expires after lease_ttl, etcd
//    deletes its claims, a waiter claims the key and builds. The cut-off holder's build
//    goes on; its push is accepted (a push of a key the registry already holds from a
//    trusted signer is skipped), and its release deletes only a claim under its own lease.
//  - The holder runs past its claim's deadline (start + build timeout + lease TTL): a waiter takes
//    the claim over (compare-and-set on the claim's revision) and builds.
//  - The holder runs past hedge_factor × the key's expected build time: one waiter per
//    node builds too (a hedge), without a claim; the first push wins.
//  - The build fails: the holder writes "<prefix>/failed/<key digest>" (the build's last
//    error line) under a lease of the failure TTL and deletes its claim in one
//    transaction; every waiter, and every node that asks within that TTL, gets the
//    failure (build_failed) without building. A forced build (RecentFailure::retry)
//    claims over the record and deletes it in the same transaction: one node retries for
//    the fleet, and the others, forced or not, wait for that retry.
//  - etcd cannot be reached (or answers nonsense): the node builds as if alone (per-node
//    single flight), with a warning and kiln_fleet_claims_total{outcome="unavailable"}.
//    No request waits on etcd for more than coordinator_timeout per endpoint, and once a
//    request failed, decisions do not ask etcd at all until the claims listing (every
//    third of lease_ttl) hears from it again.
//
// Per node, one decision per key at a time: concurrent before_build calls for one key
// share it (and then the scheduler's single flight shares the build).
//
// Threads: one keeps the lease alive, on a beat nothing else delays; one lists the fleet's
// claims (status, and this node's orphans released); two run the claims and the waiters'
// polls. Callbacks are called on the last two.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kiln/fleet/claim_record.hpp"
#include "kiln/fleet/etcd_client.hpp"
#include "kiln/fleet/fleet.hpp"
#include "kiln/fleet/fleet_build_service.hpp"

namespace kiln::fleet {

struct CoordinatorOptions {
  std::vector<std::string> endpoints;          // etcd, "http://host:port"
  std::string prefix = "kiln";
  std::string node_name;                       // "" = the host name
  std::chrono::seconds lease_ttl{10};
  std::chrono::milliseconds timeout{1000};     // per etcd request and endpoint
  std::chrono::milliseconds poll_min{50};      // a waiter's first look again; doubles...
  std::chrono::milliseconds poll_max{1000};    // ...up to this
  double hedge_factor = 4;                     // 0 = never hedge
  std::chrono::seconds expected_build{600};    // when the store knows no build time for the model and region
  std::chrono::seconds build_timeout{1800};    // [builds] build_timeout_s: a claim lasts this + lease_ttl
  std::chrono::seconds failure_ttl{600};       // [builds] failure_ttl_s: how long the fleet remembers a failure
};

// The options from [fleet] (and [builds]' timeouts, given by kilnd).
CoordinatorOptions coordinator_options(const FleetConfig& config, std::chrono::seconds build_timeout,
                                       std::chrono::seconds failure_ttl);

class EtcdCoordinator final : public BuildCoordinator, public FleetObserver {
 public:
  // Checks the endpoints' syntax (invalid_argument), attaches to `fleet` as its observer
  // and starts the threads. Does not contact etcd: an unreachable etcd is not an error
  // (the node builds alone until it answers).
  static Result<std::unique_ptr<EtcdCoordinator>> start(const CoordinatorOptions& options, Fleet& fleet);
  // Stops (as stop()).
  ~EtcdCoordinator() override;

  // Stops the threads, answers every caller still waiting for a decision with cancelled,
  // detaches from the Fleet and revokes the lease (this node's claims go at once, so
  // waiters elsewhere claim at once). Afterwards before_build answers build_here and
  // after_build does nothing. Call before the Fleet is destroyed. Idempotent.
  void stop();

  // BuildCoordinator
  void before_build(const Key& key, const Digest& key_digest, RecentFailure recent_failure,
                    std::function<void(BuildDecision)> proceed) override;
  void after_build(std::uint64_t ticket, const Status& outcome) override;
  void call_at(std::chrono::steady_clock::time_point when, std::function<void()> job) override { schedule(when, std::move(job)); }
  // FleetObserver
  void pushed(const std::string& subject) override;
  std::string status_json() const override;
  std::string metrics_text() const override;

 private:
  struct Flight;
  EtcdCoordinator(CoordinatorOptions options, std::unique_ptr<EtcdClient> etcd, Fleet& fleet);

  // Jobs for the worker threads, run at or after `when`.
  void schedule(std::chrono::steady_clock::time_point when, std::function<void()> job);
  void worker_loop();
  void keepalive_loop();
  void claims_loop();
  std::chrono::milliseconds refresh_period() const;
  // Waits until `until` or stop(); false once stopping.
  bool wait_period(std::chrono::steady_clock::time_point until);

  // The claim attempt, and a waiter's look again.
  void try_claim(const std::shared_ptr<Flight>& f);
  void poll(const std::shared_ptr<Flight>& f);
  // Acts on a claim held by someone else: take over, hedge, or wait.
  void watch_claim(const std::shared_ptr<Flight>& f, const EtcdKeyValue& claim);
  void resolve(const std::shared_ptr<Flight>& f, BuildDecision d);
  void build_alone(const std::shared_ptr<Flight>& f, const Error& why);
  // true (and decided build_here) while etcd is known to be down.
  bool skip_etcd(const std::shared_ptr<Flight>& f);
  // Deletes a claim if it is still under `lease`; writes a failure record with it.
  void release(const std::string& key_hex, std::int64_t lease);
  void record_failure(const std::string& key_hex, std::int64_t lease, const std::string& message);

  Result<std::int64_t> lease();   // this node's lease, granted when there is none
  void drop_lease(std::int64_t lease, const char* why);
  std::int64_t expected_seconds(const Key& key);
  std::int64_t claim_deadline(std::int64_t now) const;
  void note_etcd(const Status& st);

  const CoordinatorOptions options_;
  const std::unique_ptr<EtcdClient> etcd_;
  Fleet& fleet_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;                                          // guarded by mu_
  std::multimap<std::chrono::steady_clock::time_point, std::function<void()>> jobs_;  // guarded by mu_
  std::map<std::string, std::shared_ptr<Flight>> flights_;         // by key hex; guarded by mu_
  std::map<std::uint64_t, std::shared_ptr<Flight>> tickets_;       // guarded by mu_
  // Keys whose failed build's record is being written: their flight is gone, but the claim
  // in etcd is still ours until record_failure() replaces it. Guarded by mu_.
  std::set<std::string> recording_failure_;
  std::uint64_t next_ticket_ = 1;                                  // guarded by mu_
  std::vector<std::thread> threads_;

  std::mutex lease_mu_;
  std::int64_t lease_ = 0;                                         // guarded by lease_mu_
  std::chrono::steady_clock::time_point lease_ok_;                 // last answer for it; guarded by lease_mu_

  // Status and metrics; guarded by stats_mu_.
  mutable std::mutex stats_mu_;
  struct ClaimView {
    std::string key_hex, node;
    std::int64_t started = 0;
    bool mine = false;
  };
  std::vector<ClaimView> claims_;
  bool up_ = true;
  std::string last_error_;
  std::map<std::string, std::uint64_t> counts_;  // by outcome
  void count(const char* outcome);
};

}  // namespace kiln::fleet
