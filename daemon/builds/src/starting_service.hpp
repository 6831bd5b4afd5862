// The build service kilnd has from its first moment, while its scheduler is still being
// started (BuildScheduler::start: the GPU probe and the worker's toolchain probe, which
// imports torch: seconds, or over a minute on a fresh GPU node). kilnd serves stored
// artifacts and the torch cache meanwhile; requests that need builds wait for
// when_probed() first (the server does so), so the calls below answer `unavailable`
// only when something did not wait. Internal to kiln_daemon_builds (daemon_builds.cpp).
//
// Thread safety: as BuildService. when_probed() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kiln/builds/scheduler.hpp"
#include "kiln/daemon/build_service.hpp"

namespace kiln::build {

class StartingBuildService final : public daemon::BuildService {
 public:
  // Starts the scheduler on a thread of its own, then the service over it
  // (make_scheduler_service with `default_wait`).
  StartingBuildService(BuildScheduler::Prepared prepared, storage::Store& store, const NodeFields& host,
                       std::chrono::milliseconds default_wait);
  // Stops the worker's probe if it still runs (kilnd stopping within moments of its start
  // must not wait up to probe_timeout_s for it), waits for the probing thread, then stops
  // the scheduler as ~BuildScheduler does.
  ~StartingBuildService() override;

  // Calls f once the scheduler runs, with "this node" as the probes found it, from the
  // probing thread; at once, on the caller's thread, when it already runs.
  void when_probed(std::function<void(const NodeFields&)> f);

  std::shared_ptr<daemon::BuildWait> ensure(const Key& key, const Digest& key_digest,
                                            const daemon::EnsureOptions& options,
                                            std::function<void(Status)> done) override;
  Result<protocol::PrewarmReply> submit(const std::vector<Key>& keys, const daemon::SubmitOptions& options,
                                          EventSink on_event) override;
  Result<protocol::BuildStatusReply> status(const protocol::BuildStatusRequest& request) override;
  Result<std::unique_ptr<daemon::SourceCheck>> begin_source_check() override;
  // While probing: unavailable ("builds are starting").
  Status can_build() const override;
  // While probing: no GPUs yet, and notes saying the probe is running and for how long.
  protocol::GpuReport gpu_report() const override;

 private:
  // The running service, or null while probing.
  daemon::BuildService* running() const;
  Error starting() const;

  const std::chrono::steady_clock::time_point since_ = std::chrono::steady_clock::now();
  mutable std::mutex mu_;
  // Set once, under mu_, by the probing thread; read-only after.
  std::unique_ptr<BuildScheduler> scheduler_;
  std::unique_ptr<daemon::BuildService> service_;
  NodeFields node_;
  std::vector<std::function<void(const NodeFields&)>> waiting_;  // guarded by mu_
  std::atomic<bool> cancel_{false};  // set by the destructor: the probe stops
  std::thread thread_;               // last: it starts once every member above exists
};

}  // namespace kiln::build
