// run_worker with real processes (/bin/sh): exit codes, signals, timeouts that kill the
// whole process group, output limits, a worker that never reads its request.
#include "kiln/builds/worker_process.hpp"

#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include <doctest/doctest.h>

using namespace kiln::build;
using namespace std::chrono_literals;

namespace {

WorkerCommand sh(const std::string& script) { return WorkerCommand{{"/bin/sh", "-c", script}, {}, {}}; }

bool gone(pid_t pid) {
  for (int i = 0; i < 200; ++i) {
    if (::kill(pid, 0) != 0) return true;
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::stringstream ss;
    ss << in.rdbuf();
    if (ss.str().find(") Z") != std::string::npos) return true;  // dead, awaiting its reaper
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

}  // namespace

TEST_CASE("AWorkerGetsItsRequestOnStdinAndItsStdoutAndStderrAreSeparated") {
  auto e = run_worker(sh("cat; echo to-log >&2"), "{\"op\":\"x\"}", WorkerLimits{});
  CHECK(e.how == WorkerExit::How::exited);
  CHECK(e.clean_exit());
  CHECK(e.out == "{\"op\":\"x\"}");
  CHECK(e.log == "to-log\n");
}

TEST_CASE("AProgramFoundOnKilndsPathGetsItsFullPathAsArgv0") {
  // A Python found on kilnd's PATH (a virtual environment's) must not look itself up again
  // on the worker's own PATH: it gets the path kilnd found as its argv[0].
  auto e = run_worker(WorkerCommand{{"sh", "-c", "tr '\\000' '\\n' < /proc/$$/cmdline | head -n 1 >&2"}, {}, {}}, "",
                      WorkerLimits{});
  REQUIRE(e.clean_exit());
  CHECK(e.log.starts_with("/"));
  CHECK(e.log.ends_with("/sh\n"));
}

TEST_CASE("ExitStatusAndSignalsAreReported") {
  auto e = run_worker(sh("exit 3"), "", WorkerLimits{});
  CHECK(e.how == WorkerExit::How::exited);
  CHECK(e.code == 3);
  CHECK(e.describe() == "exited with status 3");
  auto k = run_worker(sh("kill -SEGV $$"), "", WorkerLimits{});
  CHECK(k.how == WorkerExit::How::signaled);
  CHECK(k.signal == SIGSEGV);
  CHECK(k.describe().find("signal 11") != std::string::npos);
}

TEST_CASE("ATimeoutKillsTheWholeProcessGroupEvenWhenSigtermIsIgnored") {
  WorkerLimits limits;
  limits.timeout = 2s;  // time for the shell to start its child and say its pid on a loaded machine
  limits.kill_grace = 300ms;
  auto t0 = std::chrono::steady_clock::now();
  auto e = run_worker(sh("trap '' TERM; sleep 1000 & echo $!; wait"), "", limits);
  CHECK(std::chrono::steady_clock::now() - t0 < 30s);  // not the child's 1000 s
  CHECK(e.how == WorkerExit::How::timed_out);
  CHECK(e.describe().find("timed out") != std::string::npos);
  REQUIRE_MESSAGE(!e.out.empty(), "the shell was killed before it said its child's pid");
  pid_t child = std::stoi(e.out);
  CHECK(gone(child));
}

TEST_CASE("WhatAWorkerLeftRunningIsKilledWhenItExits") {
  auto e = run_worker(sh("sleep 1000 & echo $!"), "", WorkerLimits{});
  CHECK(e.clean_exit());
  CHECK(gone(std::stoi(e.out)));
}

TEST_CASE("TooMuchStdoutIsGarbageAndTheWorkerIsKilled") {
  WorkerLimits limits;
  limits.max_stdout = 1000;
  auto e = run_worker(sh("yes"), "", limits);
  CHECK(e.how == WorkerExit::How::stdout_overflow);
  CHECK(e.out.size() <= 1000);
}

TEST_CASE("TheLogKeepsItsLastBytes") {
  WorkerLimits limits;
  limits.max_log = 100;
  auto e = run_worker(sh("i=0; while [ $i -lt 500 ]; do echo line$i >&2; i=$((i+1)); done"), "", limits);
  CHECK(e.clean_exit());
  CHECK(e.log.size() == 100);
  CHECK(e.log_truncated);
  CHECK(e.log.find("line499\n") != std::string::npos);
}

TEST_CASE("AWorkerThatNeverReadsALargeRequestDoesNotBlockTheCaller") {
  std::string big(4 << 20, 'x');
  WorkerLimits limits;
  limits.timeout = 5s;
  auto e = run_worker(sh("exit 0"), big, limits);
  CHECK(e.clean_exit());
}

TEST_CASE("CancelKillsTheWorker") {
  std::atomic<bool> cancel{false};
  std::thread t([&] {
    std::this_thread::sleep_for(200ms);
    cancel = true;
  });
  WorkerLimits limits;
  limits.kill_grace = 200ms;
  auto e = run_worker(sh("sleep 1000"), "", limits, &cancel);
  t.join();
  CHECK(e.how == WorkerExit::How::cancelled);
}

TEST_CASE("AMissingProgramIsASpawnFailureNotACrash") {
  auto e = run_worker(WorkerCommand{{"/nonexistent/kiln-worker"}, {}, {}}, "{}", WorkerLimits{});
  CHECK(e.how == WorkerExit::How::spawn_failed);
  CHECK(e.describe().find("/nonexistent/kiln-worker") != std::string::npos);
}

TEST_CASE("ExtraEnvironmentReachesTheWorker") {
  auto e = run_worker(WorkerCommand{{"/bin/sh", "-c", "printf %s \"$KILN_X\""}, {{"KILN_X", "42"}}, {}}, "", WorkerLimits{});
  CHECK(e.out == "42");
}

TEST_CASE("OnSpawnGetsTheWorkersPidWhichLeadsItsOwnGroupBeforeItIsReaped") {
  std::vector<int> seen;
  int pgid_then = -1;
  WorkerCommand cmd = sh("printf %s $$");
  cmd.on_spawn = [&](int pid) {
    seen.push_back(pid);
    pgid_then = ::getpgid(pid);  // still there: not reaped yet
  };
  auto e = run_worker(cmd, "", WorkerLimits{});
  REQUIRE(seen.size() == 1);
  CHECK(e.out == std::to_string(seen[0]));
  CHECK(pgid_then == seen[0]);
  CHECK_FALSE(run_worker(WorkerCommand{{"/nonexistent/kiln-worker"}, {}, [&](int) { seen.push_back(0); }}, "",
                         WorkerLimits{})
                  .clean_exit());
  CHECK(seen.size() == 1);  // not called when nothing was spawned
}

TEST_CASE("APendingRequestIsWrittenOnceReadyWhileTheWorkerAlreadyRuns") {
  auto ready_at = std::chrono::steady_clock::now() + 300ms;
  int polls = 0;
  PendingRequest pending = [&]() -> std::optional<std::string> {
    ++polls;
    if (std::chrono::steady_clock::now() < ready_at) return std::nullopt;
    return std::string("late request");
  };
  // The worker is up (it writes to its log) before the request exists.
  auto e = run_worker(sh("echo started >&2; cat"), pending, WorkerLimits{});
  CHECK(e.clean_exit());
  CHECK(e.out == "late request");
  CHECK(e.log == "started\n");
  CHECK(polls > 1);
}
