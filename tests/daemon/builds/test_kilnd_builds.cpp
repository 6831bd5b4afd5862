// End to end on the CPU machine: the real kilnd binary with the test worker as its build
// worker, driven through libkiln over the Unix socket.
#include <linux/sockios.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <span>
#include <thread>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "build_test_util.hpp"
#include "client_fixture.hpp"
#include "kilnd_builds.hpp"
#include "kiln/client/client.hpp"
#include "support/kilnd_process.hpp"
#include "support/raw_calls.hpp"
#include "test_node.hpp"

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
  // Builds started, as kilnd's log says (the sandboxed worker writes nothing of its own here).
  std::size_t builds() const { return test::build_starts(process_.log()).size(); }

 private:
  test::KilndProcess process_;
};

// kilnd whose test worker's toolchain probe lasts while `gate` exists (the worker reads
// KILN_TEST_WORKER_TOOLCHAIN_GATE from kilnd's environment); not waited for its builds.
test::KilndProcess start_with_gated_probe(const test::TempDir& dir, const std::filesystem::path& gate,
                                          const std::string& toml) {
  std::ofstream(gate) << "";
  struct GateEnv {
    explicit GateEnv(const std::filesystem::path& p) { ::setenv("KILN_TEST_WORKER_TOOLCHAIN_GATE", p.c_str(), 1); }
    ~GateEnv() { ::unsetenv("KILN_TEST_WORKER_TOOLCHAIN_GATE"); }
  } env(gate);
  return test::KilndProcess(dir.path(), toml, {}, -1, {}, /*wait_for_builds=*/false);
}

std::string register_source(client::Client& c, const test::TempDir& dir, const std::string& name, json command) {
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
  CHECK(kilnd.builds() == 1);

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

// CXX in kilnd's environment was the compiler of every package's wrapper, PYTHONPATH and
// LD_PRELOAD what the worker's Python and loader loaded: none of it is in the key.
TEST_CASE("AWorkerGetsAnAllowlistedEnvironmentNotTheOneKilndWasStartedWith") {
  test::TempDir dir;
  const std::vector<std::pair<const char*, const char*>> started_with = {
      {"CXX", "/bin/false"}, {"CC", "/bin/false"}, {"PYTHONPATH", "/nonexistent/kiln-site"},
      {"LD_PRELOAD", "/nonexistent/libkiln-test-preload.so"}, {"KILN_WORKER_PRELOADED", "1"},
      {"KILN_TEST_NOT_LISTED", "no"}, {"KILN_TEST_LISTED", "yes"}, {"LANG", "de_DE.ISO-8859-1"}};
  for (const auto& [k, v] : started_with) ::setenv(k, v, 1);
  test::BuildsToml toml;
  toml.worker_env = {"KILN_TEST_LISTED"};
  test::KilndProcess process(dir.path(), test::builds_toml(toml));
  for (const auto& [k, v] : started_with) ::unsetenv(k);
  auto c = test::connect_client(process.socket());
  const std::string hash = register_source(c, dir, "ok.json", {{"behavior", "ok"}});
  const Key key = test::source_key(hash);
  auto built = c.call(protocol::MsgType::build, "{\"key\":" + key.to_json() + ",\"wait\":true}");
  REQUIRE_MESSAGE(built.has_value(), (built ? "" : built.error().to_string()));
  auto got = c.get(key);
  REQUIRE(got.has_value());
  REQUIRE(got->has_value());
  auto logs = c.call(protocol::MsgType::logs, "{\"key_digest\":\"" + (**got).info().key_digest.hex() + "\"}");
  REQUIRE(logs.has_value());
  const std::string log = json::parse(*logs)["record"]["log"].get<std::string>();
  CAPTURE(log);
  for (const char* absent : {"env CXX=", "env CC=", "env PYTHONPATH=", "env LD_PRELOAD=", "env KILN_WORKER_PRELOADED=",
                             "env KILN_TEST_NOT_LISTED=", "ISO-8859-1"})
    CHECK_MESSAGE(log.find(absent) == std::string::npos, absent);
  for (const char* present : {"test worker: env KILN_TEST_LISTED=yes\n", "test worker: env LANG=C.UTF-8\n",
                              "test worker: env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n",
                              "test worker: env TORCHINDUCTOR_CACHE_DIR=", "test worker: env KILN_BUILD_SLOT=gpu0\n"})
    CHECK_MESSAGE(log.find(present) != std::string::npos, present);
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
  CHECK(kilnd.builds() == 1);
  auto r3 = c.call(protocol::MsgType::build, "{\"key\":" + test::source_key(crash).to_json() + ",\"force\":true}");
  REQUIRE_FALSE(r3.has_value());
  CHECK(kilnd.builds() == 2);
  // kilnd is still serving.
  CHECK(c.status().has_value());
}

TEST_CASE("AKeyTheNodeRefusesAtOnceIsAnErrorOfABuildThatDoesNotWaitNotAQueuedJobNobodyKnows") {
  // Seen on a GPU node: a key naming another toolchain than the node's was answered
  // "queued", and BUILD_STATUS by its digest then knew no build, so kiln.torch polled for
  // a job that never was ("kilnd lost the build three times").
  test::TempDir dir;
  Kilnd kilnd(dir);
  auto c = kilnd.connect();
  const std::string ok = register_source(c, dir, "ok.json", {{"behavior", "ok"}});
  Key other = test::source_key(ok);
  other.torch_version = "2.99.0+elsewhere";  // every other node field stays kilnd's to fill
  auto built = c.call(protocol::MsgType::build, "{\"key\":" + other.to_json() + ",\"wait\":false}");
  REQUIRE_FALSE(built.has_value());
  CHECK(built.error().message.find("cannot build here: key.torch_version") != std::string::npos);

  auto sub = c.call(protocol::MsgType::prewarm_submit, "{\"keys\":[" + other.to_json() + "]}");
  REQUIRE_MESSAGE(sub.has_value(), (sub ? "" : sub.error().to_string()));
  const json reply = json::parse(*sub);
  REQUIRE(reply["results"].size() == 1);
  CHECK(reply["results"][0]["state"] == "failed");
  CHECK(reply["results"][0]["error"].get<std::string>().find("2.99.0+elsewhere") != std::string::npos);
  CHECK(kilnd.builds() == 0);
  // A key it can build is still queued and built.
  auto fine = c.call(protocol::MsgType::build, "{\"key\":" + test::source_key(ok).to_json() + ",\"wait\":false}");
  REQUIRE_MESSAGE(fine.has_value(), (fine ? "" : fine.error().to_string()));
  CHECK(json::parse(*fine)["state"] != "failed");
}

TEST_CASE("KilndServesWhileItsBuildWorkerIsProbed: hits at once; builds, uploads and keys left to the node wait") {
  test::TempDir dir;
  // A stored artifact, its key complete (no field left to the node).
  Key stored = test::source_key(std::string(64, 'a'));
  fill_node_fields(stored, test::test_node_fields());
  const std::string bytes(5000, 'k');
  {
    test::KilndProcess first(dir.path(), test::builds_toml());
    auto c = test::connect_client(first.socket());
    REQUIRE(c.put(stored, std::as_bytes(std::span(bytes.data(), bytes.size()))).has_value());
    first.signal(SIGTERM);
    REQUIRE(first.wait(std::chrono::seconds(20)) == 0);
  }

  // The restart's toolchain probe lasts until the gate goes.
  const auto gate = dir.path() / "probe.gate";
  test::KilndProcess kilnd = start_with_gated_probe(dir, gate, test::builds_toml());
  auto c = test::connect_client(kilnd.socket());
  auto st = c.status();
  REQUIRE(st.has_value());
  CHECK(st->builds_probing);
  CHECK(st->builds_unavailable.find("probing") != std::string::npos);

  // A hit is served now, not after the probe.
  auto hit = std::async(std::launch::async, [&] {
    auto cc = test::connect_client(kilnd.socket());
    auto got = cc.get(stored);
    return got && *got ? (*got)->info().size : std::uint64_t(0);
  });
  REQUIRE(hit.wait_for(10s) == std::future_status::ready);
  CHECK(hit.get() == bytes.size());

  // BUILD_STATUS is answered: no build exists yet.
  auto none = c.call(protocol::MsgType::build_status, "{}");
  REQUIRE_MESSAGE(none.has_value(), none.error().to_string());
  CHECK(json::parse(*none)["builds"].empty());

  // These wait for the probe: a key leaving its node fields to the node (the probe gives
  // cpu_isa as the worker's torch sees it), the build service, an upload.
  auto left_to_node = std::async(std::launch::async, [&] {
    auto cc = test::connect_client(kilnd.socket());
    auto got = cc.get(test::source_key(std::string(64, 'b')));
    return got ? std::string(*got ? "hit" : "miss") : got.error().to_string();
  });
  auto build = std::async(std::launch::async, [&] {
    auto cc = test::connect_client(kilnd.socket());
    auto r = cc.call(protocol::MsgType::build, "{\"key\":" + test::source_key(std::string(64, 'c')).to_json() + "}");
    return r ? std::string("ok") : r.error().to_string();
  });
  auto upload = std::async(std::launch::async, [&] {
    auto cc = test::connect_client(kilnd.socket());
    Key k = stored;
    k.region = "Uploaded";
    auto r = cc.put(k, std::as_bytes(std::span(bytes.data(), bytes.size())));
    return r ? std::string("ok") : r.error().to_string();
  });
  CHECK(left_to_node.wait_for(700ms) == std::future_status::timeout);
  CHECK(build.wait_for(0ms) == std::future_status::timeout);
  CHECK(upload.wait_for(0ms) == std::future_status::timeout);
  CHECK(c.status()->builds_probing);

  std::filesystem::remove(gate);
  REQUIRE(left_to_node.wait_for(20s) == std::future_status::ready);
  CHECK(left_to_node.get() == "miss");
  REQUIRE(build.wait_for(20s) == std::future_status::ready);
  CHECK(build.get().find("no_source") != std::string::npos);  // asked of the scheduler, not refused
  REQUIRE(upload.wait_for(20s) == std::future_status::ready);
  CHECK(upload.get() == "ok");
  st = c.status();
  REQUIRE(st.has_value());
  CHECK_FALSE(st->builds_probing);
  CHECK(st->builds_unavailable.empty());
  CHECK(st->node["cpu_isa"] == "test-worker-isa");  // the probe's, not kilnd's own detection
  CHECK(kilnd.wait_for_log("builds: ready after", 5s));
}

TEST_CASE("KilndStoppedWhileItProbesExitsAtOnce: the worker's probe is stopped, not waited out; "
          "a request held for it is answered unavailable") {
  test::TempDir dir;
  test::BuildsToml slow;
  slow.probe_timeout_s = 600;
  // The gate is never removed: the probe would last until probe_timeout_s.
  test::KilndProcess kilnd = start_with_gated_probe(dir, dir.path() / "probe.gate", test::builds_toml(slow));
  auto c = test::connect_client(kilnd.socket());
  REQUIRE(c.status().has_value());
  CHECK(c.status()->builds_probing);
  // An upload waits for the probe. Sent raw, so that the test knows kilnd has taken it
  // before the SIGTERM: a Unix socket's SIOCOUTQ counts the bytes its peer has not read yet.
  auto held = test::connect_raw(kilnd.socket());
  protocol::PutRequest put;
  put.key = test::source_key(std::string(64, 'd'));
  put.size = 100;
  const auto put_id = held->next_id();
  REQUIRE(held->send_frame(protocol::MsgType::put, put_id, protocol::encode(put)));
  REQUIRE(test::wait_until(
      [&] {
        int unread = -1;
        return ::ioctl(held->fd(), SIOCOUTQ, &unread) == 0 && unread == 0;
      },
      30s));
  CHECK_FALSE(held->recv(200ms).has_value());  // read, and not answered: held
  kilnd.signal(SIGTERM);
  auto reply = held->recv(30s);
  REQUIRE(reply.has_value());
  CHECK(reply->header.request_id == put_id);
  REQUIRE(reply->header.type == protocol::MsgType::error);
  auto err = protocol::decode<protocol::ErrorBody>(reply->body);
  REQUIRE(err.has_value());
  CHECK(err->code == Errc::unavailable);
  // The held request's answer, not the refusal of one that came during the drain.
  CHECK_MESSAGE(err->message.find("probing") != std::string::npos, err->message);
  // Drain, the probe's process group killed (a 2 s grace before SIGKILL), then exit: far
  // sooner than the 600 s probe timeout.
  auto status = kilnd.wait(std::chrono::seconds(30));
  REQUIRE(status.has_value());
  CHECK(*status == 0);
  CHECK(kilnd.log().find("kilnd stopped cleanly") != std::string::npos);
}
