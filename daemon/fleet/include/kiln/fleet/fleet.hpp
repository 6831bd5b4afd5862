// kiln/fleet/fleet.hpp — a node's membership in a fleet: pulls from the registry (signature
// and every digest verified, single flight per key), a durable push queue drained in the
// background with backoff, status and metrics. Implements the server's seam
// kiln/daemon/fleet_service.hpp.
//
// Pull order of checks (schema/signature.md): the manifest under the key-digest tag; its
// config parsed as a key whose digest must equal the tag and annotation; a signature
// manifest under cosign's tag sha256-<manifest hex>.sig whose payload names this manifest
// digest AND this subject, signed by a trusted key; the layer streamed into the store,
// its size and SHA-256 checked on the way. Anything else is a refusal: logged, counted
// by reason, never stored; the miss is answered as a miss (or built, where the node builds).
//
// Bounds on a miss: its whole registry lookup (manifest, signature, config, layer) ends
// within pull_timeout of the miss's arrival, however the registry trickles or hangs, and a
// miss that waited for a pull worker past that is answered at once. A registry that was
// late or failing (unreachable, timeout, registry_error, unauthorized) is not asked by
// misses for kPullPause after it (counted as skipped). Manifests are bounded before they
// are parsed (src/manifest_bounds.hpp: size, nesting depth, layers); tag listings in pages
// and bytes (RegistryClient::tags).
//
// stop(): registry work in flight ends within about 50 ms (cancelled), queued pulls answer
// as misses, and no registry request starts after it; a push cut short stays queued.
//
// Push of "artifact:<key digest>": the artifact's source first (if the registry lacks it),
// then config and layer blobs, then the signature, then the manifest's tag, so a tag never
// points at an unsigned manifest. A key the registry already holds (signed by a trusted
// key) is not pushed again, but for torch cache entries torch rewrites (Dynamo PGO,
// autotune): their last writer wins fleet-wide (schema/torch-cache.md, "The fleet").
//
// torch cache entries (kind torch_cache) from the registry are taken only with a trusted
// signature, whatever require_signatures says: torch unpickles them.
//
// The operator's transfers (push / pull / prune by filter, fleet_admin.cpp) run one at a
// time on their own thread; pulls among them fan out over the pull workers.
//
// Threads: `pull_threads` pull workers, one pusher, one for the operator's transfers.
// Destroy the Fleet before the Store.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kiln/daemon/fleet_service.hpp"
#include "kiln/fleet/options.hpp"
#include "kiln/fleet/registry_client.hpp"
#include "kiln/fleet/signature.hpp"
#include "kiln/oci/mapping.hpp"
#include "kiln/storage/store.hpp"

namespace kiln::fleet {

// Why something from the registry was not used (metrics label, status, logs).
struct PushParts;  // fleet_push.cpp
template <class T>
class SingleFlight;  // src/single_flight.hpp

// unsigned_ .. corrupt: what the registry holds fails a check; truncated: a body cut short;
// missing: a blob the manifest names is not in the registry (404); over_limit: past a
// bound on manifests or listings; unauthorized: the registry refused the node's
// credentials (401/403); registry_error: it answered an error (5xx, a redirect loop, an
// unexpected status); timeout: no answer within pull_timeout or io_timeout; unreachable:
// no connection.
enum class Refusal {
  unsigned_, unknown_signer, bad_signature, wrong_subject, corrupt, truncated, missing, over_limit,
  unauthorized, registry_error, timeout, unreachable
};
inline constexpr Refusal kRefusals[] = {Refusal::unsigned_,    Refusal::unknown_signer, Refusal::bad_signature,
                                        Refusal::wrong_subject, Refusal::corrupt,        Refusal::truncated,
                                        Refusal::missing,       Refusal::over_limit,     Refusal::unauthorized,
                                        Refusal::registry_error, Refusal::timeout,       Refusal::unreachable};
std::string_view refusal_name(Refusal r) noexcept;
// The reason a registry error stands for (by its code, and for errors the registry
// answered, by registry_error()'s "registry answered HTTP" message).
Refusal refusal_of(const Error& e) noexcept;
// Whether a refusal says the registry itself is failing (misses then back off from it).
bool registry_failing(Refusal r) noexcept;
// How long misses leave a late or failing registry alone.
inline constexpr std::chrono::seconds kPullPause{10};

// Hears of the pushes that land and adds to the fleet's status and metrics: the build
// coordinator (kiln/fleet/etcd_coordinator.hpp). Called on fleet threads; must not block.
class FleetObserver {
 public:
  virtual ~FleetObserver() = default;
  // `subject` ("artifact:<hex>") is in the registry now (pushed, or found there already).
  virtual void pushed(const std::string& subject) = 0;
  virtual std::string status_json() const = 0;   // a JSON object, STATUS fleet.coordinator
  virtual std::string metrics_text() const = 0;  // Prometheus lines
};

class Fleet final : public daemon::FleetService {
 public:
  // Loads the signing key and trust list, builds the HTTP client (files checked now),
  // starts the pull workers and the pusher. Does not contact the registry.
  // invalid_argument for bad keys, URL or TLS files (messages never hold secrets).
  static Result<std::unique_ptr<Fleet>> start(const FleetConfig& config, storage::Store& store);
  ~Fleet() override;  // stops the threads; a push or pull in progress finishes first

  // FleetService
  void fetch(const Digest& key_digest, std::function<void(bool)> done) override;
  bool pulls() const override { return config_.pull; }
  void outbox_grew() override { wake_pusher(); }
  std::string status_json() const override;
  std::string metrics_text() const override;
  void stop() override;
  void push(std::vector<Digest> keys, bool wait, std::function<void(Result<protocol::FleetPushReply>)> done) override;
  void pull(protocol::FleetPullRequest request, std::function<void(Result<protocol::FleetPullReply>)> done) override;
  void prune(protocol::FleetPruneRequest request, std::function<void(Result<protocol::FleetPruneReply>)> done) override;

  // Blocking forms (call from a worker thread, not an event loop), each within
  // pull_timeout; false at once while misses leave the registry alone. true = now stored.
  bool pull_artifact(const Digest& key_digest);
  bool pull_source(const std::string& model_hash);
  // As pull_source; when nothing was stored, why ("" when the registry lacks it).
  std::string pull_source_why(const std::string& model_hash);
  // Runs `job` on a pull worker.
  void post(std::function<void()> job);
  // Queues a push (durably) and wakes the pusher; also wakes it for rows the store queued.
  // `urgent` wakes it even while it backs off after a failure (an operator's push, with the
  // registry just seen to answer).
  Status queue_push(const std::string& subject);
  void wake_pusher(bool urgent = false);
  // Whether the registry holds an artifact under the key's tag (a HEAD; nothing is
  // verified or stored). Errors as RegistryClient's.
  Result<bool> registry_has(const Digest& key_digest) const;
  // Whether the durable queue still holds a push of the key's artifact.
  bool push_pending(const Digest& key_digest) const;
  // Attaches the observer (nullptr detaches; returns once no call to the old one runs).
  void set_observer(FleetObserver* observer);

  const FleetConfig& config() const { return config_; }
  storage::Store& store() { return store_; }

 private:
  Fleet(FleetConfig config, storage::Store& store, std::shared_ptr<const HttpClient> http,
        std::optional<SigningKey> key, TrustList trust);

  struct Verified {
    std::string signer;
    storage::SignatureRecord record;
  };
  // The signature check; nullopt with `why` set on refusal.
  std::optional<Verified> verify(const RegistryClient& registry, const std::string& subject,
                                 const Digest& manifest_digest, Refusal& why, std::string& detail) const;
  // A pull's outcome; `why` says what stopped it (a refusal, the registry unreachable,
  // absent) when nothing was stored.
  struct PullOutcome {
    bool stored = false;
    std::string why;
  };
  using Deadline = std::chrono::steady_clock::time_point;
  PullOutcome pull_artifact_outcome(const Digest& key_digest, Deadline deadline);
  PullOutcome do_pull_artifact(const Digest& key_digest, Deadline deadline);
  PullOutcome pull_source_outcome(const std::string& model_hash);
  PullOutcome do_pull_source(const std::string& model_hash, Deadline deadline);
  // Refuses (logs, counts) and returns the outcome that says why.
  PullOutcome refuse(const std::string& what, Refusal why, const std::string& detail);
  PullOutcome refuse(const std::string& what, const Error& e) { return refuse(what, refusal_of(e), e.message); }
  // A registry fetch that failed: no refusal when kilnd is stopping (the fetch was
  // cancelled), else refuse(what, e).
  PullOutcome fetch_failed(const std::string& what, const Error& e) {
    if (e.code == Errc::cancelled) return {false, "kilnd is stopping"};
    return refuse(what, e);
  }
  // Whether misses leave the registry alone now (after a late or failing answer).
  bool pull_paused() const;
  void note_unreachable(const Error& e);
  void note_reachable();

  Status push_subject(const std::string& subject);
  Status push_artifact(const Digest& key_digest);
  // Whether the registry's signed entry under the key's tag stays: always (first pusher
  // wins) but for a torch cache entry torch rewrites, whose last writer wins: then only
  // when the registry already holds this node's bytes.
  Result<bool> registry_keeps(const Digest& key_digest, const storage::ArtifactInfo& info) const;
  // Whether the manifest under `tag` and every blob it names (config, layers) are in the
  // registry (HEAD each): a registry can lose a blob under an intact manifest.
  Result<bool> registry_intact(const std::string& tag) const;
  // What the pusher did with a subject: "pushed", "repaired" (blobs the registry had lost
  // went up again) or "verified" (all there); an operator's push reports it.
  void note_push_result(const std::string& subject, const char* result);
  Status push_source(const std::string& model_hash);
  // Pushes a manifest's blobs, its signature, then its tag.
  Status push_parts(const std::string& subject, const PushParts& parts);
  void pusher_loop();
  void worker_loop();

  // The operator's transfers (fleet_admin.cpp).
  void post_admin(std::function<void()> job);
  void admin_loop();
  Result<protocol::FleetPushReply> run_push(const std::vector<Digest>& keys, bool wait);
  Result<protocol::FleetPullReply> run_pull(const protocol::FleetPullRequest& request);
  Result<protocol::FleetPruneReply> run_prune(const protocol::FleetPruneRequest& request);
  // Artifact manifests (64-hex tags) whose annotations match `filters`; calls `each`
  // with the tag and the parsed manifest (its digest too) until it returns false.
  Status for_each_artifact_manifest(const std::map<std::string, std::string>& filters, bool fetch_manifests,
                                    const std::function<bool(const Digest&, const FetchedManifest*, const oci::ParsedManifest*)>& each,
                                    std::uint64_t& listed);
  void set_transfer(const std::string& op, std::uint64_t done, std::uint64_t total, std::uint64_t bytes);
  void clear_transfer();

  FleetConfig config_;
  storage::Store& store_;
  RegistryClient registry_;
  std::optional<SigningKey> key_;
  TrustList trust_;

  // Set by stop(): every registry request of this node ends (kiln/fleet/http_client.hpp).
  std::shared_ptr<std::atomic<bool>> cancel_ = std::make_shared<std::atomic<bool>>(false);
  // Single flight: one pull per subject; later callers share its outcome (single_flight.hpp).
  std::unique_ptr<SingleFlight<PullOutcome>> flights_;

  std::mutex work_mu_;
  std::condition_variable work_cv_;
  std::deque<std::function<void()>> work_;  // guarded by work_mu_
  bool stopping_ = false;                   // guarded by work_mu_ and push_mu_
  std::vector<std::thread> workers_;

  mutable std::mutex observer_mu_;
  FleetObserver* observer_ = nullptr;  // guarded by observer_mu_, held during calls to it

  std::mutex admin_mu_;
  std::condition_variable admin_cv_;
  std::deque<std::function<void()>> admin_work_;  // guarded by admin_mu_
  bool admin_stopping_ = false;                    // guarded by admin_mu_
  std::atomic<bool> halt_{false};                  // kilnd is stopping: long transfers end early
  std::thread admin_;

  std::mutex push_mu_;
  std::condition_variable push_cv_;
  bool push_wake_ = false;    // guarded by push_mu_
  bool push_urgent_ = false;  // guarded by push_mu_
  // Attempts the pusher finished (pushed or failed), so an operator's push waits for
  // progress instead of polling the queue; notified on push_progress_cv_.
  std::uint64_t push_attempts_ = 0;  // guarded by push_mu_
  std::condition_variable push_progress_cv_;
  std::thread pusher_;

  // Counters for metrics and status.
  std::atomic<std::uint64_t> hits_{0}, misses_{0}, pulls_{0}, pushes_{0}, push_failures_{0};
  std::atomic<std::uint64_t> bytes_pulled_{0}, bytes_pushed_{0}, sources_pulled_{0}, sources_pushed_{0};
  std::atomic<bool> reachable_{true};
  // Misses and their queue: answered without asking (during a pause), expired while
  // queued, waiting for a worker now, looking in the registry now, total queue wait.
  std::atomic<std::uint64_t> pulls_skipped_{0}, pulls_expired_{0}, pull_wait_us_{0}, pull_waits_{0};
  std::atomic<std::int64_t> pulls_queued_{0}, pulls_in_flight_{0};
  std::atomic<std::int64_t> pull_pause_until_ms_{0};  // steady clock ms; misses skip the registry until then
  mutable std::mutex status_mu_;
  // Guarded by status_mu_.
  std::map<std::string, std::uint64_t> refusals_;
  std::deque<std::string> recent_;      // newest last: "time pull|refuse|push ..."
  std::string last_error_;
  std::int64_t last_contact_ = 0;
  struct Transfer {
    std::string op;  // "push" | "pull" | "prune"
    std::uint64_t done = 0, total = 0, bytes = 0;
  };
  std::optional<Transfer> transfer_;  // the operator's transfer running now
  std::map<std::string, std::string> push_results_;  // note_push_result's
  void remember(std::string line);
};

}  // namespace kiln::fleet
