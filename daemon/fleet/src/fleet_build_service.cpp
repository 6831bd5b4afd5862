// The fleet in front of the node's builds. See kiln/fleet/fleet_build_service.hpp.
#include "kiln/fleet/fleet_build_service.hpp"

#include <mutex>

#include "fleet_submissions.hpp"

namespace kiln::fleet {

namespace {

// One ensure() through the fleet: first a registry lookup, then (maybe) the inner build.
class FleetWait final : public daemon::BuildWait {
 public:
  explicit FleetWait(std::function<void(Status)> done) : done_(std::move(done)) {}

  // wait_ms ran out before the build was handed to the inner service (waiting for
  // another node): answer timeout; a later decision finds the wait withdrawn.
  void expire(std::uint32_t wait_ms) {
    std::function<void(Status)> done;
    {
      std::lock_guard lock(mu_);
      if (inner_ || !done_) return;
      withdrawn_ = true;
      done = std::move(done_);
    }
    done(make_error(Errc::timeout, "gave up waiting after " + std::to_string(wait_ms) +
                                       " ms: another node of the fleet is building it (kilnctl fleet status)"));
  }
  // What is left of wait_ms for the inner build (0 = no limit).
  std::uint32_t remaining_ms(std::uint32_t wait_ms) const {
    if (wait_ms == 0) return 0;
    auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start_).count();
    return spent >= wait_ms ? 1 : wait_ms - static_cast<std::uint32_t>(spent);
  }

  void withdraw() override {
    std::shared_ptr<daemon::BuildWait> inner;
    std::function<void(Status)> done;
    {
      std::lock_guard lock(mu_);
      withdrawn_ = true;
      inner = inner_;
      if (!inner) done = std::move(done_);  // still in the registry phase: answer now
    }
    if (inner) inner->withdraw();
    else if (done) done(make_error(Errc::cancelled, "withdrawn"));
  }
  // The registry phase ended with the artifact stored.
  void finish(Status st) {
    std::function<void(Status)> done;
    {
      std::lock_guard lock(mu_);
      done = std::move(done_);
    }
    if (done) done(std::move(st));
  }
  // Hands over to the inner build; false when withdrawn meanwhile (nothing to start).
  bool withdrawn() {
    std::lock_guard lock(mu_);
    return withdrawn_;
  }
  void set_inner(std::shared_ptr<daemon::BuildWait> inner) {
    bool w;
    {
      std::lock_guard lock(mu_);
      inner_ = inner;
      w = withdrawn_;
    }
    if (w) inner->withdraw();
  }
  // The inner service's callback.
  std::function<void(Status)> take_done() {
    std::lock_guard lock(mu_);
    return std::move(done_);
  }

 private:
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::mutex mu_;
  std::function<void(Status)> done_;                 // guarded by mu_; empty once called
  std::shared_ptr<daemon::BuildWait> inner_;         // guarded by mu_
  bool withdrawn_ = false;                           // guarded by mu_
};

class FleetBuildService final : public daemon::BuildService {
 public:
  FleetBuildService(daemon::BuildService& inner, Fleet& fleet, BuildCoordinator* coordinator)
      : inner_(inner), fleet_(fleet), coordinator_(coordinator) {}

  std::shared_ptr<daemon::BuildWait> ensure(const Key& key, const Digest& key_digest, const daemon::EnsureOptions& options,
                                            std::function<void(Status)> done) override {
    // Stored: done, or forced, a rebuild for this node alone (fleet_build_service.hpp).
    auto stored = fleet_.store().stat(key_digest);
    if (stored && *stored) return inner_.ensure(key, key_digest, options, std::move(done));
    auto wait = std::make_shared<FleetWait>(std::move(done));
    fleet_.post([this, wait, key, key_digest, options] {
      if (wait->withdrawn()) return;
      if (fleet_.config().pull && fleet_.pull_artifact(key_digest)) {
        wait->finish({});
        return;
      }
      // A node that lacks the key's source takes it from the registry; why it could not
      // goes to the client with the build's no_source error.
      std::string source_why;
      if (auto src = fleet_.store().stat_source(key.model_hash); src && !*src) source_why = fleet_.pull_source_why(key.model_hash);
      if (coordinator_) {
        if (options.wait_ms > 0) {
          coordinator_->call_at(std::chrono::steady_clock::now() + std::chrono::milliseconds(options.wait_ms),
                                [wait, ms = options.wait_ms] { wait->expire(ms); });
        }
        const auto recent = options.force ? RecentFailure::retry : RecentFailure::respect;
        coordinator_->before_build(key, key_digest, recent, [this, wait, key, key_digest, options, source_why](BuildDecision d) {
          switch (d.action) {
            case BuildDecision::Action::fail: wait->finish(std::move(d.failure)); return;
            case BuildDecision::Action::build_here: build(wait, key, key_digest, options, d.ticket, source_why); return;
            case BuildDecision::Action::pull:
              // A pull is network work: on a fleet thread, not the coordinator's.
              fleet_.post([this, wait, key, key_digest, options] {
                if (fleet_.pull_artifact(key_digest)) {
                  wait->finish({});
                  return;
                }
                // What the registry holds was refused (logged, counted): build here.
                build(wait, key, key_digest, options, 0);
              });
              return;
          }
        });
        return;
      }
      build(wait, key, key_digest, options, 0, source_why);
    });
    return wait;
  }

  // Prewarms go the fleet's way too (fleet_submissions.hpp): one build per key across the fleet.
  Result<protocol::PrewarmReply> submit(const std::vector<Key>& keys, const daemon::SubmitOptions& options,
                                        EventSink on_event) override {
    return submissions_.submit(keys, options, std::move(on_event));
  }
  Result<protocol::BuildStatusReply> status(const protocol::BuildStatusRequest& request) override {
    if (auto mine = submissions_.status(request)) return std::move(*mine);
    return inner_.status(request);
  }
  protocol::GpuReport gpu_report() const override { return inner_.gpu_report(); }
  Status can_build() const override { return inner_.can_build(); }
  // Sources are verified by the node's own builds (the torch that builds here hashes).
  Result<std::unique_ptr<daemon::SourceCheck>> begin_source_check() override { return inner_.begin_source_check(); }

 private:
  // `ticket` != 0: the coordinator's build_here, whose outcome goes back to it.
  // `source_why`: why the registry's copy of the key's source was not taken ("" if none).
  void build(const std::shared_ptr<FleetWait>& wait, const Key& key, const Digest& key_digest,
             const daemon::EnsureOptions& options, std::uint64_t ticket, std::string source_why = {}) {
    BuildCoordinator* coordinator = ticket ? coordinator_ : nullptr;
    auto done = wait->withdrawn() ? nullptr : wait->take_done();
    if (!done) {
      if (coordinator) coordinator->after_build(ticket, make_error(Errc::cancelled, "withdrawn"));
      return;
    }
    Fleet* fleet = &fleet_;
    daemon::EnsureOptions rest = options;
    rest.wait_ms = wait->remaining_ms(options.wait_ms);
    auto inner = inner_.ensure(key, key_digest, rest, [fleet, coordinator, ticket, source_why, done = std::move(done)](Status st) {
      if (st) fleet->wake_pusher();  // the store queued the push with the artifact
      if (coordinator) coordinator->after_build(ticket, st);
      if (!st && st.error().code == Errc::no_source && !source_why.empty()) {
        st = make_error(Errc::no_source, st.error().message + "; the registry's copy of the source was not taken: " + source_why);
      }
      done(std::move(st));
    });
    wait->set_inner(std::move(inner));
  }

  daemon::BuildService& inner_;
  Fleet& fleet_;
  BuildCoordinator* coordinator_;
  FleetSubmissions submissions_{*this, fleet_.store()};
};

}  // namespace

std::unique_ptr<daemon::BuildService> make_fleet_build_service(daemon::BuildService& inner, Fleet& fleet,
                                                               BuildCoordinator* coordinator) {
  return std::make_unique<FleetBuildService>(inner, fleet, coordinator);
}

}  // namespace kiln::fleet
