// kilnd's build workers in their sandbox (kiln/builds/worker_sandbox.hpp, SECURITY.md): a
// real kilnd, the test worker trying what a source that took it over would try (write the
// store, write /tmp, open a network socket), and the logs saying what confined it.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "kiln/builds/worker_sandbox.hpp"
#include "kiln/protocol/frame.hpp"
#include "kilnd_builds.hpp"
#include "support/kilnd_process.hpp"
#include "support/raw_calls.hpp"
#include "support/raw_client.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using json = nlohmann::json;
namespace proto = kiln::protocol;
namespace fs = std::filesystem;

namespace {

bool kernel_has_landlock() {
  return build::describe_sandbox_support(build::WorkerSandbox{}).find("landlock ABI") != std::string::npos;
}

struct Built {
  std::string log;    // the build's log (LOGS), the worker's stderr and kiln's lines
  std::string probe;  // the test worker's "probe" line: what it was let do
};

// Registers a test-worker source that probes `writes` (and kilnd's socket, with
// `kiln_socket`) and builds it; the build's log.
Built build_probing(const test::KilndProcess& kilnd, const std::vector<std::string>& writes, bool kiln_socket = false) {
  auto c = test::connect_raw(kilnd.socket());
  json probe = {{"write", writes}};
  if (kiln_socket) probe["kiln_socket"] = kilnd.socket().string();
  const std::string hash = test::put_source_text(*c, "probe.json", json{{"behavior", "ok"}, {"probe", probe}}.dump());
  json built = json::parse(test::call_ok(*c, proto::MsgType::build, "{\"key\":" + test::source_key(hash).to_json() + "}"));
  REQUIRE(built["state"] == "done");
  json logs = json::parse(
      test::call_ok(*c, proto::MsgType::logs, "{\"key_digest\":\"" + built["key_digest"].get<std::string>() + "\"}"));
  Built out;
  out.log = logs["record"]["log"].get<std::string>();
  const std::string mark = "test worker: probe ";
  const auto at = out.log.find(mark);
  REQUIRE_MESSAGE(at != std::string::npos, out.log);
  out.probe = out.log.substr(at + mark.size(), out.log.find('\n', at) - at - mark.size());
  return out;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A kilnd that runs as the user nobody, as the shipped unit runs it as kiln: a script that
// gives nobody the folders KilndProcess made for it (the socket's, the readiness socket,
// the store) and drops root with setpriv before it execs kilnd.
std::string kilnd_as_nobody(const fs::path& dir) {
  const fs::path script = dir / "kilnd-as-nobody.sh";
  std::ofstream(script) << "#!/bin/sh\n"
                        << "prev=\n"
                        << "for a in \"$@\"; do\n"
                        << "  case $prev in\n"
                        << "    --socket) chown nobody \"$(dirname \"$a\")\" ;;\n"
                        << "    --store) mkdir -p \"$a\" && chown -R nobody \"$a\" ;;\n"
                        << "  esac\n"
                        << "  prev=$a\n"
                        << "done\n"
                        << "chown nobody \"$NOTIFY_SOCKET\"\n"
                        << "exec setpriv --reuid=nobody --regid=nogroup --clear-groups -- " << test::kilnd_binary() << " \"$@\"\n";
  fs::permissions(script, fs::perms::owner_all | fs::perms::group_read | fs::perms::others_read);
  return script.string();
}

}  // namespace

TEST_CASE("AWorkerCannotWriteOutsideItsBuildFolderNorOpenANetworkSocket") {
  if (!kernel_has_landlock()) {
    MESSAGE("this kernel has no Landlock: writes are not confined (the degraded case is tested in test_worker_sandbox)");
    return;
  }
  test::TempDir dir;
  // kilnd's own user, root here: the file modes would let it write anywhere, only the
  // sandbox stands in the way.
  test::KilndProcess kilnd(dir.path(), test::builds_toml());
  const fs::path in_store = dir / "store" / "planted-by-a-worker";  // beside index.sqlite
  const fs::path in_tmp = fs::temp_directory_path() / ("kiln-worker-escape-" + std::to_string(::getpid()));
  Built b = build_probing(kilnd, {in_store.string(), in_tmp.string()});
  MESSAGE("probe: " << b.probe);
  CHECK(has(b.probe, "inet=EPERM"));
  CHECK(has(b.probe, "inet6=EPERM"));
  CHECK(has(b.probe, "write:" + in_store.string() + "=EACCES"));
  CHECK(has(b.probe, "write:" + in_tmp.string() + "=EACCES"));
  CHECK(has(b.probe, "tmp=ok"));  // its private TMPDIR, in its build's folder
  CHECK_FALSE(fs::exists(in_store));
  CHECK_FALSE(fs::exists(in_tmp));
  // The build log and kilnd's start log say what confined it.
  CHECK_MESSAGE(has(b.log, "[kiln] worker sandbox: landlock ABI "), b.log);
  CHECK(has(b.log, "seccomp (no network sockets, no io_uring, no ptrace), no_new_privs"));
  CHECK(has(kilnd.log(), "builds: worker sandbox on: landlock ABI "));
}

TEST_CASE("WorkersRunWithoutRootWhenKilndIsRootAndWorkerUserIsSet") {
  if (::geteuid() != 0) {
    MESSAGE("not root: kilnd cannot switch users here (its workers already are not root)");
    return;
  }
  auto nobody = build::resolve_worker_user("nobody");
  REQUIRE_MESSAGE(nobody.has_value(), "this test needs the user nobody");
  test::TempDir dir;
  test::KilndProcess kilnd(dir.path(), test::builds_toml({.extra = {"worker_user = \"nobody\""}}));
  const fs::path in_tmp = fs::temp_directory_path() / ("kiln-worker-escape-" + std::to_string(::getpid()));
  Built b = build_probing(kilnd, {in_tmp.string()});
  MESSAGE("probe: " << b.probe);
  // The uid and gid the worker itself saw, not what kilnd meant to give it.
  CHECK(has(b.probe, "uid=" + std::to_string(nobody->uid) + " gid=" + std::to_string(nobody->gid) + " "));
  CHECK_FALSE(has(b.probe, "uid=0 "));
  CHECK(has(b.probe, "tmp=ok"));  // its build folder is its own
  if (kernel_has_landlock()) CHECK(has(b.probe, "write:" + in_tmp.string() + "=EACCES"));  // /tmp is 1777: Landlock
  CHECK_FALSE(fs::exists(in_tmp));
  CHECK(has(b.log, "uid " + std::to_string(nobody->uid) + " (nobody)"));
  CHECK(has(kilnd.log(), "as uid " + std::to_string(nobody->uid) + " (nobody)"));
}

TEST_CASE("WithTheSandboxOffAWorkerHasKilndsRightsAndTheLogsSaySo") {
  test::TempDir dir;
  test::KilndProcess kilnd(dir.path(), test::builds_toml({.extra = {"sandbox = false"}}));
  const fs::path in_store = dir / "store" / "written-by-an-unconfined-worker";
  Built b = build_probing(kilnd, {in_store.string()});
  MESSAGE("probe: " << b.probe);
  CHECK(has(b.probe, "inet=ok"));
  CHECK(has(b.probe, "write:" + in_store.string() + "=ok"));
  CHECK(fs::exists(in_store));
  CHECK(has(b.log, "[kiln] worker sandbox: off ([builds] sandbox = false)"));
  CHECK(has(kilnd.log(), "builds: worker sandbox off ([builds] sandbox = false)"));
}

TEST_CASE("AWorkerOfKilndsOwnUserGetsNoRoleOnKilndsSocket") {
  if (::geteuid() != 0) {
    MESSAGE("not root: cannot start kilnd as another user here");
    return;
  }
  // kilnd not root, its workers its own user: the shipped unit's case, where the worker would
  // otherwise be kilnd's owner on its socket (trust_owner: admin) and could PUT any bytes.
  test::TempDir dir;
  test::KilndProcess kilnd(dir.path(), test::builds_toml(), {}, -1, kilnd_as_nobody(dir.path()));
  Built b = build_probing(kilnd, {}, /*kiln_socket=*/true);
  MESSAGE("probe: " << b.probe);
  CHECK_MESSAGE(has(b.probe, "uid=65534 "), b.probe);  // kilnd's own user: nobody here
  CHECK_MESSAGE(has(b.probe, "kiln_socket=roles:[]"), b.probe);
  CHECK(has(kilnd.log(), "comes from inside a build worker's sandbox: it gets no role"));

  // The sandbox off: the same worker is kilnd's owner there (what the sandbox takes away).
  test::TempDir off_dir;
  test::KilndProcess off(off_dir.path(), test::builds_toml({.extra = {"sandbox = false"}}), {}, -1,
                         kilnd_as_nobody(off_dir.path()));
  Built o = build_probing(off, {}, /*kiln_socket=*/true);
  MESSAGE("sandbox off, probe: " << o.probe);
  CHECK_MESSAGE(has(o.probe, "kiln_socket=roles:[\"read\",\"build\",\"put\",\"admin\"]"), o.probe);
}
