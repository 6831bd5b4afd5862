// kilnd's BuildService over a BuildScheduler. See kiln/builds/scheduler_service.hpp.
#include "kiln/builds/scheduler_service.hpp"

#include "kiln/daemon/artifact_meta.hpp"
#include "kiln/daemon/submitted_key.hpp"

#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <tuple>

namespace kiln::build {

namespace {

namespace proto = kiln::protocol;
using daemon::to_meta;

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// One PREWARM_SUBMIT (or BUILD without wait): its keys and what became of them.
struct Submission {
  std::mutex mu;
  std::vector<proto::BuildState> states;      // guarded by mu; one per valid key
  std::size_t pending = 0;                    // guarded by mu
  bool last_sent = false;                     // guarded by mu
  daemon::BuildService::EventSink sink;
};

// An ensure() in progress: whichever of the outcome and withdraw() comes first calls
// done(), once.
class EnsureWait final : public daemon::BuildWait {
 public:
  explicit EnsureWait(std::function<void(Status)> done) : done_(std::move(done)) {}

  void withdraw() override {
    std::function<void(Status)> done;
    {
      std::lock_guard lock(mu_);
      done = std::move(done_);
      done_ = nullptr;
    }
    if (!done) return;
    // Leaving may stop the build (the last waiter) and never calls our callback again.
    if (waiter_) waiter_->leave();
    done(make_error(Errc::cancelled, "withdrawn: the client stopped waiting for the build"));
  }

  void deliver(Status st) {
    std::function<void(Status)> done;
    {
      std::lock_guard lock(mu_);
      done = std::move(done_);
      done_ = nullptr;
    }
    if (done) done(std::move(st));
  }

  // Set once, by ensure(), before the handle is handed out.
  std::unique_ptr<Waiter> waiter_;

 private:
  std::mutex mu_;
  std::function<void(Status)> done_;  // guarded by mu_; empty once called
};

class SchedulerService final : public daemon::BuildService {
 public:
  SchedulerService(BuildScheduler& s, storage::Store& store, std::chrono::milliseconds wait)
      : scheduler_(s), store_(store), default_wait_(wait) {}

  std::shared_ptr<daemon::BuildWait> ensure(const Key& key, const Digest&, const daemon::EnsureOptions& options,
                                            std::function<void(Status)> done) override {
    RequestOptions ro;
    ro.priority = options.idle ? Priority::idle : options.prewarm ? Priority::prewarm : Priority::interactive;
    ro.force = options.force ? Force::yes : Force::no;
    ro.wait = options.wait_ms ? std::chrono::milliseconds(options.wait_ms) : default_wait_;
    ro.on_start = options.on_start;
    auto wait = std::make_shared<EnsureWait>(std::move(done));
    // The callback holds `wait` until the scheduler calls or drops it (outcome, timeout,
    // leave), so done() is called even when the caller lets go of the handle.
    wait->waiter_ = scheduler_.request(key, ro, [wait](const Result<storage::ArtifactInfo>& r) {
      wait->deliver(r ? Status{} : Status(r.error()));
    });
    wait->waiter_->detach();
    return wait;
  }

  Result<proto::PrewarmReply> submit(const std::vector<Key>& keys, const daemon::SubmitOptions& options,
                                     EventSink on_event) override {
    const bool force = options.force;
    auto sub = std::make_shared<Submission>();
    sub->sink = std::move(on_event);
    proto::PrewarmReply reply;
    reply.handle = "p" + std::to_string(++next_handle_);
    std::vector<std::tuple<Key, Digest, std::size_t>> to_build;  // and its index in reply.results
    std::vector<proto::BuildEvent> immediate;
    for (const Key& k : keys) {
      daemon::SubmittedKey s = daemon::submitted_key(k, force, store_);
      if (s.state) {
        const Digest d = s.state->key_digest;
        if (s.stored) {
          immediate.push_back(proto::BuildEvent{d, "done", std::nullopt, to_meta(*s.stored)});
        } else {
          auto live = scheduler_.job(d);
          s.result.state = s.state->state = live && live->state == "running" ? "running" : "queued";
          to_build.emplace_back(k, d, reply.results.size());
        }
        sub->states.push_back(std::move(*s.state));
      }
      reply.results.push_back(std::move(s.result));
    }
    sub->pending = to_build.size() + immediate.size();
    remember(reply.handle, sub);
    for (auto& e : immediate) finish(sub, std::move(e));
    for (auto& [k, d, index] : to_build) {
      RequestOptions ro;
      ro.priority = options.idle ? Priority::idle : Priority::prewarm;
      ro.force = force ? Force::yes : Force::no;
      ro.on_start = [sub, d = d] {
        set_state(*sub, d, "running", std::nullopt);
        if (sub->sink) sub->sink(proto::BuildEvent{d, "running", std::nullopt, std::nullopt}, false);
      };
      auto w = scheduler_.request(k, ro, [sub, d = d](const Result<storage::ArtifactInfo>& r) {
        if (r) finish(sub, proto::BuildEvent{d, "done", std::nullopt, to_meta(*r)});
        else finish(sub, proto::BuildEvent{d, "failed", r.error().to_string(), std::nullopt});
      });
      w->detach();
      // The scheduler refuses some keys at once (another toolchain than this node's, no
      // source, a recent failure): the reply says so, not "queued". A BUILD that does not
      // wait polls BUILD_STATUS by key digest, which has no job for a refused key.
      std::lock_guard lock(sub->mu);
      for (const auto& st : sub->states)
        if (st.key_digest == d && st.state == "failed") {
          reply.results[index].state = "failed";
          reply.results[index].error = st.error;
        }
    }
    if (to_build.empty() && immediate.empty() && sub->sink) sub->sink(proto::BuildEvent{Digest{}, "done", std::nullopt, std::nullopt}, true);
    return reply;
  }

  Result<proto::BuildStatusReply> status(const proto::BuildStatusRequest& request) override {
    proto::BuildStatusReply reply;
    if (request.handle) {
      std::shared_ptr<Submission> sub;
      {
        std::lock_guard lock(mu_);
        if (auto it = handles_.find(*request.handle); it != handles_.end()) sub = it->second;
      }
      if (!sub) return make_error(Errc::not_found, "no build handle " + *request.handle + " (handles are kept for the 1024 most recent submissions)");
      std::lock_guard lock(sub->mu);
      for (const auto& s : sub->states)
        if (!request.key_digest || s.key_digest == *request.key_digest) reply.builds.push_back(s);
      return reply;
    }
    if (request.key_digest) {
      if (auto j = scheduler_.job(*request.key_digest)) reply.builds.push_back(to_state(*j));
      return reply;
    }
    for (const auto& j : scheduler_.jobs()) reply.builds.push_back(to_state(j));
    return reply;
  }

  Result<std::unique_ptr<daemon::SourceCheck>> begin_source_check() override { return scheduler_.begin_source_check(); }

  // STATUS: what the scheduler's probe found at start and its slots' queues now.
  proto::GpuReport gpu_report() const override {
    const NodeReport node = scheduler_.report();
    proto::GpuReport r;
    // The reason every build request is refused for (scheduler.cpp, buildable_slots).
    r.builds_note = node.refusal;
    r.build_seconds = node.build_seconds;
    for (const auto& g : node.gpus)
      r.gpus.push_back({static_cast<std::uint32_t>(g.index), g.name, g.arch, g.memory_bytes, g.uuid});
    if (r.gpus.empty()) r.note = node.gpu_note.empty() ? "GPUs were not probed ([builds] probe_gpus = false)" : node.gpu_note;
    for (const auto& s : node.slots)
      r.slots.push_back({s.config.name, s.config.gpu_arch, s.config.gpu_name, s.running, s.queued, s.builds_at_once});
    r.builds_started = node.builds_started;
    r.builds_succeeded = node.builds_ok;
    r.builds_failed = node.builds_failed;
    r.builds_cancelled = node.builds_cancelled;
    return r;
  }

  Status can_build() const override {
    std::string why = scheduler_.report().refusal;
    if (why.empty()) return {};
    return make_error(Errc::unsupported, "this node cannot build: " + why);
  }

 private:
  static proto::BuildState to_state(const JobReport& j) {
    proto::BuildState s;
    s.key_digest = j.key_digest;
    s.state = j.state;
    s.queued_at = j.queued_at;
    if (j.started_at) s.started_at = j.started_at;
    if (j.finished_at) s.finished_at = j.finished_at;
    if (!j.slot.empty()) s.progress = "slot " + j.slot + ", " + std::to_string(j.waiters) + " waiting";
    if (!j.error.empty()) s.error = j.error;
    return s;
  }

  static void set_state(Submission& sub, const Digest& d, const std::string& state, std::optional<std::string> error) {
    std::lock_guard lock(sub.mu);
    for (auto& s : sub.states) {
      if (s.key_digest != d) continue;
      s.state = state;
      if (state == "running") s.started_at = unix_now();
      if (state == "done" || state == "failed") s.finished_at = unix_now();
      if (error) s.error = error;
    }
  }

  static void finish(const std::shared_ptr<Submission>& sub, proto::BuildEvent e) {
    set_state(*sub, e.key_digest, e.state, e.error);
    bool last = false;
    {
      std::lock_guard lock(sub->mu);
      if (sub->pending > 0) --sub->pending;
      if (sub->pending == 0 && !sub->last_sent) last = sub->last_sent = true;
    }
    if (sub->sink) sub->sink(std::move(e), last);
  }

  void remember(const std::string& handle, std::shared_ptr<Submission> sub) {
    std::lock_guard lock(mu_);
    handles_[handle] = std::move(sub);
    order_.push_back(handle);
    while (order_.size() > 1024) {
      handles_.erase(order_.front());
      order_.pop_front();
    }
  }

  BuildScheduler& scheduler_;
  storage::Store& store_;
  const std::chrono::milliseconds default_wait_;
  std::atomic<std::uint64_t> next_handle_{0};
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Submission>> handles_;  // guarded by mu_
  std::deque<std::string> order_;                               // guarded by mu_
};

}  // namespace

std::unique_ptr<daemon::BuildService> make_scheduler_service(BuildScheduler& scheduler, storage::Store& store,
                                                         std::chrono::milliseconds default_wait) {
  return std::make_unique<SchedulerService>(scheduler, store, default_wait);
}

}  // namespace kiln::build
