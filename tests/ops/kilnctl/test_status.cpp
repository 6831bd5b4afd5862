// kilnctl status's GPU and build slot lines against a real kilnd on this CPU machine: the
// driver probe finds no GPU, so the plumbing is checked with configured build slots and
// with builds disabled.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "ops_test_util.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::ops_test;
using json = nlohmann::json;

namespace {

// The one line of `text` starting with `prefix`; the test fails unless there is exactly one.
std::string one_line(const std::string& text, const std::string& prefix) {
  auto lines = lines_starting(text, prefix);
  REQUIRE_MESSAGE(lines.size() == 1, text);
  return lines[0];
}

// kilnctl status of `d` as a person reads it; the run must succeed.
std::string status_text(const test::KilndProcess& d) {
  Run r = kilnctl({"status"}, d.socket());
  REQUIRE_MESSAGE(r.code == 0, r.err);
  return r.out;
}

// kilnctl status --json of `d`; the run must succeed.
json status_json(const test::KilndProcess& d) {
  Run r = kilnctl({"status", "--json"}, d.socket());
  REQUIRE_MESSAGE(r.code == 0, r.err);
  return json::parse(r.out);
}

}  // namespace

TEST_CASE("StatusShowsBuildSlotsAndSaysWhyNoGpuWasFound") {
  test::TempDir dir;
  test::KilndProcess d(dir.path(), builds_toml(2));
  REQUIRE_MESSAGE(d.start(), d.log());
  auto node = test::test_node_fields();

  const std::string human = status_text(d);
  const std::string gpus = one_line(human, "gpus");
  CHECK(gpus.find("none found: ") != std::string::npos);
  CHECK(gpus.find("GPU probe disabled") != std::string::npos);
  auto slots = lines_starting(human, "slot ");
  REQUIRE(slots.size() == 2);
  CHECK(slots[0].find("slot gpu0") == 0);
  CHECK(slots[0].find(node.gpu_name + ", " + node.gpu_arch + ": 0 running, 0 queued") != std::string::npos);
  CHECK(slots[1].find("slot gpu1") == 0);
  const std::string builds = one_line(human, "can build");
  CHECK(builds.find("yes (a miss is built on this node)") != std::string::npos);

  const json s = status_json(d);
  CHECK(s["gpus"].is_array());
  CHECK(s["gpus"].empty());
  CHECK(s["gpu_note"].get<std::string>().find("GPU probe disabled") != std::string::npos);
  REQUIRE(s["build_slots"].size() == 2);
  CHECK(s["build_slots"][1]["name"] == "gpu1");
  CHECK(s["build_slots"][1]["gpu_arch"] == node.gpu_arch);
  CHECK(s["build_slots"][1]["queued"] == 0);
  CHECK(s["can_build"] == true);
  CHECK_FALSE(s.contains("builds_unavailable"));
}

TEST_CASE("StatusWithBuildsDisabledSaysGpusAreNotProbed") {
  test::TempDir dir;
  test::KilndProcess d(dir.path(), "[builds]\nenabled = false\n");
  REQUIRE_MESSAGE(d.start(), d.log());
  const std::string human = status_text(d);
  const std::string gpus = one_line(human, "gpus");
  CHECK(gpus.find("none found: builds are disabled on this node") != std::string::npos);
  CHECK(lines_starting(human, "slot ").empty());
  const std::string builds = one_line(human, "can build");
  CHECK(builds.find("no: builds are disabled in kilnd's configuration ([builds] enabled = false)") !=
        std::string::npos);
}

// An operator's node without a worker (a half-done install) or without torch: status says
// the node cannot build and why, not only kilnd's log.
TEST_CASE("StatusSaysWhyANodeCannotBuild") {
  test::TempDir dir;
  const std::string missing = (dir / "no-such-worker").string();
  test::KilndProcess d(dir.path(), "[builds]\nprobe_gpus = false\nworker = [\"python3\", \"" + missing +
                                       "\"]\n[[builds.slots]]\nname = \"cpu0\"\ngpu_arch = \"cpu\"\n"
                                       "gpu_name = \"x86_64\"\n");
  REQUIRE_MESSAGE(d.start(), d.log());
  const std::string human = status_text(d);
  const std::string builds = one_line(human, "can build");
  CHECK(builds.find("no: the build worker is not installed at " + missing) != std::string::npos);
  const json s = status_json(d);
  CHECK(s["can_build"] == false);
  CHECK(s["builds_unavailable"].get<std::string>().find(missing) != std::string::npos);
}

TEST_CASE("StatusSaysWhereTorchCompilesCachesAreServed") {
  test::TempDir dir;
  const auto sock = (dir.path() / "tc.sock").string();
  test::KilndProcess d(dir.path(), builds_toml(1) + "\n[torch_cache]\nsocket = \"" + sock + "\"\n");
  REQUIRE_MESSAGE(d.start(), d.log());
  const std::string human = status_text(d);
  const std::string tc = one_line(human, "torch cache");
  CHECK(tc.find("unix://" + sock) != std::string::npos);
  const json js = status_json(d);
  CHECK(js["torch_cache"]["socket"] == sock);
  // deferred is kilnd's default
  CHECK(js["torch_cache"]["durability"] == "deferred");
  CHECK(js["torch_cache"]["queued"]["entries"] == 0);
  const std::string writes = one_line(human, "torch writes");
  CHECK(writes.find("deferred (+OK once in memory): 0 entries, ") != std::string::npos);
  // No [fleet]: the entries stay on the node.
  CHECK(js["torch_cache"]["fleet"] == false);
  const std::string shared = one_line(human, "torch fleet");
  CHECK(shared.find("this node only") != std::string::npos);

  test::TempDir sync_dir;
  const auto sync_sock = (sync_dir.path() / "tc.sock").string();
  test::KilndProcess sync(sync_dir.path(), builds_toml(1) + "\n[torch_cache]\nsocket = \"" + sync_sock +
                                               "\"\ndurability = \"sync\"\n");
  REQUIRE_MESSAGE(sync.start(), sync.log());
  Run sh = kilnctl({"status"}, sync.socket());
  auto sw = lines_starting(sh.out, "torch writes");
  REQUIRE(sw.size() == 1);
  CHECK(sw[0].find("sync (+OK once durable)") != std::string::npos);
  auto sj = json::parse(kilnctl({"status", "--json"}, sync.socket()).out);
  CHECK(sj["torch_cache"]["durability"] == "sync");

  test::TempDir other;
  test::KilndProcess plain(other.path(), builds_toml(1));
  REQUIRE_MESSAGE(plain.start(), plain.log());
  Run none = kilnctl({"status"}, plain.socket());
  REQUIRE(lines_starting(none.out, "torch cache").size() == 1);
  CHECK(lines_starting(none.out, "torch cache")[0].find("not served") != std::string::npos);
  CHECK_FALSE(json::parse(kilnctl({"status", "--json"}, plain.socket()).out).contains("torch_cache"));
}
