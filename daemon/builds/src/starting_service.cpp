// The build service while kilnd's scheduler starts (see starting_service.hpp).
#include "starting_service.hpp"

#include <pthread.h>

#include <spdlog/spdlog.h>

#include "kiln/builds/scheduler_service.hpp"

namespace kiln::build {

namespace {

class NoWait final : public daemon::BuildWait {
 public:
  void withdraw() override {}
};

}  // namespace

StartingBuildService::StartingBuildService(BuildScheduler::Prepared prepared, storage::Store& store,
                                           const NodeFields& host, std::chrono::milliseconds default_wait)
    : thread_([this, p = std::make_shared<BuildScheduler::Prepared>(std::move(prepared)), &store, host,
               default_wait]() mutable {
        ::pthread_setname_np(::pthread_self(), "kilnd-probe");
        auto scheduler = BuildScheduler::start(std::move(*p), host, &cancel_);
        auto service = make_scheduler_service(*scheduler, store, default_wait);
        const auto took = std::chrono::duration<double>(std::chrono::steady_clock::now() - since_).count();
        std::vector<std::function<void(const NodeFields&)>> waiting;
        {
          std::lock_guard lock(mu_);
          scheduler_ = std::move(scheduler);
          service_ = std::move(service);
          node_ = scheduler_->node();
          waiting.swap(waiting_);
        }
        if (cancel_.load()) spdlog::info("builds: the probe was stopped after {:.1f} s: kilnd is stopping", took);
        else if (!service_->can_build())  // the probe logged why
          spdlog::info("builds: probed in {:.1f} s; this node cannot build, it serves stored artifacts only", took);
        else spdlog::info("builds: ready after {:.1f} s of probing", took);
        for (auto& f : waiting) f(node_);
      }) {}

StartingBuildService::~StartingBuildService() {
  cancel_.store(true);
  if (thread_.joinable()) thread_.join();
  service_.reset();  // before the scheduler it uses
  scheduler_.reset();
}

void StartingBuildService::when_probed(std::function<void(const NodeFields&)> f) {
  {
    std::lock_guard lock(mu_);
    if (!service_) {
      waiting_.push_back(std::move(f));
      return;
    }
  }
  f(node_);
}

daemon::BuildService* StartingBuildService::running() const {
  std::lock_guard lock(mu_);
  return service_.get();
}

Error StartingBuildService::starting() const {
  const auto s = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - since_).count();
  return make_error(Errc::unavailable, "builds are starting: kilnd is probing this node's GPUs and build worker (" +
                                           std::to_string(s) + " s so far); ask again shortly");
}

std::shared_ptr<daemon::BuildWait> StartingBuildService::ensure(const Key& key, const Digest& key_digest,
                                                                const daemon::EnsureOptions& options,
                                                                std::function<void(Status)> done) {
  if (auto* s = running()) return s->ensure(key, key_digest, options, std::move(done));
  done(starting());
  return std::make_shared<NoWait>();
}

Result<protocol::PrewarmReply> StartingBuildService::submit(const std::vector<Key>& keys,
                                                            const daemon::SubmitOptions& options, EventSink on_event) {
  if (auto* s = running()) return s->submit(keys, options, std::move(on_event));
  return starting();
}

Result<protocol::BuildStatusReply> StartingBuildService::status(const protocol::BuildStatusRequest& request) {
  if (auto* s = running()) return s->status(request);
  return starting();
}

Result<std::unique_ptr<daemon::SourceCheck>> StartingBuildService::begin_source_check() {
  if (auto* s = running()) return s->begin_source_check();
  return starting();
}

Status StartingBuildService::can_build() const {
  if (auto* s = running()) return s->can_build();
  return starting();
}

protocol::GpuReport StartingBuildService::gpu_report() const {
  if (auto* s = running()) return s->gpu_report();
  protocol::GpuReport r;
  r.note = "not probed yet: the probe is running";
  r.builds_note = starting().message;
  return r;
}

}  // namespace kiln::build
