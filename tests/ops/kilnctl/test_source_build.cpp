// kilnctl source add and kilnctl build [--force] against a real kilnd whose builds run the
// test worker: a registered source builds a missing key; a failing source's failure is
// remembered (no second worker run) until `build --force`; a key without a source names
// its model hash; the hash op's failure tells the user to pass --model-hash.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "kiln/digest.hpp"
#include "prewarm_fixture.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::ops_test;
using json = nlohmann::json;

namespace {

std::vector<std::string> key_args(const std::string& hash, const std::string& region) {
  return {"--kind", "aoti", "--model-hash", hash, "--region", region, "--dtype", "bfloat16", "--input", "bfloat16:1x64"};
}

std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("SourceAddThenBuildStoresTheArtifactAndARememberedFailureIsRetriedOnlyWithForce") {
  test::TempDir dir;
  test::KilndProcess d(dir.path(), builds_toml(1));
  REQUIRE_MESSAGE(d.start(), d.log());
  // Builds of each source, as kilnd's log says (the good one builds regions Block and
  // OtherBlock, the bad one Bad).
  auto good_builds = [&] { return builds_started(dir.path(), "Block") + builds_started(dir.path(), "OtherBlock"); };
  auto bad_builds = [&] { return builds_started(dir.path(), "Bad"); };
  std::string good = R"({"behavior":"ok","log":"good build"})";
  std::string bad = R"({"behavior":"fail","log":"bad build"})";
  write_file(dir.path() / "good.json", good);
  write_file(dir.path() / "bad.json", bad);
  std::string good_hash = sha256(good).hex(), bad_hash = sha256(bad).hex();

  // Without a source: the error names the missing model hash, nothing is built.
  Run none = kilnctl(cat({"build"}, key_args(good_hash, "Block")), d.socket());
  CAPTURE(none.err);
  CHECK(none.code != 0);
  CHECK(none.err.find("no_source") != std::string::npos);
  CHECK(none.err.find(good_hash) != std::string::npos);

  // Register both sources with explicit hashes.
  Run add = kilnctl({"source", "add", "--json", "--model-hash", good_hash, (dir.path() / "good.json").string()}, d.socket());
  CAPTURE(add.err);
  REQUIRE(add.code == 0);
  json a = json::parse(add.out);
  CHECK(a["model_hash"] == good_hash);
  CHECK(a["size"] == good.size());
  CHECK(a["name"] == "good.json");
  REQUIRE(kilnctl({"source", "add", "--model-hash", bad_hash, (dir.path() / "bad.json").string()}, d.socket()).code == 0);

  // The missing key is not stored, then builds from the source and is served.
  CHECK(kilnctl(cat({"stat"}, key_args(good_hash, "Block")), d.socket()).code == 2);
  Run built = kilnctl(cat({"build", "--json"}, key_args(good_hash, "Block")), d.socket());
  CAPTURE(built.err);
  REQUIRE(built.code == 0);
  json b = json::parse(built.out);
  CHECK(b["state"] == "done");
  CHECK(b["key_digest"].get<std::string>().size() == 64);
  CHECK(good_builds() == 1);
  Run got = kilnctl(cat({"get", "-o", (dir.path() / "artifact.bin").string()}, key_args(good_hash, "Block")), d.socket());
  CAPTURE(got.err);
  CHECK(got.code == 0);
  CHECK(std::filesystem::file_size(dir.path() / "artifact.bin") > 0);
  // Already stored: a plain build does not run the worker again.
  Run again = kilnctl(cat({"build"}, key_args(good_hash, "Block")), d.socket());
  CHECK(again.code == 0);
  CHECK(good_builds() == 1);

  // The failing source: the build fails with the worker's error ...
  Run fail1 = kilnctl(cat({"build"}, key_args(bad_hash, "Bad")), d.socket());
  CAPTURE(fail1.err);
  CHECK(fail1.code != 0);
  CHECK(fail1.err.find("build_failed") != std::string::npos);
  CHECK(bad_builds() == 1);
  // ... a second attempt reports the remembered failure without running the worker ...
  Run fail2 = kilnctl(cat({"build"}, key_args(bad_hash, "Bad")), d.socket());
  CHECK(fail2.code == fail1.code);
  CHECK(fail2.err.find("build_failed") != std::string::npos);
  CHECK(bad_builds() == 1);
  // ... and --force runs it again.
  Run forced = kilnctl(cat({"build", "--force"}, key_args(bad_hash, "Bad")), d.socket());
  CAPTURE(forced.err);
  CHECK(forced.code == fail1.code);
  CHECK(bad_builds() == 2);
  // get --build: a miss of another key of the good source is built and served at once;
  // a bare digest cannot say what to build.
  Run on_miss = kilnctl(cat({"get", "--build", "-o", (dir.path() / "built-on-get.bin").string()},
                            key_args(good_hash, "OtherBlock")), d.socket());
  CAPTURE(on_miss.err);
  CHECK(on_miss.code == 0);
  CHECK(std::filesystem::file_size(dir.path() / "built-on-get.bin") > 0);
  CHECK(good_builds() == 2);
  Run miss_bad = kilnctl(cat({"get", "--build", "-o", (dir.path() / "never.bin").string()}, key_args(bad_hash, "Bad")),
                         d.socket());
  CHECK(miss_bad.code != 0);
  CHECK(miss_bad.err.find("build_failed") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.path() / "never.bin"));

  // --force on a stored key rebuilds it.
  Run rebuilt = kilnctl(cat({"build", "--force"}, key_args(good_hash, "Block")), d.socket());
  CHECK(rebuilt.code == 0);
  CHECK(good_builds() == 3);
}

TEST_CASE("SourceAddHasTheNodeHashOrComputesWithTheNamedWorkerAndSaysToPassModelHashWhenItCannot") {
  test::TempDir dir;
  test::KilndProcess d(dir.path(), builds_toml(1));
  REQUIRE_MESSAGE(d.start(), d.log());
  std::string src = R"({"behavior":"ok"})";
  write_file(dir.path() / "src.json", src);
  // Stand-ins for kiln_worker's `hash FILE`: one that hashes the file, one without torch.
  write_file(dir.path() / "hasher.py",
             "import hashlib, json, sys\nassert sys.argv[1] == 'hash'\n"
             "print(json.dumps({'model_hash': hashlib.sha256(open(sys.argv[2], 'rb').read()).hexdigest(), 'inputs': []}))\n");
  write_file(dir.path() / "notorch.py", "import sys\nraise ModuleNotFoundError(\"No module named 'torch'\")\n");

  Run ok = kilnctl({"source", "add", "--json", "--worker", (dir.path() / "hasher.py").string(),
                    (dir.path() / "src.json").string()},
                   d.socket());
  CAPTURE(ok.err);
  REQUIRE(ok.code == 0);
  CHECK(json::parse(ok.out)["model_hash"] == sha256(src).hex());

  Run no = kilnctl({"source", "add", "--worker", (dir.path() / "notorch.py").string(), (dir.path() / "src.json").string()},
                   d.socket());
  CAPTURE(no.err);
  CHECK(no.code != 0);
  CHECK(no.err.find("No module named 'torch'") != std::string::npos);
  CHECK(no.err.find("--model-hash") != std::string::npos);

  // Without --model-hash or --worker, kilnd hashes the file with its own worker (here the
  // test worker: the program's SHA-256); kilnctl looks for no worker of its own.
  write_file(dir.path() / "src2.json", R"({"behavior":"ok","n":2})");
  Run by_node = kilnctl({"source", "add", "--json", (dir.path() / "src2.json").string()}, d.socket());
  CAPTURE(by_node.err);
  REQUIRE(by_node.code == 0);
  CHECK(json::parse(by_node.out)["model_hash"] == sha256(R"({"behavior":"ok","n":2})").hex());

  // Bad input is refused before kilnd sees it.
  Run bad_hash = kilnctl({"source", "add", "--model-hash", "xyz", (dir.path() / "src.json").string()}, d.socket());
  CHECK(bad_hash.code == 1);
  Run missing = kilnctl({"source", "add", "--model-hash", sha256(src).hex(), (dir.path() / "nope.json").string()}, d.socket());
  CHECK(missing.code != 0);
  CHECK(missing.err.find("nope.json") != std::string::npos);
}
