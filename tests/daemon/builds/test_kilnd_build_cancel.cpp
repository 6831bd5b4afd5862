// End to end: the real kilnd with the test worker; clients that stop waiting for a build
// (disconnect, CANCEL) stop it when nobody else wants it, and kilnd keeps serving.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
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

struct Node {
  test::TempDir dir;
  test::KilndProcess kilnd{dir.path(), test::builds_toml({.build_timeout_s = 600})};
  std::vector<pid_t> seen;  // workers seen running, in order

  test::RawConn client() { return test::connect_raw(kilnd.socket()); }

  // Registers a source that commands the test worker; returns its model hash.
  std::string add_source(json command) {
    return test::put_source_text(*client(), "slow.json", command.dump());
  }

  // The pid of the n-th worker seen running (its own record in its build's folder), 0 if
  // none yet: call it while the worker runs, then it is remembered.
  pid_t worker(std::size_t n) {
    for (const auto& w : test::running_test_workers(dir / "store" / "builds"))
      if (std::find(seen.begin(), seen.end(), w.pid) == seen.end()) seen.push_back(w.pid);
    return n < seen.size() ? seen[n] : 0;
  }
  // Workers started, as kilnd's log says.
  std::size_t workers() const { return test::build_starts(kilnd.log()).size(); }
  std::size_t scratch_entries() const {
    std::size_t n = 0;
    std::error_code ec;
    for (const char* sub : {"jobs", "sources"})
      for (auto it = fs::directory_iterator(dir / "store" / "builds" / sub, ec); !ec && it != fs::directory_iterator();
           it.increment(ec))
        ++n;
    return n;
  }
};

// The worker is kilnd's child: gone (killed and reaped), with its process group.
bool gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH && ::kill(-pid, 0) != 0 && errno == ESRCH; }

std::string get_build(const Key& k) { return "{\"key\":" + k.to_json() + ",\"on_miss\":\"build\"}"; }
std::string build_wait(const Key& k) { return "{\"key\":" + k.to_json() + ",\"wait\":true}"; }

// A request whose reply must be OK: the reply's JSON.
json call_json(test::RawClient& c, proto::MsgType type, const std::string& body) {
  return json::parse(test::call_ok(c, type, body));
}

}  // namespace

TEST_CASE("AClientThatDisconnectsWhileWaitingStopsItsBuildAndKilndKeepsServing") {
  Node n;
  const std::string hash = n.add_source({{"behavior", "ok"}, {"sleep_ms", 30000}, {"log", "compiling slowly"}});
  {
    auto waiter = n.client();
    REQUIRE(waiter->send_frame(proto::MsgType::get, waiter->next_id(), get_build(test::source_key(hash, "Block"))));
    REQUIRE(wait_until([&] { return n.worker(0) != 0; }));
    CHECK(n.scratch_entries() >= 2);  // its job folder and its source copy
  }  // the client goes away without a word
  const pid_t pid = n.worker(0);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(wait_until([&] { return gone(pid); }, 20s));
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took < 20s);  // not the worker's 30 s sleep, nor the 600 s build timeout
  MESSAGE("worker's process group gone " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                                         << " ms after the client disconnected");

  auto admin = n.client();
  json status;
  CHECK(wait_until([&] {  // the worker is reaped a moment before the build is recorded
    status = call_json(*admin, proto::MsgType::build_status, "{}");
    return status["builds"].size() == 1 && status["builds"][0]["state"] == "cancelled";
  }, 30s));
  REQUIRE(status["builds"].size() == 1);
  const std::string digest = status["builds"][0]["key_digest"];
  json logs = call_json(*admin, proto::MsgType::logs, "{\"key_digest\":\"" + digest + "\"}");
  CHECK(logs["found"] == true);
  CHECK(logs["record"]["error"].get<std::string>().starts_with("cancelled: "));
  CHECK(logs["record"]["log"].get<std::string>().find("compiling slowly") != std::string::npos);
  CHECK(wait_until([&] { return n.scratch_entries() == 0; }, 30s));
  CHECK(n.kilnd.log().find("nobody waits for it any more") != std::string::npos);
  CHECK(n.kilnd.running());
  call_json(*admin, proto::MsgType::status, "{}");
}

TEST_CASE("ACancelledWaitLeavesTheBuildToAnotherConnectionsWaiterOrStopsItWhenAlone") {
  Node n;
  // The shared build runs until a's cancel is answered (a build that ended first would
  // answer a's wait with the artifact instead).
  const fs::path hold = n.dir / "hold";
  std::ofstream(hold) << "held\n";
  const std::string shared =
      n.add_source({{"behavior", "ok"}, {"holds", json::array({{{"file", hold.string()}, {"only", ""}}})}});
  const Key key = test::source_key(shared, "Shared");
  auto a = n.client();
  auto b = n.client();
  // b's wait starts the build, so it is known to be waiting once the worker runs (had a
  // started it, a loaded machine could let a's cancel stop the build before b joined,
  // and b would rightly start a second one).
  const auto b_id = b->next_id();
  REQUIRE(b->send_frame(proto::MsgType::get, b_id, get_build(key)));
  REQUIRE(wait_until([&] { return n.worker(0) != 0; }));
  const auto a_id = a->next_id();
  REQUIRE(a->send_frame(proto::MsgType::build, a_id, build_wait(key)));
  // a cancels its wait: it ends with ERROR cancelled; b still wants the build.
  REQUIRE(a->send_frame(proto::MsgType::cancel, a->next_id(), "{\"request_id\":" + std::to_string(a_id) + "}"));
  bool cancel_acked = false, wait_ended = false;
  for (int i = 0; i < 2; ++i) {
    auto f = a->recv(30s);
    REQUIRE(f.has_value());
    if (f->header.request_id == a_id) {
      CHECK(f->header.type == proto::MsgType::error);
      CHECK(json::parse(f->body)["name"] == "cancelled");
      wait_ended = true;
    } else {
      CHECK(json::parse(f->body)["cancelled"] == true);
      cancel_acked = true;
    }
  }
  CHECK(cancel_acked);
  CHECK(wait_ended);
  fs::remove(hold);
  auto got = b->recv(30s);
  REQUIRE(got.has_value());
  CHECK_MESSAGE(got->header.type == proto::MsgType::ok, got->body);
  CHECK(json::parse(got->body)["found"] == true);
  if (got->fd >= 0) ::close(got->fd);
  CHECK(n.workers() == 1);
  CHECK(gone(n.worker(0)));

  // Alone, a cancelled wait stops the build.
  const std::string slow = n.add_source({{"behavior", "ok"}, {"sleep_ms", 30000}});
  const auto c_id = a->next_id();
  REQUIRE(a->send_frame(proto::MsgType::build, c_id, build_wait(test::source_key(slow, "Alone"))));
  REQUIRE(wait_until([&] { return n.worker(1) != 0; }));
  REQUIRE(a->send_frame(proto::MsgType::cancel, a->next_id(), "{\"request_id\":" + std::to_string(c_id) + "}"));
  for (int i = 0; i < 2; ++i) {  // the CANCEL's reply and the wait's ERROR cancelled
    auto f = a->recv(30s);
    REQUIRE(f.has_value());
    if (f->header.request_id == c_id) CHECK(json::parse(f->body)["name"] == "cancelled");
  }
  CHECK(wait_until([&] { return gone(n.worker(1)); }, 20s));  // short of its 30 s sleep
  CHECK(wait_until([&] { return n.scratch_entries() == 0; }, 30s));
  // The connection is still good.
  call_json(*a, proto::MsgType::status, "{}");
}
