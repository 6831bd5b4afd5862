// End to end: kilnd is SIGKILLed while a build runs; its worker (and the worker's child,
// in the same process group) keep running; the next kilnd on the same store kills that
// group at start, before it removes the job folder. Real kilnd, real test worker.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <fstream>
#include <sstream>
#include <thread>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "kiln/key.hpp"
#include "kiln/protocol/frame.hpp"
#include "kilnd_builds.hpp"
#include "support/kilnd_process.hpp"
#include "support/raw_calls.hpp"
#include "support/raw_client.hpp"
#include "temp_dir.hpp"
#include "text_file.hpp"
#include "wait_until.hpp"

using namespace kiln;
using namespace std::chrono_literals;
using json = nlohmann::json;
using test::wait_until;
namespace proto = kiln::protocol;
namespace fs = std::filesystem;

namespace {

// kilnd's default failure TTL; builds of one slot that may run 10 minutes.
std::string config() { return test::builds_toml({.failure_ttl_s = std::nullopt, .build_timeout_s = 600}); }

std::vector<fs::path> job_folders(const fs::path& jobs) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (auto it = fs::directory_iterator(jobs, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
    out.push_back(it->path());
  return out;
}

bool gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }
bool group_gone(pid_t pgid) { return ::kill(-pgid, 0) != 0 && errno == ESRCH; }

}  // namespace

TEST_CASE("AWorkerGroupLeftByASigkilledKilndIsKilledByTheNextKilndAtStart") {
  // The killed kilnd's orphans are reparented to this test (not to a PID 1 that may not
  // reap), and a reaper thread reaps them as they die, as init would.
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  test::TempDir dir;
  const fs::path jobs = dir / "store" / "builds" / "jobs";
  pid_t worker = 0, child = 0;
  fs::path job;
  {
    test::KilndProcess kilnd{dir.path(), config()};
    const std::string text = json{{"behavior", "hang_child"}}.dump();
    test::RawClient c(kilnd.socket());
    c.hello();
    const std::string hash = test::put_source_text(c, "hang.json", text);
    REQUIRE(c.send_frame(proto::MsgType::get, c.next_id(),
                         "{\"key\":" + test::source_key(hash).to_json() + ",\"on_miss\":\"build\"}"));
    // The worker's and its child's pids, from what the worker left in its build's folder.
    REQUIRE(wait_until([&] {
      auto running = test::running_test_workers(dir / "store" / "builds");
      if (running.size() != 1 || running[0].child == 0) return false;
      worker = running[0].pid;
      child = running[0].child;
      return true;
    }));
    REQUIRE(wait_until([&] {
      auto folders = job_folders(jobs);
      return folders.size() == 1 && fs::exists(folders[0] / "worker.pgid");
    }));
    job = job_folders(jobs)[0];
    CHECK(test::slurp(job / "worker.pgid").starts_with(std::to_string(worker) + " "));
    CHECK(::getpgid(child) == worker);  // the child is in the worker's group

    kilnd.signal(SIGKILL);  // a crash: no shutdown, no cleanup
    REQUIRE(kilnd.wait(5s).has_value());
  }
  // The gap this closes: nothing tied the worker to kilnd, so it runs on.
  std::this_thread::sleep_for(100ms);
  CHECK(::kill(worker, 0) == 0);
  CHECK(::kill(child, 0) == 0);
  CHECK(fs::exists(job));

  std::atomic<bool> stop{false};
  std::thread reaper([&] {
    while (!stop) {
      int st = 0;
      if (::waitpid(-worker, &st, WNOHANG) <= 0) std::this_thread::sleep_for(5ms);
    }
  });
  const auto t0 = std::chrono::steady_clock::now();
  {
    test::KilndProcess again{dir.path(), config()};  // READY once the sweep is done
    const auto took = std::chrono::steady_clock::now() - t0;
    MESSAGE("second kilnd ready "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms after start");
    CHECK(group_gone(worker));
    CHECK(gone(worker));
    CHECK(gone(child));
    CHECK_FALSE(fs::exists(job));
    CHECK(again.log().find("killed build worker group " + std::to_string(worker) + " left by a previous kilnd") !=
          std::string::npos);
    CHECK(again.running());
  }
  if (!group_gone(worker)) {  // the checks above failed: leave nothing running behind
    ::kill(-worker, SIGKILL);
    wait_until([&] { return group_gone(worker); }, 2s);
  }
  stop = true;
  reaper.join();
}
