// One build, start to finish. See build_runner.hpp.
#include "build_runner.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>
#include <thread>
#include <system_error>

#include <spdlog/spdlog.h>

#include "kiln/aoti_metadata.hpp"
#include "kiln/builds/worker_protocol.hpp"
#include "compiler_cache.hpp"
#include "kiln/posix/fd.hpp"
#include "worker_group.hpp"

namespace kiln::build {

namespace {

// The package a worker built must agree with the key it is stored under, as a PUT's must
// (kiln/aoti_metadata.hpp): a package for another CPU ISA, GPU or platform under this key
// would be refused by every loader (or crash one that does not check). build_failed naming
// the field; the usual cause is kilnd's [node] table setting a field the worker's torch
// sees otherwise.
Status check_built_package(const Key& key, const std::filesystem::path& output) {
  posix::UniqueFd fd(::open(output.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st{};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0)
    return make_error(Errc::build_failed, "cannot read the built package " + output.string());
  if (st.st_size == 0) return {};
  void* map = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (map == MAP_FAILED) return make_error(Errc::build_failed, "cannot map the built package " + output.string());
  auto meta = read_aoti_metadata(std::span(static_cast<const std::byte*>(map), static_cast<std::size_t>(st.st_size)));
  Status verdict;
  if (!meta) verdict = make_error(Errc::build_failed, "the built package's AOTI metadata: " + meta.error().message);
  else if (*meta) {
    if (auto ok = check_aoti_metadata(key, **meta); !ok)
      verdict = make_error(Errc::build_failed, "the worker built a package that does not match its key: " +
                                                   ok.error().message + " (is kilnd.toml's [node] table right for this node?)");
  }
  ::munmap(map, static_cast<std::size_t>(st.st_size));
  return verdict;
}

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A build's scratch folder, gone. A failure to remove is logged, not the build's error.
void remove_scratch(const fs::path& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) spdlog::warn("builds: cannot remove the scratch folder {}: {}", dir.string(), ec.message());
}

// The build's folder as its worker gets it: writable in the sandbox, a private TMPDIR in it
// (the CUDA JIT cache too), owned by the worker's user when kilnd switches to one.
Status prepare_worker_folder(const fs::path& dir, WorkerCommand& cmd) {
  std::error_code ec;
  const fs::path tmp = dir / "tmp";
  if (!fs::create_directory(tmp, ec) && ec)
    return make_error(Errc::io_error, "cannot create the build's TMPDIR " + tmp.string() + ": " + ec.message());
  cmd.env["TMPDIR"] = tmp.string();
  cmd.env["CUDA_CACHE_PATH"] = (dir / "cuda-cache").string();
  cmd.sandbox.writable.push_back(dir);
  if (const auto& user = cmd.sandbox.user) {
    for (const fs::path& p : {dir, tmp})
      if (::chown(p.c_str(), user->uid, user->gid) != 0)
        return error_from_errno(errno, "cannot give the build folder " + p.string() + " to worker_user " + user->name);
  }
  return {};
}

}  // namespace

std::optional<Error> recent_failure(storage::Store& store, const Digest& digest, std::chrono::seconds ttl) {
  if (ttl.count() <= 0) return std::nullopt;
  auto last = store.last_build(digest);
  if (!last || !*last || (*last)->ok) return std::nullopt;
  const auto& rec = **last;
  if (rec.error.starts_with(kCancelledRecordPrefix)) return std::nullopt;
  std::int64_t age = unix_now() - rec.finished_at;
  if (age < 0 || age >= ttl.count()) return std::nullopt;
  return make_error(Errc::build_failed,
                    "the build of " + digest.hex() + " failed " + std::to_string(age) + " s ago: " + rec.error +
                        " (not retried for another " + std::to_string(ttl.count() - age) +
                        " s; see `kilnctl logs " + digest.hex() + "`, or retry now with `kilnctl build --force`)");
}

BuildRunResult run_build(storage::Store& store, const SchedulerOptions& options, SourceCopies& sources,
                         const SlotConfig& slot, const BuildJobSpec& job, const BuildCancel& cancel) {
  BuildRunResult out;
  const std::string hex = job.digest.hex();
  // Rechecked here, inside single flight: a build that finished between a request's own
  // check and its joining the queue must not be run twice.
  if (!job.force) {
    auto st = store.stat(job.digest);
    if (!st) return {std::move(st).error(), false};
    if (*st) return {std::move(**st), false};
    if (auto e = recent_failure(store, job.digest, options.failure_ttl)) return {std::move(*e), false};
  }
  const auto t0 = Clock::now();
  const std::int64_t started_at = unix_now();
  auto src = store.stat_source(job.key.model_hash);
  if (!src) return {std::move(src).error(), false};
  if (!*src)
    return {make_error(Errc::no_source, "no source is registered for model hash " + job.key.model_hash +
                                            "; register the block's torch.export archive with `kilnctl source add FILE`"),
            false};
  auto cancelled = [&](const std::string& when) {
    BuildRunResult r;
    r.cancelled = true;
    r.info = make_error(Errc::cancelled, "the build of " + hex + " was cancelled " + when + ": " +
                                             (cancel.unwanted     ? "nobody waited for it any more"
                                              : cancel.set_aside ? "another build needed its slot (an idle build; queued again)"
                                                                 : "kilnd is shutting down"));
    return r;
  };
  if (cancel.requested) return cancelled("before it started");
  fs::path dir = options.work_dir / "jobs" / (hex.substr(0, 16) + "-" + std::to_string(job.seq));
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (!fs::create_directories(dir, ec) && ec)
    return {make_error(Errc::io_error, "cannot create the build folder " + dir.string() + ": " + ec.message()), false};

  // The source is copied out of the store while the worker starts Python and imports
  // torch (seconds): the request goes to the worker once the copy is ready, so a 700 MB
  // source adds nothing to the miss. A failed copy closes the worker's stdin (it exits)
  // and is the build's error.
  // The lease keeps the copy until this function returns, whatever the outcome.
  auto source_future = std::async(std::launch::async, [&store, &sources, &src, t0] {
    auto r = sources.acquire(store, **src);
    return std::make_pair(std::move(r), since(t0));
  });
  SourceCopies::Lease source_lease;
  std::optional<Error> source_error;
  double source_s = 0;
  BuildJobPaths paths{{}, dir / "artifact", dir};
  bool source_taken = false;
  PendingRequest pending = [&]() -> std::optional<std::string> {
    if (source_taken) return std::nullopt;
    if (source_future.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return std::nullopt;
    source_taken = true;
    auto [path, seconds] = source_future.get();
    source_s = seconds;
    if (!path) {
      source_error = std::move(path).error();
      return std::string();
    }
    source_lease = *path;
    paths.source = *source_lease;
    return encode_build_request(job.key, job.digest, paths);
  };

  WorkerCommand cmd = options.worker;
  if (!slot.visible_device.empty()) cmd.env["CUDA_VISIBLE_DEVICES"] = slot.visible_device;
  if (auto st = use_node_compiler_cache(options, cmd, dir); !st) {
    remove_scratch(dir);
    return {std::move(st).error(), false};
  }
  cmd.env["KILN_BUILD_SLOT"] = slot.name;
  // The sandbox lets the worker write its own folder (and what the options already list);
  // its TMPDIR is private, in that folder.
  if (auto st = prepare_worker_folder(dir, cmd); !st) {
    remove_scratch(dir);
    return {std::move(st).error(), false};
  }
  // The worker's group, for the start-up sweep of a kilnd started after this one is killed.
  // Not recording it only loses that; the build goes on.
  cmd.on_spawn = [&dir, &hex](int pid) {
    if (auto st = write_worker_group(dir, pid); !st)
      spdlog::warn("build {}: cannot record its worker's process group: {}", hex, st.error().to_string());
  };
  WorkerLimits limits;
  limits.timeout = options.build_timeout;
  limits.max_log = options.max_log_bytes;

  spdlog::info("build {} started on {} ({} {})", hex, slot.name, to_string(job.key.kind), job.key.region);
  out.ran_worker = true;
  WorkerExit exit = run_worker(cmd, pending, limits, &cancel.requested);
  if (!source_taken) {  // the worker ended before the source was ready: wait for the copy
    (void)pending();
    while (!source_taken) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      (void)pending();
    }
  }
  if (source_error) {
    remove_scratch(dir);
    out.info = std::move(*source_error);
    return out;
  }
  if (exit.how == WorkerExit::How::cancelled) {
    remove_scratch(dir);
    BuildRunResult c = cancelled("after " + std::to_string(static_cast<long>(exit.seconds)) + " s");
    c.ran_worker = true;
    spdlog::info("{}; its worker's process group was killed", c.info.error().message);
    if (cancel.unwanted) {
      // Kept for `kilnctl logs`, marked so that it is no negative-cache entry.
      storage::BuildRecord rec;
      rec.key_digest = job.digest;
      rec.started_at = started_at;
      rec.finished_at = unix_now();
      rec.ok = false;
      rec.error = std::string(kCancelledRecordPrefix) + "nobody waited for the build any more; its worker was stopped";
      rec.log = (exit.log_truncated ? "[kiln] log truncated to its last bytes\n" : "") + exit.log +
                "\n[kiln] build " + hex + " on " + slot.name + " cancelled after " + std::to_string(exit.seconds) +
                " s: nobody waited for it any more (every waiter left and no prewarm wanted it); its worker's "
                "process group was killed. Not a failure: the next request builds it again.\n";
      if (auto st = store.record_build(rec); !st)
        spdlog::warn("build {}: cannot record its cancel: {}", hex, st.error().to_string());
    }
    return c;
  }
  auto built = parse_build_result(exit, paths);
  if (built && job.key.kind == ArtifactKind::aoti) {
    if (auto st = check_built_package(job.key, paths.output); !st) built = std::move(st).error();
  }
  const auto t_store = Clock::now();
  Result<storage::ArtifactInfo> stored = make_error(Errc::internal, "not stored");
  if (built) {
    storage::PutMeta meta;
    meta.build_seconds = exit.seconds;
    meta.origin = "build";
    meta.publish = storage::Publish::yes;
    stored = store.put_file(job.key, paths.output, meta);
  }
  const double store_s = since(t_store);
  const Error* err = !built ? &built.error() : (!stored ? &stored.error() : nullptr);

  storage::BuildRecord rec;
  rec.key_digest = job.digest;
  rec.started_at = started_at;
  rec.finished_at = unix_now();
  rec.ok = err == nullptr;
  rec.error = err ? err->message : std::string();
  char summary[512];
  std::snprintf(summary, sizeof summary,
                "\n[kiln] build %s on %s: worker %s in %.3f s (%s); source ready in %.3f s (while the worker "
                "started); stored in %.3f s; total %.3f s\n",
                hex.c_str(), slot.name.c_str(), exit.describe().c_str(), exit.seconds,
                built ? built->summary.c_str() : "failed", source_s, store_s, since(t0));
  rec.log = (exit.log_truncated ? "[kiln] log truncated to its last bytes\n" : "") + exit.log +
            "\n[kiln] worker sandbox: " + exit.sandbox + summary;
  // A store that cannot take the artifact is not the source's fault: not remembered as a
  // failed build (which would refuse the key for failure_ttl), only logged.
  if (!built || stored) {
    if (auto st = store.record_build(rec); !st)
      spdlog::warn("build {}: cannot record its outcome: {}", hex, st.error().to_string());
  }
  if (err) {
    spdlog::warn("build {} failed: {}", hex, err->message);
    if (!options.keep_failed_work) remove_scratch(dir);
    out.info = *err;
  } else {
    spdlog::info("build {} done in {:.3f} s ({}); kiln's own share {:.3f} s", hex, since(t0), built->summary,
                 since(t0) - exit.seconds);
    remove_scratch(dir);
    out.info = std::move(*stored);
  }
  return out;
}

}  // namespace kiln::build
