// Helpers for the scheduler tests: a store in a TempDir, sources that command the test
// worker (tests/support/test_worker.cpp), keys for the test node, counting builds (from the
// scheduler's own log: the sandboxed worker writes nothing outside its build's folder).
#pragma once

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <memory>
#include <sstream>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include "kiln/builds/scheduler.hpp"
#include "kiln/key.hpp"
#include "kiln/storage/store.hpp"
#include "kilnd_builds.hpp"
#include "temp_dir.hpp"
#include "wait_until.hpp"

namespace kiln::test {

using Outcome = Result<storage::ArtifactInfo>;

// One request's answer from the scheduler: the callback to give it, the Waiter it returns
// (dropping it leaves the build), and the outcome once it comes.
struct Pending {
  std::shared_ptr<std::promise<Outcome>> promise = std::make_shared<std::promise<Outcome>>();
  std::future<Outcome> future = promise->get_future();
  std::unique_ptr<build::Waiter> waiter;

  build::BuildCallback callback() {
    return [p = promise](Outcome r) { p->set_value(std::move(r)); };
  }
  // The outcome; the test fails (REQUIRE) when none comes within `limit`.
  Outcome get(std::chrono::seconds limit = std::chrono::seconds(30)) {
    REQUIRE(future.wait_for(limit) == std::future_status::ready);
    return future.get();
  }
  bool answered() { return future.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }
};

// A file the test worker waits on while it exists (a source's "holds"): a build that stays
// running until the test is ready, not for a time a loaded machine may outlast.
struct Hold {
  std::filesystem::path file;
  explicit Hold(std::filesystem::path f) : file(std::move(f)) { std::ofstream(file) << "held\n"; }
  Hold(const Hold&) = delete;
  Hold& operator=(const Hold&) = delete;
  ~Hold() { release(); }
  // The value of a source's "holds": every build of it waits.
  nlohmann::json holds() const { return nlohmann::json::array({{{"file", file.string()}, {"only", ""}}}); }
  void release() {
    std::error_code ec;
    std::filesystem::remove(file, ec);
  }
};

inline std::string message(const Outcome& r) { return r ? "ok" : r.error().to_string(); }

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The pids of the test workers seen running so far, in the order they were first seen
// (each one's record in its build's folder): call it while they run, e.g. in wait_until.
class WorkerPids {
 public:
  explicit WorkerPids(const struct BuildFixture& f) : f_(f) {}
  // The n-th worker's pid; 0 while fewer have been seen.
  pid_t operator()(std::size_t n);

 private:
  const struct BuildFixture& f_;
  std::vector<pid_t> seen_;
};

// Every line spdlog's default logger writes while this lives (the scheduler logs there):
// "build <digest> started on <slot> (...)" is how the tests count builds (build_starts).
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<Sink>()) { spdlog::default_logger()->sinks().push_back(sink_); }
  ~LogCapture() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  std::string text() const {
    std::lock_guard lock(sink_->text_mu);
    return sink_->text;
  }

 private:
  struct Sink : spdlog::sinks::base_sink<std::mutex> {
    std::mutex text_mu;
    std::string text;
    void sink_it_(const spdlog::details::log_msg& msg) override {
      std::lock_guard lock(text_mu);
      text.append(msg.payload.data(), msg.payload.size());
      text += '\n';
    }
    void flush_() override {}
  };
  std::shared_ptr<Sink> sink_;
};

struct BuildFixture {
  LogCapture log;   // first: outlives the schedulers a test makes
  TempDir dir;
  std::unique_ptr<storage::Store> store;
  build::SchedulerOptions options;
  NodeFields host;

  BuildFixture() {
    storage::StoreOptions so;
    so.root = dir / "store";
    auto s = storage::Store::open(so);
    REQUIRE_MESSAGE(s.has_value(), (s ? "" : s.error().to_string()));
    store = std::move(*s);
    options.worker.argv = {KILN_TEST_WORKER};
    options.work_dir = dir / "work";
    options.probe_gpus = false;
    options.slots = {build::SlotConfig{"gpu0", "sm_test", "Test GPU", "", 0}};
    options.build_timeout = std::chrono::seconds(20);
    options.probe_timeout = std::chrono::seconds(20);
    host.platform = "linux";
    host.machine = "x86_64";
    host.cpu_isa = "test-isa";
  }

  // Registers a source whose content commands the test worker; returns its model hash.
  std::string add_source(const nlohmann::json& command) {
    std::string text = command.dump();
    std::string hash = sha256(text).hex();
    auto stream = store->begin_put();
    REQUIRE(stream.has_value());
    REQUIRE((*stream)->write(std::as_bytes(std::span(text.data(), text.size()))).has_value());
    auto info = store->put_source(hash, std::move(*stream), "test-source.json");
    REQUIRE_MESSAGE(info.has_value(), (info ? "" : info.error().to_string()));
    return hash;
  }

  // A complete key for the test node (the test worker's toolchain, slot gpu0).
  Key key(const std::string& model_hash, const std::string& region = "Block") const {
    Key k;
    k.kind = ArtifactKind::aoti;
    k.model_hash = model_hash;
    k.region = region;
    k.gpu_arch = "sm_test";
    k.gpu_name = "Test GPU";
    k.torch_version = "test-torch";
    k.torch_git = "test-git";
    k.cuda_version = "test-cuda";
    k.triton_version = "test-triton";
    k.platform = "linux";
    k.machine = "x86_64";
    k.cpu_isa = "test-isa";
    k.dtype = "bfloat16";
    k.inputs = {{{Dim::fixed(1), Dim::fixed(4608), Dim::fixed(3072)}, "bfloat16", "strided"}};
    return k;
  }

  std::unique_ptr<build::BuildScheduler> scheduler() {
    auto s = build::BuildScheduler::create(options, *store, host);
    REQUIRE_MESSAGE(s.has_value(), (s ? "" : s.error().to_string()));
    return std::move(*s);
  }

  // Builds started (workers spawned) since the fixture was made, in start order.
  std::vector<BuildStart> starts() const { return build_starts(log.text()); }
  std::size_t builds() const { return starts().size(); }
  // The regions of the builds started, in order, one per line.
  std::string started_regions() const {
    std::string s;
    for (const auto& b : starts()) s += b.region + "\n";
    return s;
  }
  // The test workers running now (their pids, and a hang_child's child).
  std::vector<RunningTestWorker> running() const { return running_test_workers(options.work_dir); }
  // The pid of the worker of `key`'s last recorded build, from its log ("test worker:
  // started <region> <pid> ..."); 0 when none is recorded or it never got that far.
  pid_t logged_worker_pid(const Key& key) const {
    auto rec = store->last_build(*key.digest());
    if (!rec || !*rec) return 0;
    const std::string& log = (*rec)->log;
    const std::string mark = "test worker: started ";
    const auto at = log.find(mark);
    if (at == std::string::npos) return 0;
    std::istringstream in(log.substr(at + mark.size()));
    std::string region;
    pid_t pid = 0;
    in >> region >> pid;
    return pid;
  }
};

inline pid_t WorkerPids::operator()(std::size_t n) {
  for (const auto& w : f_.running())
    if (std::find(seen_.begin(), seen_.end(), w.pid) == seen_.end()) seen_.push_back(w.pid);
  return n < seen_.size() ? seen_[n] : 0;
}

}  // namespace kiln::test
