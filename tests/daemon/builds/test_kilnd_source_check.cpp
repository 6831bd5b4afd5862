// A source's model hash is verified when it is registered (PUT_SOURCE), by the node's build
// worker, before anything is stored (schema/sources.md): the real kilnd, the test worker
// (whose hash op answers the SHA-256 of the file), libkiln over the Unix socket.
#include <stdlib.h>

#include <chrono>
#include <fstream>
#include <future>
#include <thread>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "kiln/client/client.hpp"
#include "kiln/digest.hpp"
#include "client_fixture.hpp"
#include "kilnd_builds.hpp"
#include "support/kilnd_process.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace std::chrono_literals;
using json = nlohmann::json;

namespace {

using test::builds_toml;

client::Client connect(const test::KilndProcess& d) { return test::connect_client(d.socket()); }

// A test-worker source: its text, written to `dir/name`; the model hash it truly has.
std::string write_source(const std::filesystem::path& dir, const std::string& name, const json& command) {
  const std::string text = command.dump();
  std::ofstream(dir / name) << text;
  return sha256(text).hex();
}

std::size_t source_count(client::Client& c) {
  auto page = c.list_sources();
  REQUIRE_MESSAGE(page.has_value(), (page ? "" : page.error().to_string()));
  return page->sources.size();
}

std::size_t files_in(const std::filesystem::path& dir) {
  std::error_code ec;
  std::size_t n = 0;
  for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec))
    ++n;
  return n;
}

}  // namespace

TEST_CASE("SourceUnderAnotherBlocksModelHashIsRefusedNamingBothAndNothingIsStored") {
  test::TempDir dir;
  test::KilndProcess d(dir.path(), builds_toml());
  auto c = connect(d);
  const std::string relu = write_source(dir.path(), "relu.json", {{"block", "relu"}});
  const std::string gelu = write_source(dir.path(), "gelu.json", {{"block", "gelu"}});

  // The ReLU block's bytes under the GELU block's hash.
  auto refused = c.put_source(gelu, "relu.json", dir.path() / "relu.json");
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == Errc::invalid_argument);
  CHECK_MESSAGE(refused.error().message.find(relu) != std::string::npos, refused.error().message);
  CHECK_MESSAGE(refused.error().message.find(gelu) != std::string::npos, refused.error().message);
  CHECK(refused.error().message.find("nothing was stored") != std::string::npos);
  CHECK(source_count(c) == 0);
  auto none = c.get_source(gelu);
  REQUIRE_FALSE(none.has_value());
  CHECK(none.error().code == Errc::not_found);

  // Under its own hash it is accepted, and the same bytes again too; the check's file is gone.
  auto ok = c.put_source(relu, "relu.json", dir.path() / "relu.json");
  REQUIRE_MESSAGE(ok.has_value(), (ok ? "" : ok.error().to_string()));
  CHECK(ok->model_hash == relu);
  CHECK(c.put_source(relu, "relu.json", dir.path() / "relu.json").has_value());
  CHECK(source_count(c) == 1);
  CHECK(files_in(dir.path() / "store" / "builds" / "checks") == 0);
}

TEST_CASE("SourceTheWorkerCannotHashIsRefusedWithTheWorkersError") {
  test::TempDir dir;
  test::KilndProcess d(dir.path(), builds_toml());
  auto c = connect(d);
  const std::string hash = write_source(dir.path(), "junk.json", {{"hash_fail", true}});
  auto refused = c.put_source(hash, "junk.json", dir.path() / "junk.json");
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == Errc::invalid_argument);
  CHECK_MESSAGE(refused.error().message.find("not a torch.export archive (hash_fail)") != std::string::npos,
                refused.error().message);
  CHECK(source_count(c) == 0);
}

TEST_CASE("SlowSourceCheckNeitherBlocksKilndNorOutlivesItsTimeLimit") {
  test::TempDir dir;
  // The check's time limit is long enough that a kilnd blocked behind it would make a STATUS
  // take seconds, and short of the hash op's 20 s.
  test::KilndProcess d(dir.path(), builds_toml({.source_check_timeout_s = 6}));
  const std::string hash = write_source(dir.path(), "slow.json", {{"hash_sleep_ms", 20000}});
  auto started = std::chrono::steady_clock::now();
  auto slow = std::async(std::launch::async, [&] {
    auto c = connect(d);
    return c.put_source(hash, "slow.json", dir.path() / "slow.json");
  });
  // While the upload waits on the hash op, kilnd answers everyone else at once.
  auto other = connect(d);
  int answered = 0;
  while (slow.wait_for(100ms) != std::future_status::ready) {
    auto t = std::chrono::steady_clock::now();
    REQUIRE(other.status().has_value());
    CHECK(std::chrono::steady_clock::now() - t < 3s);
    ++answered;
  }
  CHECK(answered > 0);
  auto r = slow.get();
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::timeout);
  CHECK_MESSAGE(r.error().message.find("source_check_timeout_s") != std::string::npos, r.error().message);
  CHECK(std::chrono::steady_clock::now() - started < 16s);  // killed at 6 s, not after 20
  CHECK(source_count(other) == 0);
}

TEST_CASE("NodeThatCannotBuildStoresSourcesUnverifiedAndBuildsNothingFromThem") {
  test::TempDir dir;
  ::setenv("KILN_TEST_WORKER_TOOLCHAIN", "fail", 1);  // this node's worker reports no torch
  test::KilndProcess d(dir.path(), builds_toml());
  ::unsetenv("KILN_TEST_WORKER_TOOLCHAIN");
  auto c = connect(d);
  const std::string relu = write_source(dir.path(), "relu.json", {{"block", "relu"}});
  const std::string gelu = write_source(dir.path(), "gelu.json", {{"block", "gelu"}});
  auto stored = c.put_source(gelu, "relu.json", dir.path() / "relu.json");
  REQUIRE_MESSAGE(stored.has_value(), (stored ? "" : stored.error().to_string()));
  CHECK(source_count(c) == 1);
  (void)relu;
  // Nothing is built from it here; where it is built, the worker recomputes its hash first.
  Key k;
  k.kind = ArtifactKind::aoti;
  k.model_hash = gelu;
  k.region = "Block";
  k.dtype = "bfloat16";
  k.torch_version = "test-torch";
  k.torch_git = "test-git";
  k.cuda_version = "test-cuda";
  k.triton_version = "test-triton";
  auto built = c.call(protocol::MsgType::build, "{\"key\":" + k.to_json() + "}");
  REQUIRE_FALSE(built.has_value());
  CHECK_MESSAGE(built.error().code == Errc::unsupported, built.error().to_string());
  CHECK(built.error().message.find("this node cannot build: its build worker has no torch") != std::string::npos);
}
