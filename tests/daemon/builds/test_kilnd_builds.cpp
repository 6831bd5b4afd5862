// End to end on the CPU machine: the real kilnd binary with the test worker as its build
// worker, driven through libkiln over the Unix socket.
#include <fstream>
#include <thread>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "build_test_util.hpp"
#include "client_fixture.hpp"
#include "kilnd_builds.hpp"
#include "kiln/client/client.hpp"
#include "support/kilnd_process.hpp"

using namespace kiln;
using namespace std::chrono_literals;
using json = nlohmann::json;

namespace {

// The real kilnd with the test worker; its log is <dir>/kilnd.log (kept with the folder
// when a test fails).
class Kilnd {
 public:
  explicit Kilnd(const test::TempDir& dir) : process_(dir.path(), test::builds_toml()) {}
  client::Client connect() const { return test::connect_client(process_.socket()); }

 private:
  test::KilndProcess process_;
};

std::string register_source(client::Client& c, const test::TempDir& dir, const std::string& name, json command) {
  command["count_file"] = (dir / "builds.txt").string();
  std::string text = command.dump();
  std::ofstream(dir / name) << text;
  std::string hash = sha256(text).hex();
  auto s = c.put_source(hash, name, dir / name);
  REQUIRE_MESSAGE(s.has_value(), (s ? "" : s.error().to_string()));
  return hash;
}

}  // namespace

TEST_CASE("SixteenClientsOfKilndGetOneBuildOfAMissingArtifact") {
  test::TempDir dir;
  Kilnd kilnd(dir);
  auto admin = kilnd.connect();
  auto status = admin.status();
  REQUIRE(status.has_value());
  CHECK(status->node["torch_version"] == "test-torch");
  CHECK(status->node["gpu_arch"] == "sm_test");
  const std::string hash = register_source(admin, dir, "ok.json", {{"behavior", "ok"}, {"sleep_ms", 300}});
  const Key key = test::source_key(hash);

  std::vector<std::string> blobs(16), errors(16);
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] {
      auto c = kilnd.connect();
      auto got = c.get(key);
      if (got && !*got) {
        auto b = c.call(protocol::MsgType::build, "{\"key\":" + key.to_json() + ",\"wait\":true}");
        if (!b) {
          errors[i] = b.error().to_string();
          return;
        }
        got = c.get(key);
      }
      if (!got || !*got) {
        errors[i] = got ? "no artifact" : got.error().to_string();
        return;
      }
      blobs[i] = (*got)->info().blob_digest.hex();
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 16; ++i) {
    CHECK_MESSAGE(errors[i].empty(), errors[i]);
    CHECK(blobs[i] == blobs[0]);
  }
  CHECK(test::count_lines(dir / "builds.txt") == 1);

  auto info = admin.stat(key);
  REQUIRE(info.has_value());
  REQUIRE(info->has_value());
  auto logs = admin.call(protocol::MsgType::logs, "{\"key_digest\":\"" + (*info)->key_digest.hex() + "\"}");
  REQUIRE(logs.has_value());
  json l = json::parse(*logs);
  CHECK(l["found"] == true);
  CHECK(l["record"]["ok"] == true);
  CHECK(l["record"]["log"].get<std::string>().find("test worker: building Block") != std::string::npos);
}

TEST_CASE("KilndAnswersBuildFailuresAndMissingSourcesWithTheirCodes") {
  test::TempDir dir;
  Kilnd kilnd(dir);
  auto c = kilnd.connect();
  auto no_source = c.call(protocol::MsgType::build, "{\"key\":" + test::source_key(std::string(64, 'e')).to_json() + "}");
  REQUIRE_FALSE(no_source.has_value());
  CHECK(no_source.error().code == Errc::no_source);
  CHECK(no_source.error().message.find(std::string(64, 'e')) != std::string::npos);

  const std::string crash = register_source(c, dir, "crash.json", {{"behavior", "crash"}});
  auto r1 = c.call(protocol::MsgType::build, "{\"key\":" + test::source_key(crash).to_json() + "}");
  REQUIRE_FALSE(r1.has_value());
  CHECK(r1.error().code == Errc::build_failed);
  CHECK(r1.error().message.find("signal 11") != std::string::npos);
  // Remembered: the second ask fails fast without a build; force builds again.
  auto r2 = c.call(protocol::MsgType::build, "{\"key\":" + test::source_key(crash).to_json() + "}");
  REQUIRE_FALSE(r2.has_value());
  CHECK(r2.error().message.find("--force") != std::string::npos);
  CHECK(test::count_lines(dir / "builds.txt") == 1);
  auto r3 = c.call(protocol::MsgType::build, "{\"key\":" + test::source_key(crash).to_json() + ",\"force\":true}");
  REQUIRE_FALSE(r3.has_value());
  CHECK(test::count_lines(dir / "builds.txt") == 2);
  // kilnd is still serving.
  CHECK(c.status().has_value());
}
