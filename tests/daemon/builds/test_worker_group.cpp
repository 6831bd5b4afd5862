// The worker-group record (daemon/builds/src/worker_group.hpp) and the start-up sweep's use
// of it: only a group whose leader has the recorded pid AND start time is killed. Real
// processes (sleep, sh) in their own process groups.
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <fstream>
#include <thread>

#include <doctest/doctest.h>

#include "build_test_util.hpp"
#include "temp_dir.hpp"
#include "worker_group.hpp"

using namespace kiln;
using namespace kiln::build;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

extern char** environ;

namespace {

// Starts argv in a process group of its own (pgid = its pid), like run_worker does.
pid_t spawn_group(std::vector<std::string> args) {
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, argv[0], nullptr, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  REQUIRE(rc == 0);
  return pid;
}

bool alive(pid_t pid) { return ::kill(pid, 0) == 0; }
bool group_gone(pid_t pgid) { return ::kill(-pgid, 0) != 0 && errno == ESRCH; }

// Kills and reaps a group the test started (cleanup; the test's own children).
void finish(pid_t pgid) {
  ::kill(-pgid, SIGKILL);
  int st = 0;
  while (::waitpid(-pgid, &st, 0) > 0) {
  }
}

// Reaps this process's children in group `pgid` as they die, so that a killed group really
// disappears (a zombie still counts as a member until its parent reaps it).
struct Reaper {
  explicit Reaper(pid_t pgid)
      : thread([this, pgid] {
          while (!stop) {
            int st = 0;
            if (::waitpid(-pgid, &st, WNOHANG) <= 0) std::this_thread::sleep_for(5ms);
          }
        }) {}
  ~Reaper() {
    stop = true;
    thread.join();
  }
  std::atomic<bool> stop{false};
  std::thread thread;
};

void write_text(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

}  // namespace

TEST_CASE("TheRecordNamesTheGroupAndItsLeadersStartTimeAndIsWrittenWhole") {
  test::TempDir dir;
  const pid_t pid = spawn_group({"sleep", "30"});
  auto start = process_start_time(pid);
  REQUIRE(start.has_value());
  REQUIRE(write_worker_group(dir.path(), pid).has_value());
  CHECK(test::read_text(dir / kWorkerGroupFile) == std::to_string(pid) + " " + std::to_string(*start) + "\n");
  CHECK_FALSE(fs::exists(dir / (std::string(kWorkerGroupFile) + ".tmp")));
  // Our own start time is not the child's: the guard tells processes apart.
  CHECK(process_start_time(::getpid()).has_value());
  finish(pid);
  CHECK_FALSE(process_start_time(pid).has_value());
  // A gone process cannot be recorded; nothing is left behind.
  auto st = write_worker_group(dir.path() / "later", pid);
  CHECK_FALSE(st.has_value());
  CHECK(st.error().code == Errc::not_found);
  // A folder that cannot be written to is an io_error, not a crash.
  const pid_t other = spawn_group({"sleep", "30"});
  auto bad = write_worker_group(dir / "no-such-folder", other);
  CHECK_FALSE(bad.has_value());
  finish(other);
}

TEST_CASE("AMatchingRecordKillsTheWholeGroupLeaderAndChild") {
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // the orphaned child is ours to reap
  test::TempDir dir;
  const pid_t pgid = spawn_group({"sh", "-c", "sleep 30 & wait"});
  REQUIRE(write_worker_group(dir.path(), pgid).has_value());
  std::this_thread::sleep_for(100ms);  // sh has started its child
  Reaper reaper(pgid);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(kill_leftover_group(dir.path()) == LeftoverGroup::killed);
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  CHECK(group_gone(pgid));
  // A second sweep of the same record finds nothing to kill.
  CHECK(kill_leftover_group(dir.path()) == LeftoverGroup::gone);
}

TEST_CASE("ARecordWhoseStartTimeDoesNotMatchLeavesTheProcessAlone") {
  test::TempDir dir;
  const pid_t pgid = spawn_group({"sleep", "30"});
  auto start = process_start_time(pgid);
  REQUIRE(start.has_value());
  write_text(dir / kWorkerGroupFile, std::to_string(pgid) + " " + std::to_string(*start + 1) + "\n");
  CHECK(kill_leftover_group(dir.path()) == LeftoverGroup::reused);
  std::this_thread::sleep_for(50ms);
  int st = 0;
  CHECK(::waitpid(pgid, &st, WNOHANG) == 0);  // not even a zombie: running
  CHECK(alive(pgid));
  finish(pgid);
}

TEST_CASE("NoRecordOrABadOneKillsNothing") {
  test::TempDir dir;
  const pid_t pgid = spawn_group({"sleep", "30"});
  auto start = process_start_time(pgid);
  REQUIRE(start.has_value());
  CHECK(kill_leftover_group(dir.path()) == LeftoverGroup::no_record);
  // Records that would make kill(-pgid) hit our own group (0), every process (-1), or init.
  for (const std::string& bad : std::vector<std::string>{"", "garbage", "0 " + std::to_string(*start), "-1 0", "1 0",
                          std::to_string(pgid)}) {
    CAPTURE(bad);
    write_text(dir / kWorkerGroupFile, bad);
    CHECK(kill_leftover_group(dir.path()) == LeftoverGroup::no_record);
  }
  CHECK(alive(pgid));
  int st = 0;
  CHECK(::waitpid(pgid, &st, WNOHANG) == 0);
  finish(pgid);
}

TEST_CASE("TheSchedulersStartUpSweepRemovesAMismatchedRecordsFolderAndLeavesItsProcessAlive") {
  test::BuildFixture f;
  const pid_t unrelated = spawn_group({"sleep", "30"});
  auto start = process_start_time(unrelated);
  REQUIRE(start.has_value());
  const fs::path job = f.options.work_dir / "jobs" / "0123456789abcdef-3";
  fs::create_directories(job);
  write_text(job / kWorkerGroupFile, std::to_string(unrelated) + " " + std::to_string(*start + 7) + "\n");
  {
    auto s = BuildScheduler::create(f.options, *f.store, f.host);
    REQUIRE_MESSAGE(s.has_value(), (s ? "" : s.error().to_string()));
    CHECK_FALSE(fs::exists(job));
  }
  int st = 0;
  CHECK(::waitpid(unrelated, &st, WNOHANG) == 0);
  CHECK(alive(unrelated));
  finish(unrelated);
}
