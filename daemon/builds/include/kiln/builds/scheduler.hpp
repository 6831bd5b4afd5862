// kiln/builds/scheduler.hpp — builds on a miss: per-GPU queues, single flight, workers.
//
// A BuildScheduler turns "I need the artifact of this key" into exactly one build of it,
// however many callers ask at once, on the GPU the key names, in a worker process
// (schema/worker-protocol.md), and stores what that build produced in the Store.
//
//  - Slots: one queue per GPU found by the driver probe (or per configured slot, so a
//    node without a GPU can build CPU-target artifacts and tests can run with a test
//    worker). Each slot runs `builds_per_slot` builds at a time (default 1). Interactive
//    requests are taken before prewarm ones, first come first served within a priority.
//  - Idle builds (Priority::idle: faster variants of packages already served) use a slot's
//    idle time only: one starts when its slot runs nothing and has nothing else queued,
//    and a build queued for the slot meanwhile sets it aside (worker stopped, job queued
//    again, not a failure; its waiters keep waiting). A request of a higher priority for
//    an idle job's key makes it that priority.
//  - Single flight: a request for a key already queued or building joins that build.
//  - Waiters: a request's callback is called exactly once with the outcome, unless its
//    Waiter leaves first (destroyed or leave()): then never. A waiter whose wait limit
//    passes leaves too (its callback gets Errc::timeout).
//  - A build counts who wants it: its interactive waiters, and any prewarm request, which
//    wants it until it ends. When the last waiter leaves a build no prewarm wants
//    (cancel_unwanted, the default): a queued build is dropped (it never starts); a running
//    one has its worker's process group killed (as for a timeout) and ends "cancelled".
//    Neither is a failure: nothing goes into the negative cache (a running one's log is
//    recorded, its error starting "cancelled: "), and the next request for the key starts
//    a fresh build at once. With cancel_unwanted = false every build runs to its end.
//  - Failures: a worker that fails, crashes, hangs past the timeout (its process group is
//    killed), writes nothing or writes garbage fails the build for its waiters, never the
//    daemon. The outcome and the worker's stderr are recorded (Store::record_build). A
//    failed key fails fast for `failure_ttl` (negative cache, from Store::last_build, so it
//    survives restarts) unless the request forces a rebuild.
//  - Source checks (PUT_SOURCE): begin_source_check() holds an upload in a file under
//    work_dir/checks; its verify() runs the worker's `hash` op on a check thread of the
//    scheduler's own (two, first come first served; never a caller's or a slot's thread),
//    bounded by source_check_timeout, with the first slot's CUDA_VISIBLE_DEVICES. Only a
//    node that can build checks (a slot and a toolchain); otherwise nullptr.
//  - Refusals, immediate: Errc::unsupported when no slot can build the key's GPU, when the
//    node has no GPU or slot at all, or when the key's toolchain or host fields are not
//    this node's; Errc::no_source when no source is registered for the key's model hash.
//
// Thread safety: every method may be called from any thread. Callbacks run on a scheduler
// thread, or inside request() itself when the answer is immediate; they must not block
// for long and may call back into the scheduler (including Waiter::leave()).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/builds/gpu_probe.hpp"
#include "kiln/builds/worker_process.hpp"
#include "kiln/daemon/build_service.hpp"
#include "kiln/digest.hpp"
#include "kiln/key.hpp"
#include "kiln/result.hpp"
#include "kiln/storage/store.hpp"

namespace kiln::build {

// interactive: someone waits; prewarm: wanted until it ends; idle: wanted until it ends,
// started only on a slot with nothing else running or queued, and set aside (its worker
// stopped, the job queued again) when another build is queued for its slot.
enum class Priority { interactive = 0, prewarm = 1, idle = 2 };
enum class Force { no, yes };

// A place builds run: one GPU (or a configured CPU slot).
struct SlotConfig {
  std::string name;          // for status and logs, e.g. "gpu0"
  std::string gpu_arch;      // keys this slot builds: key.gpu_arch and key.gpu_name must match
  std::string gpu_name;
  std::string visible_device;  // CUDA_VISIBLE_DEVICES for its workers ("" = leave unset)
  std::uint64_t memory_bytes = 0;
};

struct SchedulerOptions {
  WorkerCommand worker;                  // e.g. {"python3", ".../ops/workers/kiln_worker"}
  // Created; holds LOCK, jobs/ (one scratch folder per running build), sources/ (source
  // copies of running builds) and compiler-cache/ (Inductor's and Triton's, shared by the
  // node's builds: compiler_cache.hpp). Nothing else of a build stays after it ends (but
  // see keep_failed_work); build logs live in the store.
  std::filesystem::path work_dir;
  // Slots; empty = one per GPU the driver probe finds (none: builds are refused).
  std::vector<SlotConfig> slots;
  bool probe_gpus = true;                // false: use only `slots`
  unsigned builds_per_slot = 1;
  // One Inductor/Triton cache for the node's builds and probe (compiler_cache.hpp); false:
  // each build compiles with fresh caches of its own (SECURITY.md: what sharing trusts).
  bool shared_compiler_cache = true;
  std::chrono::milliseconds build_timeout{std::chrono::minutes(30)};
  std::chrono::milliseconds probe_timeout{std::chrono::minutes(3)};
  // A source's hash op at registration (PUT_SOURCE): killed with its group past this.
  std::chrono::milliseconds source_check_timeout{std::chrono::minutes(10)};
  std::chrono::seconds failure_ttl{std::chrono::minutes(10)};  // 0 = failures not remembered
  std::size_t max_log_bytes = 1u << 20;
  bool keep_failed_work = false;         // leave a failed build's scratch folder for debugging
  // Stop a build nobody waits for any more (and no prewarm wants): dropped when queued,
  // its worker killed when running. false: every build runs to its end and is stored.
  bool cancel_unwanted = true;
};

struct SlotReport {
  SlotConfig config;
  std::size_t queued = 0;
  std::size_t running = 0;
  unsigned builds_at_once = 1;  // builds_per_slot
};

// What the scheduler learned about its node at start.
struct NodeReport {
  std::vector<GpuInfo> gpus;             // from the driver probe
  std::string gpu_note;                  // why none, when none
  NodeFields toolchain;                  // torch/CUDA/Triton versions from the worker's probe
  std::string toolchain_error;           // why they are unknown, when unknown
  // Why this node builds nothing at all, for "this node cannot build: <refusal>"; "" = it
  // can build. Set at start: no build slot, or no toolchain (e.g. the worker has no torch).
  std::string refusal;
  std::vector<SlotReport> slots;
  std::uint64_t builds_started = 0, builds_ok = 0, builds_failed = 0;
  std::uint64_t builds_cancelled = 0;    // workers stopped because nobody wanted their build
  // How long the builds that ran a worker took, per key kind and outcome.
  std::vector<protocol::BuildSeconds> build_seconds;
};

struct JobReport {
  Digest key_digest;
  std::string state;                     // "queued" | "running" | "done" | "failed" | "cancelled"
  Priority priority = Priority::interactive;
  std::int64_t queued_at = 0, started_at = 0, finished_at = 0;  // unix seconds; 0 = not yet
  std::string slot;
  std::string error;
  std::size_t waiters = 0;
};

struct RequestOptions {
  Priority priority = Priority::interactive;
  Force force = Force::no;
  // The waiter leaves with Errc::timeout after this long (the build goes on if someone
  // else still wants it). 0 = no limit (the build itself is bounded by build_timeout).
  std::chrono::milliseconds wait{0};
  // Called once when the build this request waits on starts running (not for an answer
  // from the store or a build already running when the request joined). Optional.
  std::function<void()> on_start;
};

using BuildCallback = std::function<void(Result<storage::ArtifactInfo>)>;

// One caller's interest in one build. Destroying it (or leave()) before the callback ran
// means the callback will not run, and may stop the build (see "A build counts who wants
// it"). detach() lets the request run to its outcome (or its wait limit) without holding
// the handle; leave() still works after detach(). leave() is idempotent and may be called
// from any thread, also from inside a callback.
class Waiter {
 public:
  virtual ~Waiter() = default;
  virtual void leave() = 0;
  virtual void detach() = 0;
};

class BuildScheduler {
 public:
  // Probes the GPUs (unless disabled) and asks the worker for its toolchain (waiting up to
  // probe_timeout), then starts the slot threads. Neither probe failing is an error: the
  // scheduler then refuses builds with a message saying why. `host` gives the node's host
  // fields (platform, machine, cpu_isa) and any configured node fields, which win over
  // probed ones. invalid_argument: no worker command, builds_per_slot 0; io_error: the work
  // folder cannot be created; busy: another scheduler holds the work folder (its LOCK
  // file). At start, what a killed kilnd left in work_dir (build scratch folders, source
  // copies) is removed. `store` is not owned and must outlive the scheduler.
  static Result<std::unique_ptr<BuildScheduler>> create(SchedulerOptions options, storage::Store& store,
                                                        const NodeFields& host);

  // create() in two steps, so that kilnd can serve while the slow one runs:
  // prepare() does everything that can fail (the options, the work folder, its lock, the
  // sweep of leftovers) and takes no time to speak of; start() probes (seconds, or minutes
  // on a fresh GPU node: the worker imports torch) and cannot fail. Destroying a Prepared
  // unused gives the work folder back.
  class Prepared {
   public:
    Prepared(Prepared&&) noexcept;
    Prepared& operator=(Prepared&&) = delete;
    ~Prepared();

   private:
    friend class BuildScheduler;
    Prepared(SchedulerOptions options, storage::Store& store, int work_lock);
    SchedulerOptions options_;
    storage::Store* store_;
    int work_lock_;  // flock on work_dir/LOCK, handed to the scheduler by start()
  };
  static Result<Prepared> prepare(SchedulerOptions options, storage::Store& store);
  // `cancel` (may be null): once set, the worker's probe is stopped (kilnd is stopping);
  // the scheduler then refuses builds.
  static std::unique_ptr<BuildScheduler> start(Prepared prepared, const NodeFields& host,
                                               const std::atomic<bool>* cancel = nullptr);
  // Fails every queued request with Errc::cancelled, kills running workers, joins threads.
  virtual ~BuildScheduler() = default;

  // Complete node fields of this node (configured > probed): what "this node" means in keys.
  virtual NodeFields node() const = 0;
  virtual NodeReport report() const = 0;

  // Asks for the artifact of `key` (complete; fill_node_fields first). The callback gets
  // the stored artifact's info: at once if stored (and not forced), else when the build
  // finishes. Errors: invalid_argument (incomplete/malformed key), unsupported, no_source,
  // build_failed (this build, or a recent failure: the message says when and how to
  // retry), timeout (options.wait expired), cancelled (shutdown), and the store's own
  // errors.
  [[nodiscard]] virtual std::unique_ptr<Waiter> request(const Key& key, const RequestOptions& options,
                                                        BuildCallback done) = 0;

  // Blocking convenience over request(): waits up to options.wait (0 = until done).
  Result<storage::ArtifactInfo> request_and_wait(const Key& key, const RequestOptions& options);

  // A check of one uploaded source (kiln/daemon/build_service.hpp, SourceCheck) when this
  // node can build (a slot, and a worker that reported its toolchain), else nullptr.
  // io_error: the check's file under work_dir/checks cannot be created.
  virtual Result<std::unique_ptr<daemon::SourceCheck>> begin_source_check() = 0;

  // Builds queued, running, and the most recent finished ones (newest last).
  virtual std::vector<JobReport> jobs() const = 0;
  virtual std::optional<JobReport> job(const Digest& key_digest) const = 0;
};

}  // namespace kiln::build
