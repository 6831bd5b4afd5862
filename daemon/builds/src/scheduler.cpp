// The build scheduler: per-slot queues, single flight, waiters and their deadlines.
// See kiln/builds/scheduler.hpp for the contract.
#include "kiln/builds/scheduler.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <utility>
#include <thread>
#include <unordered_map>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "build_runner.hpp"
#include "compiler_cache.hpp"
#include "node_probe.hpp"
#include "source_check.hpp"
#include "source_copies.hpp"
#include "worker_group.hpp"

namespace kiln::build {

namespace {

using Clock = std::chrono::steady_clock;

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct Job;

struct WaiterState {
  BuildCallback done;
  std::function<void()> on_start;
  bool finished = false;             // guarded by Core::mu_: callback taken or waiter gone
  std::weak_ptr<Job> job;
};

struct Job {
  BuildJobSpec spec;
  Priority priority = Priority::interactive;
  bool prewarm = false;              // some prewarm wants it: stays queued with no waiter
  std::string state = "queued";
  std::size_t slot = 0;
  std::int64_t queued_at = 0, started_at = 0, finished_at = 0;
  std::string error;
  std::vector<std::shared_ptr<WaiterState>> waiters;
  BuildCancel cancel;
};

// What became of a build when one of its waiters left.
enum class Left { build_goes_on, dropped, cancelled };

using Delivery = std::pair<BuildCallback, Result<storage::ArtifactInfo>>;

void deliver(std::vector<Delivery>& ds) {
  for (auto& [cb, r] : ds) {
    if (cb) cb(std::move(r));
  }
  ds.clear();
}

}  // namespace

class Core {
 public:
  Core(SchedulerOptions options, storage::Store& store, ProbedNode probed, int work_lock)
      : options_(std::move(options)), store_(store), probed_(std::move(probed)), work_lock_(work_lock),
        sources_(options_.work_dir / "sources"), queues_(probed_.slots.size()), running_(probed_.slots.size(), 0) {}
  ~Core() {
    if (work_lock_ >= 0) ::close(work_lock_);
  }

  void start() {
    for (std::size_t s = 0; s < probed_.slots.size(); ++s)
      for (unsigned i = 0; i < options_.builds_per_slot; ++i) threads_.emplace_back([this, s] { slot_loop(s); });
    threads_.emplace_back([this] { timer_loop(); });
    for (int i = 0; i < kCheckThreads; ++i) threads_.emplace_back([this] { check_loop(); });
  }

  void stop() {
    std::vector<Delivery> ds;
    std::vector<std::function<void(Status)>> dropped_checks;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      stopping_ = true;
      for (auto& q : queues_) {
        for (auto& job : q) finish_job_locked(*job, "cancelled", make_error(Errc::cancelled, "kilnd is shutting down; the build of " + job->spec.digest.hex() + " did not start"), ds);
        q.clear();
      }
      for (auto& [d, job] : jobs_) job->cancel.requested = true;
      checks_cancel_ = true;
      for (auto& c : checks_) dropped_checks.push_back(std::move(c.done));
      checks_.clear();
    }
    for (auto& done : dropped_checks)
      done(make_error(Errc::cancelled, "cannot verify the source's model hash: kilnd is shutting down; nothing was stored"));
    cv_.notify_all();
    check_cv_.notify_all();
    timer_cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
    deliver(ds);
  }

  NodeFields node() const { return probed_.node; }

  // A check of an uploaded source, when this node can build (see scheduler.hpp).
  Result<std::unique_ptr<daemon::SourceCheck>> begin_source_check(const std::weak_ptr<Core>& self) {
    if (!probed_.refusal.empty()) return std::unique_ptr<daemon::SourceCheck>();
    WorkerCommand worker = options_.worker;
    worker.on_spawn = nullptr;
    // The hash op loads the archive, whose constants may live on the GPU: it sees the
    // first slot's GPU (and no other), as a build there would.
    if (!probed_.slots.front().visible_device.empty())
      worker.env["CUDA_VISIBLE_DEVICES"] = probed_.slots.front().visible_device;
    // It imports torch and torch.export as a build does: the node's bytecode serves it too.
    if (auto st = use_node_bytecode_cache(options_, worker); !st) return std::move(st).error();
    CheckQueue queue = [self](CheckWork work, std::function<void(Status)> done) {
      auto core = self.lock();
      if (!core) {
        done(make_error(Errc::cancelled, "cannot verify the source's model hash: kilnd is shutting down; nothing was stored"));
        return;
      }
      core->queue_check(std::move(work), std::move(done));
    };
    return make_source_check(options_.work_dir / "checks", std::move(worker), options_.source_check_timeout, std::move(queue));
  }

  void queue_check(CheckWork work, std::function<void(Status)> done) {
    {
      std::lock_guard lock(mu_);
      if (!stopping_) {
        checks_.push_back(PendingCheck{std::move(work), std::move(done)});
        done = nullptr;
      }
    }
    if (done) {
      done(make_error(Errc::cancelled, "cannot verify the source's model hash: kilnd is shutting down; nothing was stored"));
      return;
    }
    check_cv_.notify_one();
  }

  NodeReport report() const {
    NodeReport r;
    r.gpus = probed_.gpus.gpus;
    r.gpu_note = probed_.gpus.note;
    r.toolchain = probed_.node;
    r.toolchain_error = probed_.toolchain_error;
    r.refusal = probed_.refusal;
    std::lock_guard lock(mu_);
    r.build_seconds = build_seconds_;
    for (std::size_t s = 0; s < probed_.slots.size(); ++s)
      r.slots.push_back(SlotReport{probed_.slots[s], queues_[s].size(), running_[s], options_.builds_per_slot});
    r.builds_started = started_;
    r.builds_ok = ok_;
    r.builds_failed = failed_;
    r.builds_cancelled = cancelled_;
    return r;
  }

  std::shared_ptr<WaiterState> request(const Key& key, const RequestOptions& opts, BuildCallback done) {
    auto w = std::make_shared<WaiterState>();
    w->done = std::move(done);
    w->on_start = opts.on_start;
    std::vector<Delivery> ds;
    auto answer = [&](Result<storage::ArtifactInfo> r) {
      w->finished = true;
      ds.emplace_back(std::move(w->done), std::move(r));
      deliver(ds);
      return w;
    };
    auto digest = key.digest();
    if (!digest) return answer(std::move(digest).error());
    const bool force = opts.force == Force::yes;
    if (!force) {
      auto st = store_.stat(*digest);
      if (!st) return answer(std::move(st).error());
      if (*st) return answer(std::move(**st));
    }
    auto slots = buildable_slots(key);
    if (!slots) return answer(std::move(slots).error());
    if (!force) {
      if (auto e = recent_failure(store_, *digest, options_.failure_ttl)) return answer(std::move(*e));
    }
    auto src = store_.stat_source(key.model_hash);
    if (!src) return answer(std::move(src).error());
    if (!*src)
      return answer(make_error(Errc::no_source, "no source is registered for model hash " + key.model_hash +
                                                    "; register the block's torch.export archive with "
                                                    "`kilnctl source add FILE` (its model hash must be this one)"));
    {
      std::lock_guard lock(mu_);
      if (stopping_) {
        w->finished = true;
        ds.emplace_back(std::move(w->done), make_error(Errc::cancelled, "kilnd is shutting down"));
      } else {
        std::shared_ptr<Job> job;
        if (auto it = jobs_.find(*digest); it != jobs_.end()) {
          job = it->second;  // single flight: join the build already queued or running
          if (opts.priority < job->priority) job->priority = opts.priority;
        } else {
          job = std::make_shared<Job>();
          job->spec = BuildJobSpec{key, *digest, force, ++seq_};
          job->priority = opts.priority;
          job->queued_at = unix_now();
          job->slot = least_loaded_locked(*slots);
          jobs_.emplace(*digest, job);
          queues_[job->slot].push_back(job);
        }
        if (opts.priority != Priority::interactive) job->prewarm = true;
        // Another build queued for the slot (not one joined while it runs) takes an idle one's place.
        if (job->priority != Priority::idle && job->state == "queued") set_aside_idle_locked(job->slot);
        w->job = job;
        job->waiters.push_back(w);
        if (opts.wait.count() > 0) deadlines_.emplace(Clock::now() + opts.wait, w);
      }
    }
    cv_.notify_all();
    timer_cv_.notify_all();
    deliver(ds);
    return w;
  }

  void leave(const std::shared_ptr<WaiterState>& w) {
    BuildCallback gone;  // destroyed after the lock is released
    std::lock_guard lock(mu_);
    gone = std::move(w->done);
    detach_waiter_locked(w);
  }

  std::vector<JobReport> jobs() const {
    std::lock_guard lock(mu_);
    std::vector<JobReport> out(recent_.begin(), recent_.end());
    std::vector<const Job*> live;
    for (const auto& [d, job] : jobs_) live.push_back(job.get());
    std::sort(live.begin(), live.end(), [](const Job* a, const Job* b) { return a->spec.seq < b->spec.seq; });
    for (const Job* j : live) out.push_back(report_locked(*j));
    return out;
  }

  std::optional<JobReport> job(const Digest& d) const {
    std::lock_guard lock(mu_);
    if (auto it = jobs_.find(d); it != jobs_.end()) return report_locked(*it->second);
    for (auto it = recent_.rbegin(); it != recent_.rend(); ++it)
      if (it->key_digest == d) return *it;
    return std::nullopt;
  }

 private:
  Result<std::vector<std::size_t>> buildable_slots(const Key& key) const {
    const NodeFields& n = probed_.node;
    if (!probed_.refusal.empty()) return make_error(Errc::unsupported, "this node cannot build: " + probed_.refusal);
    const std::pair<const char*, std::pair<const std::string*, const std::string*>> fields[] = {
        {"torch_version", {&key.torch_version, &n.torch_version}},
        {"torch_git", {&key.torch_git, &n.torch_git}},
        {"cuda_version", {&key.cuda_version, &n.cuda_version}},
        {"triton_version", {&key.triton_version, &n.triton_version}},
        {"platform", {&key.platform, &n.platform}},
        {"machine", {&key.machine, &n.machine}},
        {"cpu_isa", {&key.cpu_isa, &n.cpu_isa}},
    };
    for (const auto& [name, vals] : fields) {
      // A megacache key's cpu_isa is "any" (schema/key.md): torch's own key for those
      // entries has no CPU ISA, so any host builds and serves them.
      if (std::string_view(name) == "cpu_isa" && *vals.first == "any") continue;
      // Compared in canonical spelling (schema/key.md): "AVX512" from a probe is "avx512".
      if (canonical_node_value(name, *vals.first) != canonical_node_value(name, *vals.second))
        return make_error(Errc::unsupported, std::string("cannot build here: key.") + name + " is \"" + *vals.first +
                                                 "\" but this node has \"" + *vals.second +
                                                 "\"; a build here would not be what the key says");
    }
    std::vector<std::size_t> out;
    std::string have;
    for (std::size_t s = 0; s < probed_.slots.size(); ++s) {
      const SlotConfig& c = probed_.slots[s];
      if (canonical_node_value("gpu_arch", c.gpu_arch) == canonical_node_value("gpu_arch", key.gpu_arch) &&
          c.gpu_name == key.gpu_name)
        out.push_back(s);
      have += (have.empty() ? "" : ", ") + c.name + " (" + c.gpu_arch + " " + c.gpu_name + ")";
    }
    if (out.empty())
      return make_error(Errc::unsupported, "cannot build here: no GPU of this node matches key.gpu_arch \"" +
                                               key.gpu_arch + "\" and key.gpu_name \"" + key.gpu_name +
                                               "\"; it has " + have);
    return out;
  }

  std::size_t least_loaded_locked(const std::vector<std::size_t>& slots) const {
    std::size_t best = slots.front();
    for (std::size_t s : slots)
      if (queues_[s].size() + running_[s] < queues_[best].size() + running_[best]) best = s;
    return best;
  }

  JobReport report_locked(const Job& j) const {
    JobReport r;
    r.key_digest = j.spec.digest;
    r.state = j.state;
    r.priority = j.priority;
    r.queued_at = j.queued_at;
    r.started_at = j.started_at;
    r.finished_at = j.finished_at;
    r.slot = probed_.slots[j.slot].name;
    r.error = j.error;
    r.waiters = j.waiters.size();
    return r;
  }

  // Removes a waiter (timeout, leave). A build nobody wants any more (no waiter left, no
  // prewarm) is dropped from its queue, or, running, has its worker killed; either way it
  // leaves jobs_ at once, so that a new request for the key starts a fresh build.
  Left detach_waiter_locked(const std::shared_ptr<WaiterState>& w) {
    if (w->finished) return Left::build_goes_on;
    w->finished = true;
    w->done = nullptr;
    auto job = w->job.lock();
    if (!job) return Left::build_goes_on;
    std::erase(job->waiters, w);
    if (!job->waiters.empty() || job->prewarm || !options_.cancel_unwanted || job->cancel.requested)
      return Left::build_goes_on;
    const std::string hex = job->spec.digest.hex();
    if (auto it = jobs_.find(job->spec.digest); it != jobs_.end() && it->second == job) jobs_.erase(it);
    if (job->state == "queued") {
      std::erase(queues_[job->slot], job);
      job->state = "cancelled";
      job->finished_at = unix_now();
      job->error = "dropped from the queue before it started: nobody waited for it any more";
      remember_locked(*job);
      spdlog::info("build {} dropped from the queue: nobody waits for it", hex);
      return Left::dropped;
    }
    job->cancel.unwanted = true;
    job->cancel.requested = true;  // the slot thread's worker supervision kills the group
    spdlog::info("build {} cancelled: nobody waits for it any more; stopping its worker", hex);
    return Left::cancelled;
  }

  void remember_locked(const Job& job) {
    recent_.push_back(report_locked(job));
    while (recent_.size() > 256) recent_.pop_front();
  }

  void record_seconds_locked(ArtifactKind kind, const char* outcome, double seconds) {
    const std::string_view name = to_string(kind);
    auto it = std::find_if(build_seconds_.begin(), build_seconds_.end(),
                           [&](const auto& b) { return b.kind == name && b.outcome == outcome; });
    if (it == build_seconds_.end()) it = build_seconds_.insert(build_seconds_.end(), {std::string(name), outcome});
    it->add(seconds);
  }

  void finish_job_locked(Job& job, const char* state, const Result<storage::ArtifactInfo>& r,
                         std::vector<Delivery>& ds) {
    job.state = state;
    job.finished_at = unix_now();
    if (!r) job.error = r.error().message;
    for (auto& w : job.waiters) {
      if (w->finished) continue;
      w->finished = true;
      ds.emplace_back(std::move(w->done), r);
    }
    job.waiters.clear();
    remember_locked(job);
    // A cancelled job has left jobs_ already; a new build of its key may be there now.
    if (auto it = jobs_.find(job.spec.digest); it != jobs_.end() && it->second.get() == &job) jobs_.erase(it);
  }

  // Whether slot `s` has a job to start now: any but an idle one, or an idle one on a slot
  // that runs nothing.
  bool startable_locked(std::size_t s) const {
    const auto& q = queues_[s];
    if (q.empty()) return false;
    return running_[s] == 0 || std::any_of(q.begin(), q.end(), [](const auto& j) { return j->priority != Priority::idle; });
  }

  // Stops the idle builds running on slot `s` (another build wants the slot); slot_loop
  // queues them again when their workers have ended.
  void set_aside_idle_locked(std::size_t s) {
    for (auto& [d, job] : jobs_) {
      if (job->slot != s || job->state != "running" || job->priority != Priority::idle || job->cancel.requested)
        continue;
      job->cancel.set_aside = true;
      job->cancel.requested = true;
      spdlog::info("build {} set aside: an idle build, and another build is queued for {}", d.hex(),
                   probed_.slots[s].name);
    }
  }

  void slot_loop(std::size_t s) {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || startable_locked(s); });
      if (stopping_) return;
      auto& q = queues_[s];
      auto best = std::min_element(q.begin(), q.end(), [](const auto& a, const auto& b) {
        return std::pair(a->priority, a->spec.seq) < std::pair(b->priority, b->spec.seq);
      });
      std::shared_ptr<Job> job = *best;
      q.erase(best);
      job->state = "running";
      job->started_at = unix_now();
      ++running_[s];
      const SlotConfig slot = probed_.slots[s];
      std::vector<std::function<void()>> started;
      for (auto& w : job->waiters)
        if (w->on_start) started.push_back(std::move(w->on_start));
      lock.unlock();
      for (auto& f : started) f();

      const auto began = Clock::now();
      BuildRunResult r = run_build(store_, options_, sources_, slot, job->spec, job->cancel);
      const double seconds = std::chrono::duration<double>(Clock::now() - began).count();

      std::vector<Delivery> ds;
      lock.lock();
      --running_[s];
      cv_.notify_all();  // an idle job may start now
      if (r.cancelled && job->cancel.set_aside && !stopping_ && !job->cancel.unwanted) {
        // Queued again as it was, waiters and all; it starts when the slot is idle again
        // (or at once if a request raised its priority meanwhile).
        job->cancel.set_aside = false;
        job->cancel.requested = false;
        job->state = "queued";
        job->started_at = 0;
        queues_[s].push_back(job);
        continue;
      }
      if (r.ran_worker) {
        ++started_;
        ++(r.info ? ok_ : r.cancelled ? cancelled_ : failed_);
        record_seconds_locked(job->spec.key.kind, r.info ? "succeeded" : r.cancelled ? "cancelled" : "failed", seconds);
      }
      finish_job_locked(*job, r.info ? "done" : r.cancelled ? "cancelled" : "failed", r.info, ds);
      lock.unlock();
      deliver(ds);
      lock.lock();
    }
  }

  // Source checks (PUT_SOURCE): the worker's hash op, off the slots and off kilnd's
  // threads, first come first served.
  void check_loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      check_cv_.wait(lock, [&] { return stopping_ || !checks_.empty(); });
      if (stopping_) return;
      PendingCheck c = std::move(checks_.front());
      checks_.pop_front();
      lock.unlock();
      Status st = c.work(&checks_cancel_);
      c.done(std::move(st));
      c = PendingCheck{};  // the check's file goes with its work, outside the lock
      lock.lock();
    }
  }

  void timer_loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      if (stopping_) return;
      if (deadlines_.empty()) {
        timer_cv_.wait(lock);
        continue;
      }
      auto first = deadlines_.begin()->first;
      if (Clock::now() < first) {
        timer_cv_.wait_until(lock, first);
        continue;
      }
      std::vector<Delivery> ds;
      while (!deadlines_.empty() && deadlines_.begin()->first <= Clock::now()) {
        auto w = deadlines_.begin()->second.lock();
        deadlines_.erase(deadlines_.begin());
        if (!w || w->finished) continue;
        auto job = w->job.lock();
        BuildCallback cb = std::move(w->done);
        std::string state = job ? job->state : "gone";
        std::string hex = job ? job->spec.digest.hex() : "?";
        const Left left = detach_waiter_locked(w);
        std::string what =
            left == Left::build_goes_on
                ? "the build goes on for whoever else wants it and its artifact will be stored: ask again later, "
                  "or wait longer (wait_ms)"
                : std::string("nobody else wanted it, so it was ") + (left == Left::dropped ? "dropped" : "cancelled") +
                      ": wait longer (wait_ms), or submit it without waiting (BUILD with wait=false, "
                      "`kilnctl build --no-wait`, a prewarm) to have it built in the background";
        ds.emplace_back(std::move(cb), make_error(Errc::timeout, "gave up waiting for the build of " + hex + " (it was " +
                                                                     state + "); " + what));
      }
      lock.unlock();
      deliver(ds);
      lock.lock();
    }
  }

  struct PendingCheck {
    CheckWork work;
    std::function<void(Status)> done;
  };
  static constexpr int kCheckThreads = 2;

  const SchedulerOptions options_;
  storage::Store& store_;
  const ProbedNode probed_;
  const int work_lock_;   // flock on work_dir/LOCK: one scheduler per work folder
  SourceCopies sources_;  // thread-safe itself

  mutable std::mutex mu_;
  std::condition_variable cv_;        // slot threads: work queued or stopping
  std::condition_variable timer_cv_;  // timer thread: a new deadline or stopping
  std::condition_variable check_cv_;  // check threads: a source check queued or stopping
  std::atomic<bool> checks_cancel_{false};  // set at stop: running hash ops are killed
  // State below is protected by mu_.
  bool stopping_ = false;
  std::uint64_t seq_ = 0;
  std::unordered_map<Digest, std::shared_ptr<Job>> jobs_;  // queued and running, by key digest
  std::vector<std::vector<std::shared_ptr<Job>>> queues_;  // per slot: queued jobs
  std::vector<std::size_t> running_;                       // per slot
  std::multimap<Clock::time_point, std::weak_ptr<WaiterState>> deadlines_;
  std::deque<JobReport> recent_;
  std::deque<PendingCheck> checks_;  // source checks not started yet
  std::uint64_t started_ = 0, ok_ = 0, failed_ = 0, cancelled_ = 0;
  std::vector<protocol::BuildSeconds> build_seconds_;  // a few: one per kind and outcome

  std::vector<std::thread> threads_;
};

namespace {

class WaiterImpl final : public Waiter {
 public:
  WaiterImpl(std::weak_ptr<Core> core, std::shared_ptr<WaiterState> state)
      : core_(std::move(core)), state_(std::move(state)) {}
  ~WaiterImpl() override {
    if (!detached_) leave();
  }
  void leave() override {
    if (auto c = core_.lock()) c->leave(state_);
  }
  void detach() override { detached_ = true; }

 private:
  std::weak_ptr<Core> core_;
  std::shared_ptr<WaiterState> state_;
  bool detached_ = false;
};

class SchedulerImpl final : public BuildScheduler {
 public:
  explicit SchedulerImpl(std::shared_ptr<Core> core) : core_(std::move(core)) {}
  ~SchedulerImpl() override { core_->stop(); }

  NodeFields node() const override { return core_->node(); }
  NodeReport report() const override { return core_->report(); }
  std::unique_ptr<Waiter> request(const Key& key, const RequestOptions& options, BuildCallback done) override {
    auto w = core_->request(key, options, std::move(done));
    return std::make_unique<WaiterImpl>(core_, std::move(w));
  }
  std::vector<JobReport> jobs() const override { return core_->jobs(); }
  std::optional<JobReport> job(const Digest& d) const override { return core_->job(d); }
  Result<std::unique_ptr<daemon::SourceCheck>> begin_source_check() override { return core_->begin_source_check(core_); }

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace

BuildScheduler::Prepared::Prepared(SchedulerOptions options, storage::Store& store, int work_lock)
    : options_(std::move(options)), store_(&store), work_lock_(work_lock) {}

BuildScheduler::Prepared::Prepared(Prepared&& o) noexcept
    : options_(std::move(o.options_)), store_(o.store_), work_lock_(std::exchange(o.work_lock_, -1)) {}

BuildScheduler::Prepared::~Prepared() {
  if (work_lock_ >= 0) ::close(work_lock_);
}

Result<std::unique_ptr<BuildScheduler>> BuildScheduler::create(SchedulerOptions options, storage::Store& store,
                                                               const NodeFields& host) {
  auto prepared = prepare(std::move(options), store);
  if (!prepared) return std::move(prepared).error();
  return start(std::move(*prepared), host);
}

Result<BuildScheduler::Prepared> BuildScheduler::prepare(SchedulerOptions options, storage::Store& store) {
  if (options.worker.argv.empty())
    return make_error(Errc::invalid_argument, "builds: no worker command configured ([builds] worker)");
  if (options.builds_per_slot == 0) return make_error(Errc::invalid_argument, "builds: builds_per_slot must be at least 1");
  if (options.work_dir.empty()) return make_error(Errc::invalid_argument, "builds: no work folder configured");
  std::error_code ec;
  std::filesystem::create_directories(options.work_dir / "jobs", ec);
  if (ec) return make_error(Errc::io_error, "builds: cannot create " + options.work_dir.string() + ": " + ec.message());
  // The sweep below must not remove the scratch of another scheduler's running builds.
  const std::string lock_path = (options.work_dir / "LOCK").string();
  int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0) return error_from_errno(errno, "builds: cannot open " + lock_path);
  if (::flock(lock, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock);
    return make_error(Errc::busy, "builds: the work folder " + options.work_dir.string() +
                                      " is in use by another kilnd; give each kilnd its own ([builds] work_dir)");
  }
  // Scratch of builds a previous kilnd did not finish (it was killed): job folders, source
  // copies and partial copies, and the files of source checks.
  for (const char* sub : {"jobs", "sources", "checks"}) {
    for (auto it = std::filesystem::directory_iterator(options.work_dir / sub, ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      // A job folder whose worker still runs (kilnd was SIGKILLed): its group is killed
      // first, or it would keep the GPU. Only with a record naming that very process.
      if (std::string_view(sub) == "jobs") (void)kill_leftover_group(it->path());
      std::error_code rm;
      std::filesystem::remove_all(it->path(), rm);
      if (rm) spdlog::warn("builds: cannot remove the leftover {}: {}", it->path().string(), rm.message());
    }
    ec.clear();
  }

  return Prepared(std::move(options), store, lock);
}

std::unique_ptr<BuildScheduler> BuildScheduler::start(Prepared prepared, const NodeFields& host,
                                                      const std::atomic<bool>* cancel) {
  ProbedNode probed = probe_node(prepared.options_, host, cancel);
  auto core = std::make_shared<Core>(std::move(prepared.options_), *prepared.store_, std::move(probed),
                                     std::exchange(prepared.work_lock_, -1));
  core->start();
  return std::make_unique<SchedulerImpl>(std::move(core));
}

Result<storage::ArtifactInfo> BuildScheduler::request_and_wait(const Key& key, const RequestOptions& options) {
  auto promise = std::make_shared<std::promise<Result<storage::ArtifactInfo>>>();
  auto future = promise->get_future();
  auto waiter = request(key, options, [promise](Result<storage::ArtifactInfo> r) { promise->set_value(std::move(r)); });
  return future.get();
}

}  // namespace kiln::build
