// kilnctl source ls and kilnctl source get against a real kilnd: the table and --json,
// a prefix, bytes to a file and to redirected stdout, and the documented exit codes for a
// missing source (2), a bad hash (1) and no daemon (3).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "kiln/digest.hpp"
#include "ops_test_util.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::ops_test;
using json = nlohmann::json;

TEST_CASE("SourceLsListsWhatIsRegisteredAndSourceGetWritesItOut") {
  test::TempDir dir;
  test::KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());

  Run empty = kilnctl({"source", "ls"}, d.socket());
  REQUIRE_MESSAGE(empty.code == 0, empty.err);
  CHECK(empty.out.find("no sources registered") != std::string::npos);
  CHECK(empty.out.find("kilnctl source add") != std::string::npos);

  const std::string one = random_bytes(123'456, 1), two = random_bytes(10, 2);
  write_file(dir / "one.pt2", one);
  write_file(dir / "two.pt2", two);
  const std::string h1 = "aa" + std::string(62, '1'), h2 = "bb" + std::string(62, '2');
  REQUIRE(kilnctl({"source", "add", "--model-hash", h1, (dir / "one.pt2").string()}, d.socket()).code == 0);
  REQUIRE(kilnctl({"source", "add", "--model-hash", h2, "--name", "second", (dir / "two.pt2").string()}, d.socket())
              .code == 0);

  Run table = kilnctl({"source", "ls"}, d.socket());
  REQUIRE_MESSAGE(table.code == 0, table.err);
  auto rows = lines_starting(table.out, "");
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].find("MODEL HASH") == 0);
  CHECK(rows[0].find("STORED") != std::string::npos);
  CHECK(rows[1].find(h1) == 0);
  CHECK(rows[1].find("120.6 KiB") != std::string::npos);
  CHECK(rows[1].find("one.pt2") != std::string::npos);
  CHECK(rows[2].find(h2) == 0);
  CHECK(rows[2].find("second") != std::string::npos);

  Run js = kilnctl({"source", "ls", "--json", "--prefix", "bb"}, d.socket());
  REQUIRE_MESSAGE(js.code == 0, js.err);
  json items = json::parse(js.out)["items"];
  REQUIRE(items.size() == 1);
  CHECK(items[0]["model_hash"] == h2);
  CHECK(items[0]["size"] == 10);
  CHECK(items[0]["stored_size"].get<std::uint64_t>() > 0);
  CHECK(items[0]["created_at"].get<std::int64_t>() > 0);
  CHECK(items[0]["blob_digest"] == sha256(two).hex());

  Run to_file = kilnctl({"source", "get", h1, "-o", (dir / "out.pt2").string()}, d.socket());
  REQUIRE_MESSAGE(to_file.code == 0, to_file.err);
  CHECK(to_file.out.find("wrote source one.pt2") != std::string::npos);
  CHECK(read_file(dir / "out.pt2") == one);
  Run streamed = kilnctl({"source", "get", "--stream", "--json", h1, "-o", (dir / "streamed.pt2").string()}, d.socket());
  REQUIRE_MESSAGE(streamed.code == 0, streamed.err);
  CHECK(json::parse(streamed.out)["model_hash"] == h1);
  CHECK(read_file(dir / "streamed.pt2") == one);
  Run to_stdout = kilnctl({"source", "get", h2}, d.socket());  // stdout is a pipe here
  REQUIRE_MESSAGE(to_stdout.code == 0, to_stdout.err);
  CHECK(to_stdout.out == two);
}

TEST_CASE("SourceGetExitCodesSayWhatWentWrong") {
  test::TempDir dir;
  test::KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  const std::string h = std::string(64, 'c');
  Run missing = kilnctl({"source", "get", h, "-o", (dir / "x").string()}, d.socket());
  CHECK(missing.code == 2);
  CHECK(missing.err.find("not_found") != std::string::npos);
  CHECK(missing.err.find(h) != std::string::npos);
  CHECK(missing.err.find("kilnctl source add") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "x"));  // nothing left behind

  Run bad = kilnctl({"source", "get", "NOT-A-HASH", "-o", (dir / "x").string()}, d.socket());
  CHECK(bad.code == 1);
  CHECK(bad.err.find("64 lowercase hex") != std::string::npos);
  Run bad_prefix = kilnctl({"source", "ls", "--prefix", "XYZ"}, d.socket());
  CHECK(bad_prefix.code == 1);
  Run json_missing = kilnctl({"source", "get", "--json", h, "-o", (dir / "x").string()}, d.socket());
  CHECK(json_missing.code == 2);
  CHECK(json::parse(json_missing.out)["error"]["name"] == "not_found");

  Run help = kilnctl({"source", "get", "--help"});
  CHECK(help.code == 0);
  CHECK(help.out.find("HASH") != std::string::npos);
  CHECK(help.out.find("kilnctl source ls") != std::string::npos);
  Run no_sub = kilnctl({"source"}, d.socket());
  CHECK(no_sub.code == 1);

  d.stop();
  Run gone = kilnctl({"source", "ls"}, d.socket());
  CHECK(gone.code == 3);
}
