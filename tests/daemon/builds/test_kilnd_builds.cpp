// End to end on the CPU machine: the real kilnd binary with the test worker as its build
// worker, driven through libkiln over the Unix socket.
#include <fcntl.h>
#include <stdlib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <fstream>
#include <thread>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "build_test_util.hpp"
#include "kiln/client/client.hpp"

extern char** environ;

using namespace kiln;
using namespace std::chrono_literals;
using json = nlohmann::json;

namespace {

class Kilnd {
 public:
  // kilnd's log goes to <dir>/kilnd.log (kept with the folder when a test fails).
  // The socket lives in a short /tmp folder: test folders can be longer than a Unix
  // socket path may be (108 bytes).
  explicit Kilnd(const test::TempDir& dir) {
    char tmpl[] = "/tmp/kiln-b-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    sock_dir_ = tmpl;
    socket_ = sock_dir_ / "s";
    std::ofstream(dir / "kilnd.toml") << "[builds]\nworker = [\"" << KILN_TEST_WORKER << "\"]\nprobe_gpus = false\n"
                                      << "failure_ttl_s = 600\n[[builds.slots]]\nname = \"gpu0\"\ngpu_arch = \"sm_test\"\n"
                                      << "gpu_name = \"Test GPU\"\n";
    std::vector<std::string> args{KILN_KILND, "--socket", socket_.string(), "--store", (dir / "store").string(),
                                  "--config", (dir / "kilnd.toml").string()};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    const std::string log = (dir / "kilnd.log").string();
    posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(::posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
    for (int i = 0; i < 200 && !std::filesystem::exists(socket_); ++i) std::this_thread::sleep_for(50ms);
    REQUIRE(std::filesystem::exists(socket_));
  }
  ~Kilnd() {
    ::kill(pid_, SIGTERM);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    std::error_code ec;
    std::filesystem::remove_all(sock_dir_, ec);
  }
  client::Client connect() const {
    client::ConnectOptions o;
    o.socket = socket_;
    auto c = client::Client::connect(o);
    REQUIRE_MESSAGE(c.has_value(), (c ? "" : c.error().to_string()));
    return std::move(*c);
  }

 private:
  std::filesystem::path sock_dir_, socket_;
  pid_t pid_ = -1;
};

// A key with the node fields left to kilnd.
Key client_key(const std::string& hash) {
  Key k;
  k.kind = ArtifactKind::aoti;
  k.model_hash = hash;
  k.region = "Block";
  k.dtype = "bfloat16";
  k.inputs = {{{Dim::fixed(1), Dim::fixed(4608), Dim::fixed(3072)}, "bfloat16", "strided"}};
  return k;
}

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
  const Key key = client_key(hash);

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
  auto no_source = c.call(protocol::MsgType::build, "{\"key\":" + client_key(std::string(64, 'e')).to_json() + "}");
  REQUIRE_FALSE(no_source.has_value());
  CHECK(no_source.error().code == Errc::no_source);
  CHECK(no_source.error().message.find(std::string(64, 'e')) != std::string::npos);

  const std::string crash = register_source(c, dir, "crash.json", {{"behavior", "crash"}});
  auto r1 = c.call(protocol::MsgType::build, "{\"key\":" + client_key(crash).to_json() + "}");
  REQUIRE_FALSE(r1.has_value());
  CHECK(r1.error().code == Errc::build_failed);
  CHECK(r1.error().message.find("signal 11") != std::string::npos);
  // Remembered: the second ask fails fast without a build; force builds again.
  auto r2 = c.call(protocol::MsgType::build, "{\"key\":" + client_key(crash).to_json() + "}");
  REQUIRE_FALSE(r2.has_value());
  CHECK(r2.error().message.find("--force") != std::string::npos);
  CHECK(test::count_lines(dir / "builds.txt") == 1);
  auto r3 = c.call(protocol::MsgType::build, "{\"key\":" + client_key(crash).to_json() + ",\"force\":true}");
  REQUIRE_FALSE(r3.has_value());
  CHECK(test::count_lines(dir / "builds.txt") == 2);
  // kilnd is still serving.
  CHECK(c.status().has_value());
}
