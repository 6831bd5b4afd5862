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

TEST_CASE("StatusShowsBuildSlotsAndSaysWhyNoGpuWasFound") {
  test::TempDir dir;
  test::KilndProcess d(dir.path(), builds_toml(2));
  REQUIRE_MESSAGE(d.start(), d.log());
  auto node = test::test_node_fields();

  Run human = kilnctl({"status"}, d.socket());
  REQUIRE_MESSAGE(human.code == 0, human.err);
  auto gpus = lines_starting(human.out, "gpus");
  REQUIRE(gpus.size() == 1);
  CHECK(gpus[0].find("none found: ") != std::string::npos);
  CHECK(gpus[0].find("GPU probe disabled") != std::string::npos);
  auto slots = lines_starting(human.out, "slot ");
  REQUIRE(slots.size() == 2);
  CHECK(slots[0].find("slot gpu0") == 0);
  CHECK(slots[0].find(node.gpu_name + ", " + node.gpu_arch + ": 0 running, 0 queued") != std::string::npos);
  CHECK(slots[1].find("slot gpu1") == 0);

  Run js = kilnctl({"status", "--json"}, d.socket());
  REQUIRE_MESSAGE(js.code == 0, js.err);
  json s = json::parse(js.out);
  CHECK(s["gpus"].is_array());
  CHECK(s["gpus"].empty());
  CHECK(s["gpu_note"].get<std::string>().find("GPU probe disabled") != std::string::npos);
  REQUIRE(s["build_slots"].size() == 2);
  CHECK(s["build_slots"][1]["name"] == "gpu1");
  CHECK(s["build_slots"][1]["gpu_arch"] == node.gpu_arch);
  CHECK(s["build_slots"][1]["queued"] == 0);
}

TEST_CASE("StatusWithBuildsDisabledSaysGpusAreNotProbed") {
  test::TempDir dir;
  test::KilndProcess d(dir.path(), "[builds]\nenabled = false\n");
  REQUIRE_MESSAGE(d.start(), d.log());
  Run human = kilnctl({"status"}, d.socket());
  REQUIRE_MESSAGE(human.code == 0, human.err);
  auto gpus = lines_starting(human.out, "gpus");
  REQUIRE(gpus.size() == 1);
  CHECK(gpus[0].find("none found: builds are disabled on this node") != std::string::npos);
  CHECK(lines_starting(human.out, "slot ").empty());
}
