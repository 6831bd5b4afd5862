// kilnctl prewarm against a real kilnd whose builds run the test worker: 50 keys, some
// failing on purpose, reported exactly; a second run builds nothing; logs and inspect of
// what was built.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "kilnd_builds.hpp"
#include "prewarm_fixture.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::ops_test;
using json = nlohmann::json;

TEST_CASE("PrewarmOfFiftyKeysReportsExactlyWhatHappenedAndASecondRunBuildsNothing") {
  test::TempDir dir;
  test::KilndProcess d(dir.path(), builds_toml(4));
  REQUIRE_MESSAGE(d.start(), d.log());
  auto f = write_prewarm_fixture(dir.path(), 7, 20);
  REQUIRE(f.good_keys + f.bad_keys == 50);

  // First run, output to a pipe: one plain line per key, then the summary.
  Run first = kilnctl({"prewarm", f.manifest.string()}, d.socket());
  CAPTURE(first.out);
  CAPTURE(first.err);
  CHECK(first.code == 6);  // something failed
  auto built = lines_starting(first.out, "built    GoodBlock ");
  auto failed = lines_starting(first.out, "failed   BadBlock ");
  CHECK(built.size() == 42);
  CHECK(failed.size() == 8);
  CHECK(lines_starting(first.out, "present").empty());
  for (const auto& l : failed) CHECK(l.find("build_failed") != std::string::npos);
  CHECK(lines_starting(first.out, "50 keys: 42 built, 0 already there, 8 failed in ").size() == 1);
  CHECK(f.good_builds() == 42);  // every good key built exactly once
  std::size_t bad_builds = f.bad_builds();
  CHECK(bad_builds == 8);

  // What it built is stored.
  Run ls = kilnctl({"ls", "--json", "--all"}, d.socket());
  REQUIRE(ls.code == 0);
  CHECK(json::parse(ls.out)["items"].size() == 42);

  // Second run: every good key is there, nothing is built; the failures are reported again
  // (from the daemon's recent-failure record) without running a worker.
  auto t0 = std::chrono::steady_clock::now();
  Run second = kilnctl({"prewarm", "--json", f.manifest.string()}, d.socket());
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CAPTURE(second.out);
  CHECK(second.code == 6);
  json s = json::parse(second.out);
  CHECK(s["total"] == 50);
  CHECK(s["present"] == 42);
  CHECK(s["built"] == 0);
  CHECK(s["failed"] == 8);
  CHECK(f.good_builds() == 42);
  CHECK(f.bad_builds() == bad_builds);
  CHECK(seconds < 10);
  for (const auto& item : s["items"]) {
    if (item["outcome"] == "failed") CHECK(item["label"].get<std::string>().rfind("BadBlock", 0) == 0);
    CHECK(item["key_digest"].get<std::string>().size() == 64);
  }

  // logs and inspect of a built key and of a failed one.
  std::string good_digest, bad_digest;
  for (const auto& item : s["items"]) {
    if (item["outcome"] == "present" && good_digest.empty()) good_digest = item["key_digest"];
    if (item["outcome"] == "failed" && bad_digest.empty()) bad_digest = item["key_digest"];
  }
  Run logs = kilnctl({"logs", "--digest", good_digest}, d.socket());
  CHECK(logs.code == 0);
  CHECK(logs.out.find("planned success") != std::string::npos);
  Run bad_logs = kilnctl({"logs", "--digest", bad_digest}, d.socket());
  CHECK(bad_logs.code == 0);
  CHECK(bad_logs.out.find("planned failure") != std::string::npos);
  CHECK(bad_logs.err.find("FAILED") != std::string::npos);
  Run inspect = kilnctl({"inspect", "--json", "--digest", good_digest}, d.socket());
  REQUIRE(inspect.code == 0);
  json in = json::parse(inspect.out);
  CHECK(in["info"]["key_digest"] == good_digest);
  CHECK(in["info"]["key"]["region"] == "GoodBlock");
  CHECK(in["build"]["ok"] == true);
  Run inspect_text = kilnctl({"inspect", "--digest", good_digest}, d.socket());
  CHECK(inspect_text.out.find("build log (last 20 lines") != std::string::npos);
  CHECK(inspect_text.out.find("gpu_name") != std::string::npos);
  Run missing = kilnctl({"inspect", "--digest", bad_digest}, d.socket());
  CHECK(missing.code == 2);

  // status and stats show the builds and the store.
  Run stats = kilnctl({"stats", "--json"}, d.socket());
  REQUIRE(stats.code == 0);
  json st = json::parse(stats.out);
  CHECK(st["builds"]["done"] == 42);
  CHECK(st["builds"]["failed"] == 8);
  CHECK(st["builds"]["running"] == 0);
  Run status = kilnctl({"status"}, d.socket());
  REQUIRE(status.code == 0);
  CHECK(status.out.find("0 running, 0 queued, 42 done, 8 failed") != std::string::npos);
  CHECK(status.out.find("in 42 artifact(s), no quota") != std::string::npos);
}

TEST_CASE("PrewarmOfAManifestThatIsAllStoredReturnsAtOnceWithExitZero") {
  test::TempDir dir;
  test::KilndProcess d(dir.path(), builds_toml(2));
  REQUIRE_MESSAGE(d.start(), d.log());
  auto f = write_prewarm_fixture(dir.path(), 2, 0);
  // Only the good build: rewrite the manifest without the bad one.
  std::string m = read_file(f.manifest);
  m = m.substr(0, m.find("[[build]]\nsource = \"bad\""));
  write_file(f.manifest, m);
  Run first = kilnctl({"prewarm", "--json", f.manifest.string()}, d.socket());
  CAPTURE(first.out);
  REQUIRE(first.code == 0);
  CHECK(json::parse(first.out)["built"] == 12);
  Run second = kilnctl({"prewarm", f.manifest.string()}, d.socket());
  CHECK(second.code == 0);
  CHECK(lines_starting(second.out, "present ").size() == 12);
  CHECK(f.good_builds() == 12);
  // --force rebuilds every key.
  Run forced = kilnctl({"prewarm", "--force", "--json", f.manifest.string()}, d.socket());
  CHECK(forced.code == 0);
  CHECK(json::parse(forced.out)["built"] == 12);
  CHECK(f.good_builds() == 24);
}

TEST_CASE("PrewarmErrorsAreClearAndExitNonZero") {
  test::TempDir dir;
  auto f = write_prewarm_fixture(dir.path(), 1, 0);
  // No daemon: unavailable, exit 3.
  Run none = kilnctl({"prewarm", f.manifest.string(), "--socket", (dir / "nope.sock").string()});
  CHECK(none.code == 3);
  CHECK(none.err.find("kilnctl: unavailable") != std::string::npos);
  // A bad manifest: exit 1 naming the field, before any daemon is asked.
  write_file(dir / "bad.toml", "format = 1\n[[build]]\nsource = \"x\"\nregion = \"R\"\ndtypes = [\"bf16\"]\n");
  Run bad = kilnctl({"prewarm", (dir / "bad.toml").string(), "--socket", (dir / "nope.sock").string()});
  CHECK(bad.code == 1);
  CHECK(bad.err.find("build[0]") != std::string::npos);
  Run missing = kilnctl({"prewarm", (dir / "absent.toml").string()});
  CHECK(missing.code == 1);
  CHECK(missing.err.find("absent.toml") != std::string::npos);
  // A daemon with builds turned off: unsupported, exit 5, saying so.
  std::filesystem::create_directories(dir / "plain");
  test::KilndProcess d(dir / "plain", "[builds]\nenabled = false\n");
  REQUIRE_MESSAGE(d.start(), d.log());
  Run nobuild = kilnctl({"prewarm", f.manifest.string()}, d.socket());
  CAPTURE(nobuild.out);
  CAPTURE(nobuild.err);
  CHECK(nobuild.code == 5);
  CHECK(nobuild.err.find("does not build") != std::string::npos);
  // A source that does not hash to the model hash the manifest gives it (its file changed
  // since): the node refuses it and the run stops, naming it, whatever the other upload
  // (the two go up side by side) did.
  std::filesystem::create_directories(dir / "builds");
  test::KilndProcess b(dir / "builds", builds_toml(1));
  REQUIRE_MESSAGE(b.start(), b.log());
  write_file(dir / "bad.json", R"({"behavior":"ok","log":"not what the manifest hashed"})");
  Run changed = kilnctl({"prewarm", f.manifest.string()}, b.socket());
  CAPTURE(changed.out);
  CAPTURE(changed.err);
  CHECK(changed.code != 0);
  CHECK(changed.err.find("registering source 'bad'") != std::string::npos);
  CHECK(changed.err.find("registering source 'good'") == std::string::npos);
  // --dry-run needs no daemon.
  Run dry = kilnctl({"prewarm", "--dry-run", f.manifest.string()});
  CHECK(dry.code == 0);
  CHECK(dry.out.find("14 key(s)") != std::string::npos);
  CHECK(dry.out.find("SOURCE") == 0);            // a table, one line per key
  CHECK(dry.out.find("{\"kind\"") == std::string::npos);  // not JSON lines
}

// A node whose worker's python has no torch: kilnd says at start that builds are refused,
// status says why, and a prewarm or a BUILD gets that one answer, not "key is incomplete"
// per key (without the worker's toolchain, torch_version and its kin are unknown).
TEST_CASE("OnANodeWhoseWorkerHasNoTorchPrewarmSaysOnceThatBuildsAreRefused") {
  test::TempDir dir;
  test::KilndProcess d(dir.path(), builds_toml(2));
  // The node knows only what its probes find: no [node] toolchain fields.
  std::string cfg;
  for (const auto& line : lines_starting(read_file(dir / "kilnd.toml"), ""))
    if (!line.starts_with("torch_") && !line.starts_with("cuda_version") && !line.starts_with("triton_version"))
      cfg += line + "\n";
  write_file(dir / "kilnd.toml", cfg);
  ::setenv("KILN_TEST_WORKER_TOOLCHAIN", "fail", 1);  // answers as the Python worker without torch
  const auto started = d.start();
  ::unsetenv("KILN_TEST_WORKER_TOOLCHAIN");
  REQUIRE_MESSAGE(started.has_value(), d.log());
  CHECK_MESSAGE(d.log().find("toolchain unknown") != std::string::npos, d.log());
  CHECK(d.log().find("builds: refused: this node cannot build: its build worker has no torch (probe: ") !=
        std::string::npos);
  CHECK(d.log().find("builds: ready") == std::string::npos);

  Run status = kilnctl({"status"}, d.socket());
  REQUIRE_MESSAGE(status.code == 0, status.err);
  auto can = lines_starting(status.out, "can build");
  REQUIRE(can.size() == 1);
  CHECK(can[0].find("no: its build worker has no torch (probe: ") != std::string::npos);

  auto f = write_prewarm_fixture(dir.path(), 2, 1);
  Run run = kilnctl({"prewarm", f.manifest.string()}, d.socket());
  CAPTURE(run.out);
  CAPTURE(run.err);
  CHECK(run.code == 5);  // unsupported
  CHECK(run.err.find("this node cannot build: its build worker has no torch (probe: ") != std::string::npos);
  CHECK(run.out.find("incomplete") == std::string::npos);
  CHECK(run.err.find("incomplete") == std::string::npos);
  CHECK(f.good_builds() == 0);

  // kilnd itself answers BUILD and PREWARM_SUBMIT so, for any client.
  auto c = connect(d);
  const std::string key = test::source_key(std::string(64, 'a'), "Block", {1, 8}).to_json();
  for (auto [type, body] : {std::pair{protocol::MsgType::build, "{\"key\":" + key + "}"},
                            std::pair{protocol::MsgType::prewarm_submit, "{\"keys\":[" + key + "," + key + "]}"}}) {
    auto r = c.call(type, body);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == Errc::unsupported);
    CHECK_MESSAGE(r.error().message.starts_with("this node cannot build: its build worker has no torch (probe: "),
                  r.error().message);
  }
}

// The shipped sample, as an operator first tries it: --dry-run reads it although its model
// hashes are placeholders and its sources do not exist yet, and says so; prewarm refuses.
TEST_CASE("DryRunReadsTheShippedSampleAndMarksItsPlaceholders") {
  const std::string sample = std::string(KILN_SOURCE_DIR) + "/ops/manifests/kiln-test-blocks.toml";
  Run dry = kilnctl({"prewarm", "--dry-run", sample});
  REQUIRE_MESSAGE(dry.code == 0, dry.err);
  CHECK(dry.out.find("FluxDoubleStreamBlock") != std::string::npos);
  CHECK(dry.out.find("flux-double*") != std::string::npos);
  CHECK(dry.out.find("placeholder") != std::string::npos);
  Run json_dry = kilnctl({"prewarm", "--dry-run", "--json", sample});
  REQUIRE(json_dry.code == 0);
  CHECK(nlohmann::json::parse(json_dry.out)["keys"].size() > 0);
  Run run = kilnctl({"prewarm", sample}, "/nonexistent/kiln.sock");
  CHECK(run.code == 1);
  CHECK(run.err.find("placeholder") != std::string::npos);
}

// The diffusers sample: its keys list without a daemon; prewarm names the source file it
// does not ship, before it contacts any node.
TEST_CASE("DryRunListsTheDiffusersSampleAndPrewarmNamesItsMissingSource") {
  const std::string sample = std::string(KILN_SOURCE_DIR) + "/ops/manifests/flux.toml";
  Run dry = kilnctl({"prewarm", "--dry-run", "--json", sample});
  REQUIRE_MESSAGE(dry.code == 0, dry.err);
  json keys = json::parse(dry.out)["keys"];
  REQUIRE(keys.size() == 2);
  CHECK(dry.out.find("FluxTransformerBlock") != std::string::npos);
  CHECK(dry.out.find("FluxSingleTransformerBlock") != std::string::npos);
  Run run = kilnctl({"prewarm", sample}, "/nonexistent/kiln.sock");
  CHECK(run.code != 0);
  CHECK_MESSAGE(run.err.find("sources/kiln-fp-") != std::string::npos, run.err);
}

TEST_CASE("SourcesTravelWithAnExportAndBuildOnTheOtherNode") {
  test::TempDir dir;
  std::filesystem::create_directories(dir / "a");
  std::filesystem::create_directories(dir / "b");
  test::KilndProcess a(dir / "a", builds_toml(2)), b(dir / "b", builds_toml(2));
  REQUIRE_MESSAGE(a.start(), a.log());
  REQUIRE_MESSAGE(b.start(), b.log());
  auto f = write_prewarm_fixture(dir.path(), 2, 0);
  std::string m = read_file(f.manifest);
  m = m.substr(0, m.find("[[build]]\nsource = \"bad\""));
  write_file(f.manifest, m);
  REQUIRE(kilnctl({"prewarm", f.manifest.string()}, a.socket()).code == 0);
  CHECK(f.good_builds() == 12);

  Run ex = kilnctl({"export", "--json", "--sources-from", f.manifest.string(), (dir / "x.tar").string()}, a.socket());
  REQUIRE_MESSAGE(ex.code == 0, ex.err);
  CHECK(json::parse(ex.out)["sources"] == 2);  // both [[source]]s of the manifest have a path
  Run im = kilnctl({"import", "--json", (dir / "x.tar").string()}, b.socket());
  REQUIRE_MESSAGE(im.code == 0, im.err);
  json i = json::parse(im.out);
  CHECK(i["imported"] == 12);
  CHECK(i["sources_imported"] == 2);

  // On node b, drop one artifact and prewarm from a manifest that names the source only by
  // its model hash: the imported source is what the build runs on.
  json items = json::parse(kilnctl({"ls", "--json"}, b.socket()).out)["items"];
  REQUIRE(items.size() == 12);
  REQUIRE(kilnctl({"rm", "--digest", items[0]["key_digest"].get<std::string>()}, b.socket()).code == 0);
  std::string no_path = m;
  no_path.replace(no_path.find("path = \"good.json\"\n"), 19, "");
  write_file(dir / "no_path.toml", no_path);
  Run again = kilnctl({"prewarm", "--json", (dir / "no_path.toml").string()}, b.socket());
  CAPTURE(again.out);
  REQUIRE(again.code == 0);
  json s = json::parse(again.out);
  CHECK(s["built"] == 1);
  CHECK(s["present"] == 11);
  CHECK(f.good_builds() == 13);
}
