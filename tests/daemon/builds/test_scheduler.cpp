// BuildScheduler with real worker processes (the test worker), a real Store, real threads.
#include "kiln/builds/scheduler.hpp"

#include <signal.h>

#include <fstream>
#include <future>
#include <thread>

#include <doctest/doctest.h>

#include "build_test_util.hpp"
#include "zip_writer.hpp"

using namespace kiln;
using namespace kiln::build;
using namespace std::chrono_literals;
using kiln::test::BuildFixture;
using kiln::test::Hold;
using kiln::test::message;
using kiln::test::Outcome;
using kiln::test::Pending;

namespace {

// This file's conditions are polled less often than the shared default does.
bool wait_until(const std::function<bool()>& cond) { return kiln::test::wait_until(cond, 30s, 20ms); }

}  // namespace

TEST_CASE("SixtyFourConcurrentRequestsForOneMissingKeyMakeExactlyOneBuild") {
  BuildFixture f;
  auto hash = f.add_source({{"behavior", "ok"}, {"sleep_ms", 300}});
  auto s = f.scheduler();
  const Key key = f.key(hash);
  std::vector<Outcome> results(64, make_error(Errc::internal, "not answered"));
  std::vector<std::thread> threads;
  for (int i = 0; i < 64; ++i)
    threads.emplace_back([&, i] { results[i] = s->request_and_wait(key, RequestOptions{}); });
  for (auto& t : threads) t.join();

  CHECK(f.builds() == 1);
  for (const auto& r : results) {
    REQUIRE_MESSAGE(r.has_value(), message(r));
    CHECK(r->key_digest == *key.digest());
    CHECK(r->blob_digest == results[0]->blob_digest);
  }
  auto bytes = f.store->get_bytes(*key.digest());
  REQUIRE(bytes.has_value());
  REQUIRE(bytes->has_value());
  CHECK((*bytes)->size() == results[0]->size);
  // A later request is a hit: no build.
  auto again = s->request_and_wait(key, RequestOptions{});
  CHECK(again.has_value());
  CHECK(f.builds() == 1);
  auto rec = f.store->last_build(*key.digest());
  REQUIRE(rec.has_value());
  REQUIRE(rec->has_value());
  CHECK((*rec)->ok);
  CHECK((*rec)->log.find("test worker: building Block") != std::string::npos);
  CHECK(s->report().builds_ok == 1);
}

TEST_CASE("DifferentKeysOfOneSourceEachBuildOnce") {
  BuildFixture f;
  auto hash = f.add_source({{"behavior", "ok"}});
  auto s = f.scheduler();
  for (int i = 0; i < 3; ++i) {
    auto r = s->request_and_wait(f.key(hash, "Block" + std::to_string(i)), RequestOptions{});
    CHECK_MESSAGE(r.has_value(), message(r));
  }
  CHECK(f.builds() == 3);
}

TEST_CASE("AWorkerPastTheTimeoutIsKilledWithItsProcessGroupAndFailsTheBuild") {
  BuildFixture f;
  f.options.build_timeout = 3s;  // time for the worker to start and fork on a loaded machine
  auto hash = f.add_source({{"behavior", "hang_child"}});
  auto s = f.scheduler();
  auto t0 = std::chrono::steady_clock::now();
  auto r = s->request_and_wait(f.key(hash), RequestOptions{});
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::build_failed);
  CHECK(r.error().message.find("timed out") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < 30s);  // not the worker's forever
  // The worker's own child went with the group (its pid is in the build's log).
  auto rec = f.store->last_build(*f.key(hash).digest());
  REQUIRE((rec.has_value() && rec->has_value()));
  const std::string& log = (*rec)->log;
  const auto at = log.find("test worker: child ");
  REQUIRE_MESSAGE(at != std::string::npos, "the worker was stopped before it forked: " << log);
  pid_t child = std::stoi(log.substr(at + 19));
  CHECK(wait_until([&] {
    if (::kill(child, 0) != 0) return true;
    std::string stat = kiln::test::read_text("/proc/" + std::to_string(child) + "/stat");
    return stat.find(") Z") != std::string::npos;  // killed, not yet reaped by init
  }));
  // A worker ignoring SIGTERM is killed too.
  auto hang = f.add_source({{"behavior", "hang"}});
  auto r2 = s->request_and_wait(f.key(hang), RequestOptions{});
  REQUIRE_FALSE(r2.has_value());
  CHECK(r2.error().message.find("timed out") != std::string::npos);
}

TEST_CASE("CrashesGarbageAndMissingOutputAreBuildErrorsWithTheirLogKept") {
  struct Case {
    const char* behavior;
    const char* expect;
  };
  const Case cases[] = {
      {"crash", "signal 11"},
      {"garbage", "not a JSON object"},
      {"nothing", "wrote no result"},
      {"two_lines", "expected one result line"},
      {"no_file", "wrote nothing"},
      {"wrong_digest", "differs from"},
      {"flood", "garbage"},
      {"fail", "failed on purpose"},
      {"ok_then_exit_1", "reported success but exited with status 1"},
  };
  BuildFixture f;
  auto s = f.scheduler();
  for (const auto& c : cases) {
    CAPTURE(c.behavior);
    auto hash = f.add_source({{"behavior", c.behavior}, {"log", std::string("log line of ") + c.behavior}});
    const Key key = f.key(hash);
    auto r = s->request_and_wait(key, RequestOptions{});
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == Errc::build_failed);
    CHECK_MESSAGE(r.error().message.find(c.expect) != std::string::npos, r.error().message);
    auto stored = f.store->stat(*key.digest());
    REQUIRE(stored.has_value());
    CHECK_FALSE(stored->has_value());
    auto rec = f.store->last_build(*key.digest());
    REQUIRE(rec.has_value());
    REQUIRE(rec->has_value());
    CHECK_FALSE((*rec)->ok);
    CHECK((*rec)->log.find(std::string("log line of ") + c.behavior) != std::string::npos);
    CHECK((*rec)->error == r.error().message);
  }
  // The scheduler still builds after all of that.
  auto good = f.add_source({{"behavior", "ok"}});
  auto r = s->request_and_wait(f.key(good), RequestOptions{});
  CHECK_MESSAGE(r.has_value(), message(r));
  CHECK(s->report().builds_failed == std::size(cases));
}

TEST_CASE("AFailedBuildIsRememberedForItsTtlAndForceRetriesIt") {
  BuildFixture f;
  f.options.failure_ttl = 600s;
  auto hash = f.add_source({{"behavior", "fail"}});
  const Key key = f.key(hash);
  {
    auto s = f.scheduler();
    auto r1 = s->request_and_wait(key, RequestOptions{});
    REQUIRE_FALSE(r1.has_value());
    CHECK(f.builds() == 1);
    auto r2 = s->request_and_wait(key, RequestOptions{});
    REQUIRE_FALSE(r2.has_value());
    CHECK(r2.error().code == Errc::build_failed);
    CHECK(r2.error().message.find("s ago") != std::string::npos);
    CHECK(r2.error().message.find("--force") != std::string::npos);
    CHECK(f.builds() == 1);  // failed fast, no second build
    RequestOptions force;
    force.force = Force::yes;
    auto r3 = s->request_and_wait(key, force);
    REQUIRE_FALSE(r3.has_value());
    CHECK(r3.error().message.find("failed on purpose") != std::string::npos);
    CHECK(f.builds() == 2);
  }
  // Remembered across a restart (it lives in the store's build records).
  {
    auto s = f.scheduler();
    auto r = s->request_and_wait(key, RequestOptions{});
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message.find("s ago") != std::string::npos);
    CHECK(f.builds() == 2);
  }
  // With no ttl every request builds again.
  f.options.failure_ttl = 0s;
  auto s = f.scheduler();
  auto r = s->request_and_wait(key, RequestOptions{});
  REQUIRE_FALSE(r.has_value());
  CHECK(f.builds() == 3);
}

TEST_CASE("AWaiterThatTimesOutLeavesAndTheBuildGoesOnForAnother") {
  BuildFixture f;
  auto hash = f.add_source({{"behavior", "ok"}, {"sleep_ms", 800}});
  auto s = f.scheduler();
  const Key key = f.key(hash);
  Pending patient;
  patient.waiter = s->request(key, RequestOptions{}, patient.callback());
  RequestOptions quick;
  quick.wait = 100ms;
  auto r = s->request_and_wait(key, quick);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::timeout);
  CHECK(r.error().message.find("the build goes on") != std::string::npos);
  CHECK(patient.get().has_value());
  CHECK(f.builds() == 1);
  // Alone, a waiter that times out stops the build: test_scheduler_cancel.cpp.
}

TEST_CASE("APrewarmBuildSurvivesItsWaitersLeavingButAnUnwantedQueuedBuildIsDropped") {
  BuildFixture f;
  Hold hold(f.dir / "hold");  // the slot stays busy until both waiters have left
  auto busy = f.add_source({{"behavior", "ok"}, {"holds", hold.holds()}});
  auto src = f.add_source({{"behavior", "ok"}});
  auto s = f.scheduler();
  Pending first;
  first.waiter = s->request(f.key(busy, "Busy"), RequestOptions{}, first.callback());
  REQUIRE(wait_until([&] { return f.builds() == 1; }));  // the slot is busy now

  RequestOptions prewarm;
  prewarm.priority = Priority::prewarm;
  Pending p;
  p.waiter = s->request(f.key(src, "Prewarmed"), prewarm, p.callback());
  Pending i;
  i.waiter = s->request(f.key(src, "Abandoned"), RequestOptions{}, i.callback());
  auto queued = s->jobs();
  CHECK(queued.size() == 3);
  p.waiter->leave();
  i.waiter.reset();  // destroying the handle leaves too
  hold.release();

  CHECK(first.get().has_value());
  const Key prewarmed = f.key(src, "Prewarmed");
  CHECK(wait_until([&] {
    auto st = f.store->stat(*prewarmed.digest());
    return st && st->has_value();
  }));
  std::this_thread::sleep_for(200ms);
  auto abandoned = f.store->stat(*f.key(src, "Abandoned").digest());
  REQUIRE(abandoned.has_value());
  CHECK_FALSE(abandoned->has_value());
  CHECK(f.builds() == 2);
  // Callbacks of waiters that left never ran.
  CHECK(p.future.wait_for(0s) == std::future_status::timeout);
  CHECK(i.future.wait_for(0s) == std::future_status::timeout);
}

TEST_CASE("InteractiveRequestsGoBeforePrewarmOnes") {
  BuildFixture f;
  Hold hold(f.dir / "hold");  // the slot stays busy until every request is queued
  auto busy = f.add_source({{"behavior", "ok"}, {"holds", hold.holds()}});
  auto src = f.add_source({{"behavior", "ok"}});
  auto s = f.scheduler();
  Pending first;
  first.waiter = s->request(f.key(busy, "Busy"), RequestOptions{}, first.callback());
  REQUIRE(wait_until([&] { return f.builds() == 1; }));
  RequestOptions prewarm;
  prewarm.priority = Priority::prewarm;
  std::vector<Pending> pre(3);
  for (int n = 0; n < 3; ++n) pre[n].waiter = s->request(f.key(src, "Pre" + std::to_string(n)), prewarm, pre[n].callback());
  Pending inter;
  inter.waiter = s->request(f.key(src, "Interactive"), RequestOptions{}, inter.callback());
  hold.release();
  CHECK(inter.get().has_value());
  for (auto& p : pre) CHECK(p.get().has_value());
  std::string order = f.started_regions();
  CHECK(order.find("Interactive") < order.find("Pre0"));
  CHECK(order.find("Pre0") < order.find("Pre1"));
}

TEST_CASE("ANodeWithoutGpuServesWhatItHasAndRefusesBuildsClearly") {
  BuildFixture f;
  f.options.slots.clear();
  auto hash = f.add_source({{"behavior", "ok"}});
  auto s = f.scheduler();
  const Key missing = f.key(hash, "Missing");
  auto r = s->request_and_wait(missing, RequestOptions{});
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::unsupported);
  CHECK(r.error().message.find("cannot build") != std::string::npos);
  CHECK(r.error().message.find("serves stored artifacts") != std::string::npos);
  // A stored artifact is still answered.
  const Key stored = f.key(hash, "Stored");
  std::string bytes = "prebuilt";
  REQUIRE(f.store->put_bytes(stored, std::as_bytes(std::span(bytes.data(), bytes.size()))).has_value());
  auto hit = s->request_and_wait(stored, RequestOptions{});
  CHECK_MESSAGE(hit.has_value(), message(hit));
  CHECK(f.builds() == 0);
  CHECK(s->report().slots.empty());
}

TEST_CASE("KeysForAnotherGpuOrToolchainAreRefusedAndNoSourceSaysWhichHash") {
  BuildFixture f;
  auto hash = f.add_source({{"behavior", "ok"}});
  auto s = f.scheduler();
  Key other_gpu = f.key(hash);
  other_gpu.gpu_arch = "sm_80";
  auto r1 = s->request_and_wait(other_gpu, RequestOptions{});
  REQUIRE_FALSE(r1.has_value());
  CHECK(r1.error().code == Errc::unsupported);
  CHECK(r1.error().message.find("sm_80") != std::string::npos);
  Key other_torch = f.key(hash);
  other_torch.torch_version = "2.10.0";
  auto r2 = s->request_and_wait(other_torch, RequestOptions{});
  REQUIRE_FALSE(r2.has_value());
  CHECK(r2.error().message.find("torch_version") != std::string::npos);
  const std::string unknown(64, 'a');
  auto r3 = s->request_and_wait(f.key(unknown), RequestOptions{});
  REQUIRE_FALSE(r3.has_value());
  CHECK(r3.error().code == Errc::no_source);
  CHECK(r3.error().message.find(unknown) != std::string::npos);
  CHECK(r3.error().message.find("kilnctl source add") != std::string::npos);
  Key incomplete = f.key(hash);
  incomplete.gpu_name.clear();
  auto r4 = s->request_and_wait(incomplete, RequestOptions{});
  REQUIRE_FALSE(r4.has_value());
  CHECK(r4.error().code == Errc::invalid_argument);
  CHECK(f.builds() == 0);
}

TEST_CASE("AFailedToolchainProbeRefusesBuildsWithItsReason") {
  BuildFixture f;
  f.options.worker.env["KILN_TEST_WORKER_TOOLCHAIN"] = "fail";
  auto hash = f.add_source({{"behavior", "ok"}});
  auto s = f.scheduler();
  CHECK(s->report().toolchain_error.find("No module named 'torch'") != std::string::npos);
  CHECK(s->report().refusal.find("its build worker has no torch (probe: ") == 0);
  auto r = s->request_and_wait(f.key(hash), RequestOptions{});
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::unsupported);
  CHECK_MESSAGE(r.error().message.find("this node cannot build: its build worker has no torch (probe: ") == 0,
                r.error().message);
}

// kilnd's kiln_build_duration_seconds: builds that ran a worker, per key kind and outcome;
// an answer from the store or the negative cache is no build.
TEST_CASE("BuildDurationsAreKeptPerKindAndOutcome") {
  BuildFixture f;
  f.options.failure_ttl = 600s;
  auto ok = f.add_source({{"behavior", "ok"}});
  auto bad = f.add_source({{"behavior", "fail"}});
  auto s = f.scheduler();
  CHECK(s->report().build_seconds.empty());
  REQUIRE(s->request_and_wait(f.key(ok, "A"), RequestOptions{}).has_value());
  REQUIRE(s->request_and_wait(f.key(ok, "B"), RequestOptions{}).has_value());
  REQUIRE(s->request_and_wait(f.key(ok, "A"), RequestOptions{}).has_value());  // stored: no build
  REQUIRE_FALSE(s->request_and_wait(f.key(bad), RequestOptions{}).has_value());
  REQUIRE_FALSE(s->request_and_wait(f.key(bad), RequestOptions{}).has_value());  // remembered: no build
  const auto seconds = s->report().build_seconds;
  REQUIRE(seconds.size() == 2);
  for (const auto& b : seconds) {
    CHECK(b.kind == "aoti");
    CHECK(b.count == (b.outcome == "succeeded" ? 2u : 1u));
    CHECK((b.outcome == "succeeded" || b.outcome == "failed"));
    std::uint64_t in_buckets = 0;
    for (auto n : b.buckets) in_buckets += n;
    CHECK(in_buckets == b.count);
    CHECK(b.sum > 0);
  }
}

TEST_CASE("NodeFieldsComeFromTheProbesAndConfiguredValuesWin") {
  BuildFixture f;
  f.host.triton_version = "configured-triton";
  auto s = f.scheduler();
  NodeFields n = s->node();
  CHECK(n.torch_version == "test-torch");
  CHECK(n.torch_git == "test-git");
  CHECK(n.gpu_arch == "sm_test");
  CHECK(n.gpu_name == "Test GPU");
  CHECK(n.cpu_isa == "test-isa");
  CHECK(n.triton_version == "configured-triton");
}

TEST_CASE("ANodeWhoseCpuIsaIsNotConfiguredTakesTheWorkersOwn") {
  // The ISA the worker's torch records in every package it builds, not a coarser guess.
  BuildFixture f;
  f.host.cpu_isa.clear();
  CHECK(f.scheduler()->node().cpu_isa == "test-worker-isa");
}

TEST_CASE("ABuiltPackageWhoseMetadataDisagreesWithItsKeyIsABuildFailureAndNothingIsStored") {
  // A node configured with a cpu_isa its worker's torch does not build for: the package
  // would be refused by every loader, so the build fails naming the field.
  BuildFixture f;
  auto package = [&](const std::string& isa) {
    const auto path = f.dir / ("package-" + isa + ".pt2");
    std::ofstream(path, std::ios::binary) << kiln::test::make_zip(
        {{"block/data/aotinductor/model/c1.wrapper_metadata.json",
          R"({"AOTI_PLATFORM":"linux","AOTI_MACHINE":"x86_64","AOTI_CPU_ISA":")" + isa + "\"}"},
         {"block/data/aotinductor/model/c1.wrapper.so", "\x7f" "ELF..."}},
        false);
    return path.string();
  };
  auto s = f.scheduler();
  const Key wrong = f.key(f.add_source({{"behavior", "ok"}, {"content_file", package("AVX2")}}));
  auto r = s->request_and_wait(wrong, RequestOptions{});
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::build_failed);
  CHECK_MESSAGE(r.error().message.find("key.cpu_isa is test-isa but the package was built for avx2") != std::string::npos,
                r.error().message);
  auto st = f.store->stat(*wrong.digest());
  REQUIRE(st.has_value());
  CHECK_FALSE(st->has_value());

  const Key right = f.key(f.add_source({{"behavior", "ok"}, {"content_file", package("TEST-ISA")}}), "Other");
  auto ok = s->request_and_wait(right, RequestOptions{});
  REQUIRE_MESSAGE(ok.has_value(), message(ok));
}

TEST_CASE("ShuttingDownKillsARunningBuildAndCancelsItsWaiters") {
  BuildFixture f;
  auto hash = f.add_source({{"behavior", "hang"}});
  auto queued = f.add_source({{"behavior", "ok"}});
  auto s = f.scheduler();
  Pending running, waiting;
  running.waiter = s->request(f.key(hash), RequestOptions{}, running.callback());
  REQUIRE(wait_until([&] { return f.builds() == 1; }));
  waiting.waiter = s->request(f.key(queued), RequestOptions{}, waiting.callback());
  auto t0 = std::chrono::steady_clock::now();
  s.reset();
  CHECK(std::chrono::steady_clock::now() - t0 < 30s);  // not the hanging worker's forever
  auto r1 = running.get();
  REQUIRE_FALSE(r1.has_value());
  CHECK(r1.error().code == Errc::cancelled);
  auto r2 = waiting.get();
  REQUIRE_FALSE(r2.has_value());
  CHECK(r2.error().code == Errc::cancelled);
  // A cancelled build is not remembered as a failure.
  auto rec = f.store->last_build(*f.key(hash).digest());
  REQUIRE(rec.has_value());
  CHECK_FALSE(rec->has_value());
}

TEST_CASE("ASourceThatCannotBeReadFailsTheBuildWithoutBlamingTheKey") {
  BuildFixture f;
  auto hash = f.add_source({{"behavior", "ok"}});
  auto src = f.store->stat_source(hash);
  REQUIRE(src.has_value());
  REQUIRE(src->has_value());
  {  // damage the stored source's blob
    std::fstream blob(f.store->blob_path((*src)->blob_digest), std::ios::in | std::ios::out | std::ios::binary);
    REQUIRE(blob.good());
    blob.seekp(-4, std::ios::end);
    blob.write("XXXX", 4);
  }
  auto s = f.scheduler();
  const Key key = f.key(hash);
  auto r = s->request_and_wait(key, RequestOptions{});
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::corrupt);
  // Not a failed build of this key: nothing remembered, nothing stored.
  auto rec = f.store->last_build(*key.digest());
  REQUIRE(rec.has_value());
  CHECK_FALSE(rec->has_value());
}

TEST_CASE("WorkersGetAScrubbedEnvironmentNothingThatChangesACompileLeaksFromTheDaemon") {
  // With TORCHINDUCTOR_FREEZING=1 inherited, a build came out different under an unchanged key.
  ::setenv("TORCHINDUCTOR_FREEZING", "1", 1);
  ::setenv("TRITON_ALWAYS_COMPILE", "1", 1);
  ::setenv("TORCH_CUDA_ARCH_LIST", "8.0", 1);
  BuildFixture f;
  auto hash = f.add_source({{"behavior", "ok"}});
  auto s = f.scheduler();
  const Key key = f.key(hash);
  auto r = s->request_and_wait(key, RequestOptions{});
  ::unsetenv("TORCHINDUCTOR_FREEZING");
  ::unsetenv("TRITON_ALWAYS_COMPILE");
  ::unsetenv("TORCH_CUDA_ARCH_LIST");
  REQUIRE_MESSAGE(r.has_value(), message(r));
  auto rec = f.store->last_build(*key.digest());
  REQUIRE(rec.has_value());
  REQUIRE(rec->has_value());
  const std::string& log = (*rec)->log;
  CHECK(log.find("test worker: env TORCHINDUCTOR_CACHE_DIR=") != std::string::npos);  // kilnd's own
  CHECK(log.find("TORCHINDUCTOR_FREEZING") == std::string::npos);
  CHECK(log.find("TRITON_ALWAYS_COMPILE") == std::string::npos);
  CHECK(log.find("TORCH_CUDA_ARCH_LIST") == std::string::npos);
  CHECK(kiln::build::is_scrubbed_env_var("TORCHINDUCTOR_MAX_AUTOTUNE"));
  CHECK_FALSE(kiln::build::is_scrubbed_env_var("PATH"));
}

TEST_CASE("WorkersAreToldWhereToKeepPythonBytecodeTheNodesFolderOrTheirOwnWithoutSharing") {
  // A torch installed without bytecode that the sandboxed worker cannot write into made
  // every worker compile torch from source (ops/workers/kiln_worker/bytecode.py).
  for (bool shared : {true, false}) {
    CAPTURE(shared);
    BuildFixture f;
    f.options.shared_compiler_cache = shared;
    auto hash = f.add_source({{"behavior", "ok"}});
    auto s = f.scheduler();
    const Key key = f.key(hash);
    auto r = s->request_and_wait(key, RequestOptions{});
    REQUIRE_MESSAGE(r.has_value(), message(r));
    auto rec = f.store->last_build(*key.digest());
    REQUIRE((rec && *rec));
    const std::string& log = (*rec)->log;
    const std::string mark = "test worker: env KILN_WORKER_PYCACHE=";
    const auto at = log.find(mark);
    REQUIRE_MESSAGE(at != std::string::npos, log);
    const std::string value = log.substr(at + mark.size(), log.find('\n', at) - at - mark.size());
    const auto node_folder = (f.options.work_dir / "compiler-cache" / "python").string();
    if (shared) {
      CHECK(value == node_folder);
      CHECK(std::filesystem::is_directory(node_folder));
    } else {
      CHECK(value.ends_with("/python-cache"));  // in the build's own folder, gone with it
      CHECK(value.find("compiler-cache") == std::string::npos);
    }
  }
}

TEST_CASE("ASourceIsVerifiedAgainstItsModelHashBeforeABuildUsesIt") {
  BuildFixture f;
  // A GELU block's source registered under a ReLU block's hash: the worker recomputes the
  // hash and refuses; nothing is stored.
  const std::string relu_hash = sha256(std::string("relu block")).hex();
  const std::string text = nlohmann::json{{"behavior", "ok"}}.dump();
  auto stream = f.store->begin_put();
  REQUIRE(stream.has_value());
  REQUIRE((*stream)->write(std::as_bytes(std::span(text.data(), text.size()))).has_value());
  REQUIRE(f.store->put_source(relu_hash, std::move(*stream), "gelu.pt2").has_value());
  auto s = f.scheduler();
  const Key key = f.key(relu_hash);
  auto r = s->request_and_wait(key, RequestOptions{});
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::build_failed);
  CHECK(r.error().message.find("hashes to " + sha256(text).hex()) != std::string::npos);
  CHECK_FALSE(f.store->stat(*key.digest())->has_value());
}

TEST_CASE("AKeyWhoseCallDiffersFromTheSourcesIsRefusedByTheWorker") {
  BuildFixture f;
  const nlohmann::json exported = {{"args", nlohmann::json::array()},
                                   {"kwargs", {{"hidden_states", {{"tensor", 0}}}, {"extra", {{"const", nullptr}}}}}};
  auto hash = f.add_source({{"behavior", "ok"}, {"call", exported}});
  auto s = f.scheduler();
  Key positional = f.key(hash);
  auto r = s->request_and_wait(positional, RequestOptions{});
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message.find("but the source was exported with the call") != std::string::npos);
  Key as_exported = f.key(hash);
  as_exported.call = exported.dump();
  auto ok = s->request_and_wait(as_exported, RequestOptions{});
  CHECK_MESSAGE(ok.has_value(), message(ok));
}

TEST_CASE("AKeyForAnotherGpuOrToolchainIsRefusedNamingTheField") {
  BuildFixture f;
  auto hash = f.add_source({{"behavior", "ok"}});
  auto s = f.scheduler();
  Key other_gpu = f.key(hash);
  other_gpu.gpu_name = "NVIDIA H200";
  auto r = s->request_and_wait(other_gpu, RequestOptions{});
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::unsupported);
  CHECK(r.error().message.find("key.gpu_name") != std::string::npos);
  Key other_torch = f.key(hash);
  other_torch.torch_version = "2.10.0";
  r = s->request_and_wait(other_torch, RequestOptions{});
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message.find("key.torch_version is \"2.10.0\" but this node has \"test-torch\"") != std::string::npos);
  // A spelling the probe or client used differently is the same value.
  Key alias = f.key(hash);
  alias.cpu_isa = "TEST-ISA";
  auto ok = s->request_and_wait(alias, RequestOptions{});
  CHECK_MESSAGE(ok.has_value(), message(ok));
  CHECK(f.builds() == 1);
}
