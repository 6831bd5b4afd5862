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
#include "support/kilnd_process.hpp"
#include "support/raw_client.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace std::chrono_literals;
using json = nlohmann::json;
namespace proto = kiln::protocol;
namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool wait_until(const std::function<bool()>& cond, std::chrono::milliseconds limit = 8s) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return cond();
}

std::string config() {
  return std::string("[builds]\nworker = [\"") + KILN_TEST_WORKER +
         "\"]\nprobe_gpus = false\nbuild_timeout_s = 600\n"
         "[[builds.slots]]\nname = \"gpu0\"\ngpu_arch = \"sm_test\"\ngpu_name = \"Test GPU\"\n";
}

Key client_key(const std::string& hash) {
  Key k;
  k.kind = ArtifactKind::aoti;
  k.model_hash = hash;
  k.region = "Block";
  k.dtype = "bfloat16";
  k.inputs = {{{Dim::fixed(1), Dim::fixed(4608), Dim::fixed(3072)}, "bfloat16", "strided"}};
  return k;
}

pid_t first_pid(const fs::path& file, bool with_region) {
  std::istringstream in(read_text(file));
  std::string region;
  pid_t pid = 0;
  if (with_region && !(in >> region)) return 0;
  return (in >> pid) ? pid : 0;
}

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
  const fs::path count_file = dir / "builds.txt";
  const fs::path child_file = dir / "child.txt";
  const fs::path jobs = dir / "store" / "builds" / "jobs";
  pid_t worker = 0, child = 0;
  fs::path job;
  {
    test::KilndProcess kilnd{dir.path(), config()};
    const std::string text =
        json{{"behavior", "hang_child"}, {"count_file", count_file.string()}, {"child_pid_file", child_file.string()}}
            .dump();
    const std::string hash = sha256(text).hex();
    test::RawClient c(kilnd.socket());
    c.hello();
    const auto id = c.next_id();
    REQUIRE(c.send_frame(proto::MsgType::put_source, id, json{{"model_hash", hash}, {"name", "hang.json"}}.dump()));
    REQUIRE(c.send_frame(proto::MsgType::chunk, id, text, proto::kFlagEnd));
    auto r = c.recv();
    REQUIRE(r.has_value());
    REQUIRE_MESSAGE(r->header.type == proto::MsgType::ok, r->body);
    REQUIRE(c.send_frame(proto::MsgType::get, c.next_id(),
                         "{\"key\":" + client_key(hash).to_json() + ",\"on_miss\":\"build\"}"));
    REQUIRE(wait_until([&] { return first_pid(count_file, true) != 0 && first_pid(child_file, false) != 0; }));
    worker = first_pid(count_file, true);
    child = first_pid(child_file, false);
    REQUIRE(wait_until([&] {
      auto folders = job_folders(jobs);
      return folders.size() == 1 && fs::exists(folders[0] / "worker.pgid");
    }));
    job = job_folders(jobs)[0];
    CHECK(read_text(job / "worker.pgid").starts_with(std::to_string(worker) + " "));
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
