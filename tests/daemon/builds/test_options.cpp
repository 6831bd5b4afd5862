// The [builds] section of kilnd.toml.
#include "kiln/builds/options.hpp"

#include <doctest/doctest.h>

using namespace kiln;
using namespace kiln::build;

TEST_CASE("BuildsDefaultsPointAtTheStoreAndThePythonWorker") {
  auto c = default_builds_config("/var/lib/kiln");
  CHECK(c.enabled);
  CHECK(c.scheduler.work_dir == "/var/lib/kiln/builds");
  REQUIRE(c.scheduler.worker.argv.size() == 2);
  CHECK(c.scheduler.worker.argv[0] == "python3");
  CHECK(c.scheduler.worker.argv[1].find("kiln_worker") != std::string::npos);
  CHECK(c.scheduler.builds_per_slot == 2);
  CHECK(c.scheduler.shared_compiler_cache);
}

TEST_CASE("TheBuildsSectionIsAppliedAndOtherSectionsIgnored") {
  auto c = default_builds_config("/s");
  auto st = apply_builds_toml(c, R"(
socket = "/tmp/x.sock"
[builds]
worker = ["/usr/bin/python3", "/opt/kiln_worker"]
build_timeout_s = 60
failure_ttl_s = 0
builds_per_gpu = 3
shared_compiler_cache = false
probe_gpus = false
[[builds.slots]]
name = "cpu0"
gpu_arch = "cpu"
gpu_name = "x86_64"
)", "kilnd.toml");
  REQUIRE_MESSAGE(st.has_value(), (st ? "" : st.error().message));
  CHECK(c.scheduler.worker.argv == std::vector<std::string>{"/usr/bin/python3", "/opt/kiln_worker"});
  CHECK(c.scheduler.build_timeout == std::chrono::seconds(60));
  CHECK(c.scheduler.failure_ttl == std::chrono::seconds(0));
  CHECK(c.scheduler.builds_per_slot == 3);
  CHECK_FALSE(c.scheduler.shared_compiler_cache);
  CHECK_FALSE(c.scheduler.probe_gpus);
  REQUIRE(c.scheduler.slots.size() == 1);
  CHECK(c.scheduler.slots[0].gpu_arch == "cpu");
}

TEST_CASE("BadBuildsOptionsAreNamedAndChangeNothing") {
  auto c = default_builds_config("/s");
  auto before = c.scheduler.worker.argv;
  auto st = apply_builds_toml(c, "[builds]\nbuild_timeout_s = -5\nworker = [\"x\"]\n", "f.toml");
  REQUIRE_FALSE(st.has_value());
  CHECK(st.error().code == Errc::invalid_argument);
  CHECK(st.error().message.find("f.toml: builds.build_timeout_s") != std::string::npos);
  CHECK(c.scheduler.worker.argv == before);
  CHECK(apply_builds_toml(c, "[builds]\nwroker = []\n", "f").error().message.find("unknown option") != std::string::npos);
  CHECK(apply_builds_toml(c, "[builds]\nworker = []\n", "f").error().message.find("non-empty") != std::string::npos);
  CHECK(apply_builds_toml(c, "[[builds.slots]]\nname = \"x\"\n", "f").error().message.find("gpu_arch") != std::string::npos);
  CHECK_FALSE(apply_builds_toml(c, "[builds\n", "f").has_value());
}

TEST_CASE("WorkerEnvNamesVariablesToPassAndRefusesThoseThatChangeABuildOutsideItsKey") {
  auto c = default_builds_config("/s");
  CHECK(c.scheduler.worker.pass_env.empty());
  auto st = apply_builds_toml(c, "[builds]\nworker_env = [\"CUDA_HOME\", \"LD_LIBRARY_PATH\"]\n", "f.toml");
  REQUIRE_MESSAGE(st.has_value(), (st ? "" : st.error().message));
  CHECK(c.scheduler.worker.pass_env == std::vector<std::string>{"CUDA_HOME", "LD_LIBRARY_PATH"});
  for (const char* name : {"CXX", "CC", "PYTHONPATH", "LD_PRELOAD", "TORCHINDUCTOR_FREEZING", "TRITON_CACHE_DIR",
                           "KILN_WORKER_PRELOADED", "A=B", ""}) {
    auto bad = apply_builds_toml(c, std::string("[builds]\nworker_env = [\"") + name + "\"]\n", "f.toml");
    REQUIRE_FALSE(bad.has_value());
    CHECK_MESSAGE(bad.error().message.find("f.toml: builds.worker_env") != std::string::npos, bad.error().message);
  }
  CHECK(apply_builds_toml(c, "[builds]\nworker_env = \"CUDA_HOME\"\n", "f").error().message.find("worker_env") !=
        std::string::npos);
}

TEST_CASE("WorkersAreSandboxedByDefaultAndWorkerUserNamesAUserThatIsNotRoot") {
  auto c = default_builds_config("/s");
  CHECK(c.scheduler.worker.sandbox.enabled);
  CHECK_FALSE(c.scheduler.worker.sandbox.user.has_value());
  REQUIRE(apply_builds_toml(c, "[builds]\nsandbox = false\nworker_user = \"nobody\"\n", "kilnd.toml").has_value());
  CHECK_FALSE(c.scheduler.worker.sandbox.enabled);
  REQUIRE(c.scheduler.worker.sandbox.user.has_value());
  CHECK(c.scheduler.worker.sandbox.user->name == "nobody");
  CHECK(c.scheduler.worker.sandbox.user->uid != 0);
  for (const char* bad : {"root", "no-such-kiln-user"}) {
    CAPTURE(bad);
    auto st = apply_builds_toml(c, std::string("[builds]\nworker_user = \"") + bad + "\"\n", "kilnd.toml");
    REQUIRE_FALSE(st.has_value());
    CHECK(st.error().message.find("builds.worker_user") != std::string::npos);
  }
}
