// The kilnctl binary against a real kilnd: every first command, byte-identical artifacts
// through files and pipes, --json output, and the documented exit codes.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "kiln/client/client.hpp"
#include "ops_test_util.hpp"
#include "random_bytes.hpp"
#include "support/kilnd_process.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using kiln::test::KilndProcess;
using kiln::test::TempDir;
using kiln::ops_test::Run;

namespace {

const std::string kHash = "3fa2bd6e2c3c6bb1a1f0ff7c6e4d3b2a1908f7e6d5c4b3a29180f7e6d5c4b3a2";

// kilnctl with `args`, `input` on stdin, `env` added (tests/ops/kilnctl/ops_test_util.hpp).
Run kilnctl(const std::vector<std::string>& args, const std::string& input = "",
            const std::vector<std::string>& env = {}) {
  return kiln::ops_test::run_kilnctl(args, input, env);
}

std::vector<std::string> key_flags(const std::string& region) {
  return {"--kind", "aoti", "--model-hash", kHash, "--region", region, "--dtype", "bfloat16",
          "--input", "bfloat16:1x4096x3072"};
}

std::vector<std::string> cmd(std::initializer_list<std::string> head, const std::vector<std::string>& tail,
                             const KilndProcess& d) {
  std::vector<std::string> a(head);
  a.insert(a.end(), tail.begin(), tail.end());
  a.push_back("--socket");
  a.push_back(d.socket().string());
  return a;
}

std::string file_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("PutGetStatRoundTripsThroughFilesAndPipes") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());

  int n = 0;
  for (std::size_t size : {std::size_t{0}, std::size_t{4096}, std::size_t{2'500'000}}) {
    CAPTURE(size);
    const std::string region = "Block" + std::to_string(n++);
    const std::string data = kiln::test::random_bytes(size, static_cast<unsigned>(size) + 5);
    {
      std::ofstream f(dir / "in.bin", std::ios::binary);
      f << data;
    }
    auto put = kilnctl(cmd({"put", (dir / "in.bin").string(), "--json"}, key_flags(region), d));
    REQUIRE_MESSAGE(put.code == 0, put.err);
    auto info = nlohmann::json::parse(put.out);
    CHECK(info["size"] == size);
    CHECK(info["key"]["gpu_arch"] == "sm_90");  // filled by the daemon
    const std::string digest = info["key_digest"];

    // To a file (atomically written), by key fields.
    auto get = kilnctl(cmd({"get", "-o", (dir / "out.bin").string()}, key_flags(region), d));
    REQUIRE_MESSAGE(get.code == 0, get.err);
    CHECK(file_bytes(dir / "out.bin") == data);
    // To stdout (a pipe), by digest, descriptor and streamed.
    for (const char* extra : {"--digest", "--stream"}) {
      auto args = cmd({"get", "--digest", digest}, {}, d);
      if (std::string(extra) == "--stream") args.push_back("--stream");
      auto piped = kilnctl(args);
      REQUIRE_MESSAGE(piped.code == 0, piped.err);
      CHECK(piped.out == data);
    }
    auto st = kilnctl(cmd({"stat", "--json", "--digest", digest}, {}, d));
    REQUIRE(st.code == 0);
    CHECK(nlohmann::json::parse(st.out)["size"] == size);
    auto human = kilnctl(cmd({"stat"}, key_flags(region), d));
    REQUIRE(human.code == 0);
    CHECK(human.out.find(digest) != std::string::npos);
    CHECK(human.out.find(region) != std::string::npos);
  }

  // put from stdin
  const std::string piped_in = kiln::test::random_bytes(100'000, 9);
  auto put = kilnctl(cmd({"put", "-"}, key_flags("FromStdin"), d), piped_in);
  REQUIRE_MESSAGE(put.code == 0, put.err);
  auto back = kilnctl(cmd({"get"}, key_flags("FromStdin"), d));
  REQUIRE(back.code == 0);
  CHECK(back.out == piped_in);
}

TEST_CASE("LsPinUnpinRmStatsStatusAndKey") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  {
    std::ofstream f(dir / "a.bin");
    f << "artifact";
  }
  for (const char* region : {"Alpha", "Beta", "Gamma"})
    REQUIRE(kilnctl(cmd({"put", (dir / "a.bin").string()}, key_flags(region), d)).code == 0);

  auto ls = kilnctl(cmd({"ls", "--json"}, {}, d));
  REQUIRE(ls.code == 0);
  CHECK(nlohmann::json::parse(ls.out)["items"].size() == 3);
  auto filtered = kilnctl(cmd({"ls", "--json", "--filter", "region=Beta"}, {}, d));
  REQUIRE(filtered.code == 0);
  auto items = nlohmann::json::parse(filtered.out)["items"];
  REQUIRE(items.size() == 1);
  CHECK(items[0]["key"]["region"] == "Beta");
  auto table = kilnctl(cmd({"ls"}, {}, d));
  REQUIRE(table.code == 0);
  CHECK(table.out.find("DIGEST") != std::string::npos);
  CHECK(table.out.find("Gamma") != std::string::npos);
  auto paged = kilnctl(cmd({"ls", "--limit", "2"}, {}, d));
  CHECK(paged.out.find("--offset 2") != std::string::npos);
  auto all = kilnctl(cmd({"ls", "--json", "--limit", "2", "--all"}, {}, d));
  CHECK(nlohmann::json::parse(all.out)["items"].size() == 3);
  auto unknown = kilnctl(cmd({"ls", "--filter", "colour=blue"}, {}, d));
  CHECK(unknown.code == 1);
  CHECK(unknown.err.find("the fields are: kind, model_hash, region, gpu_arch") != std::string::npos);
  // Every column header of the table is a field name the filter takes.
  CHECK(table.out.find("GPU_ARCH") != std::string::npos);
  auto by_arch = kilnctl(cmd({"ls", "--json", "--filter", "gpu_arch=sm_90"}, {}, d));
  REQUIRE(by_arch.code == 0);
  CHECK(nlohmann::json::parse(by_arch.out)["items"].size() == 3);

  REQUIRE(kilnctl(cmd({"pin"}, key_flags("Alpha"), d)).code == 0);
  auto pinned = kilnctl(cmd({"ls", "--json", "--pinned"}, {}, d));
  REQUIRE(nlohmann::json::parse(pinned.out)["items"].size() == 1);
  REQUIRE(kilnctl(cmd({"unpin"}, key_flags("Alpha"), d)).code == 0);
  CHECK(nlohmann::json::parse(kilnctl(cmd({"ls", "--json", "--pinned"}, {}, d)).out)["items"].empty());

  auto rm = kilnctl(cmd({"rm", "--json"}, key_flags("Beta"), d));
  REQUIRE(rm.code == 0);
  CHECK(nlohmann::json::parse(rm.out)["removed"] == true);
  // Gone: every lookup command says "not found" with exit code 2.
  CHECK(kilnctl(cmd({"rm"}, key_flags("Beta"), d)).code == 2);
  CHECK(kilnctl(cmd({"get", "-o", (dir / "x").string()}, key_flags("Beta"), d)).code == 2);
  CHECK_FALSE(std::filesystem::exists(dir / "x"));
  CHECK(kilnctl(cmd({"stat"}, key_flags("Beta"), d)).code == 2);
  CHECK(kilnctl(cmd({"pin"}, key_flags("Beta"), d)).code == 2);

  auto stats = kilnctl(cmd({"stats", "--json"}, {}, d));
  REQUIRE(stats.code == 0);
  CHECK(nlohmann::json::parse(stats.out)["store"]["entries"] == 2);
  auto human_stats = kilnctl(cmd({"stats"}, {}, d));
  CHECK(human_stats.out.find("entries") != std::string::npos);

  auto status = kilnctl(cmd({"status", "--json"}, {}, d));
  REQUIRE(status.code == 0);
  auto s = nlohmann::json::parse(status.out);
  CHECK(s["pid"] == d.pid());
  CHECK(s["node"]["gpu_arch"] == "sm_90");
  // KILN_SOCKET is used when --socket is not given.
  auto by_env = kilnctl({"status"}, "", {"KILN_SOCKET=" + d.socket().string()});
  CHECK(by_env.code == 0);
  CHECK(by_env.out.find("kilnd") != std::string::npos);

  // What `ls` shows (12 hex digits) finds the artifact: a unique prefix is enough.
  const std::string alpha = nlohmann::json::parse(kilnctl(cmd({"stat", "--json"}, key_flags("Alpha"), d)).out)["key_digest"];
  for (std::size_t digits : {std::size_t{12}, std::size_t{4}}) {
    auto by_prefix = kilnctl(cmd({"stat", "--json", "--digest", alpha.substr(0, digits)}, {}, d));
    REQUIRE_MESSAGE(by_prefix.code == 0, by_prefix.err);
    CHECK(nlohmann::json::parse(by_prefix.out)["key_digest"] == alpha);
  }
  CHECK(kilnctl(cmd({"inspect", "--digest", alpha.substr(0, 12)}, {}, d)).code == 0);
  // A prefix no stored digest has: not found (2), saying so.
  std::string other = alpha.substr(0, 12);
  other[11] = other[11] == '0' ? '1' : '0';
  const std::string gamma = nlohmann::json::parse(kilnctl(cmd({"stat", "--json"}, key_flags("Gamma"), d)).out)["key_digest"];
  if (gamma.compare(0, 12, other) != 0) {
    auto none = kilnctl(cmd({"stat", "--digest", other}, {}, d));
    CHECK(none.code == 2);
    CHECK(none.err.find("starts with " + other) != std::string::npos);
  }
  // A prefix too short to be unique names the candidates and asks for more digits.
  std::size_t common = 0;
  while (common < 64 && alpha[common] == gamma[common]) ++common;
  if (common >= 4) {
    auto ambiguous = kilnctl(cmd({"stat", "--digest", alpha.substr(0, common)}, {}, d));
    CHECK(ambiguous.code == 1);
    CHECK(ambiguous.err.find("ambiguous") != std::string::npos);
  }

  // `key --node` fills node fields from the daemon and gives the digest the daemon uses.
  auto key = kilnctl(cmd({"key", "--node"}, key_flags("Alpha"), d));
  REQUIRE_MESSAGE(key.code == 0, key.err);
  auto stat = kilnctl(cmd({"stat", "--json"}, key_flags("Alpha"), d));
  CHECK(key.out == nlohmann::json::parse(stat.out)["key_digest"].get<std::string>() + "\n");
}

TEST_CASE("ExitCodesForAbsentDaemonRefusalAndBadInput") {
  TempDir dir;
  // No daemon: 3.
  auto none = kilnctl({"status", "--socket", (dir / "none.sock").string()});
  CHECK(none.code == 3);
  CHECK(none.err.find("none.sock") != std::string::npos);

  KilndProcess d(dir.path(), "[access]\ntrust_owner = false\nread_users = [\"*\"]\n");
  REQUIRE_MESSAGE(d.start(), d.log());
  {
    std::ofstream f(dir / "a.bin");
    f << "artifact";
  }
  // Writing and administering are refused for this user: 4.
  auto put = kilnctl(cmd({"put", (dir / "a.bin").string()}, key_flags("Alpha"), d));
  CHECK(put.code == 4);
  CHECK(put.err.find("permission_denied") != std::string::npos);
  CHECK(kilnctl(cmd({"rm"}, key_flags("Alpha"), d)).code == 4);
  // Reading is allowed.
  CHECK(kilnctl(cmd({"stats"}, {}, d)).code == 0);
  // Bad input: 1, before anything is sent.
  auto missing = kilnctl(cmd({"get"}, {"--region", "x"}, d));
  CHECK(missing.code == 1);
  CHECK(missing.err.find("--model-hash") != std::string::npos);
  // A local file that is not there is bad input (1), never "no artifact" (2).
  auto no_file = kilnctl(cmd({"put", "--json", (dir / "no-such-file").string()}, key_flags("A"), d));
  CHECK(no_file.code == 1);
  CHECK(no_file.err.find("no such file: ") != std::string::npos);
  // --json errors name the exit code the shell sees, not an internal number.
  auto doc = nlohmann::json::parse(no_file.out);
  CHECK(doc["error"]["exit_code"] == 1);
  CHECK(doc["error"]["name"] == "invalid_argument");
  CHECK_FALSE(doc["error"].contains("code"));
  CHECK(kilnctl(cmd({"get", "--digest", "abc"}, {}, d)).code == 1);
  // get refuses to write binary to --json's stdout.
  CHECK(kilnctl(cmd({"get", "--json"}, key_flags("Alpha"), d)).code == 1);
}

TEST_CASE("GetIntoADeviceFifoOrLinkWritesThroughItAndNeverReplacesIt") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  const std::string data = kiln::test::random_bytes(300'000, 21);
  {
    std::ofstream f(dir / "in.bin", std::ios::binary);
    f << data;
  }
  REQUIRE(kilnctl(cmd({"put", (dir / "in.bin").string()}, key_flags("Devices"), d)).code == 0);

  // A twin of /dev/null in the test's folder (char device 1:3): `-o /dev/null` as root
  // used to rename a regular file over it.
  const auto null_dev = dir / "null";
  REQUIRE_MESSAGE(::mknod(null_dev.c_str(), S_IFCHR | 0666, ::makedev(1, 3)) == 0,
                  "mknod needs root, as CI has: " << std::strerror(errno));
  auto to_null = kilnctl(cmd({"get", "-o", null_dev.string()}, key_flags("Devices"), d));
  CHECK_MESSAGE(to_null.code == 0, to_null.err);
  struct stat st {};
  REQUIRE(::stat(null_dev.c_str(), &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
  CHECK(st.st_rdev == ::makedev(1, 3));

  // A FIFO: the reader gets the bytes; the FIFO stays a FIFO.
  const auto fifo = dir / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  std::string through_fifo;
  std::thread reader([&] {
    std::ifstream in(fifo, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    through_fifo = ss.str();
  });
  REQUIRE(::link(fifo.c_str(), (dir / "fifo.same").c_str()) == 0);
  auto to_fifo = kilnctl(cmd({"get", "-o", fifo.string()}, key_flags("Devices"), d));
  // Had kilnctl replaced the FIFO instead of writing into it, the reader would wait
  // forever: a writer of our own on the same FIFO (a second name) ends its wait.
  int unblock = ::open((dir / "fifo.same").c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (unblock >= 0) ::close(unblock);
  reader.join();
  CHECK_MESSAGE(to_fifo.code == 0, to_fifo.err);
  CHECK(through_fifo == data);
  REQUIRE(::stat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));

  // A symbolic link: still a link afterwards, and the file it names holds the bytes.
  {
    std::ofstream f(dir / "real.bin", std::ios::binary);
    f << "old";
  }
  std::filesystem::create_symlink(dir / "real.bin", dir / "link.bin");
  auto to_link = kilnctl(cmd({"get", "-o", (dir / "link.bin").string()}, key_flags("Devices"), d));
  CHECK_MESSAGE(to_link.code == 0, to_link.err);
  CHECK(std::filesystem::is_symlink(dir / "link.bin"));
  CHECK(file_bytes(dir / "real.bin") == data);
}

TEST_CASE("AMistypedCommandIsNamedWithASuggestionAndVersionIsPrinted") {
  auto typo = kilnctl({"statsu"});
  CHECK(typo.code == 1);
  CHECK(typo.err.find("unknown command 'statsu'") != std::string::npos);
  CHECK(typo.err.find("did you mean 'stats'?") != std::string::npos);
  CHECK(kilnctl({"evcit"}).err.find("did you mean 'evict'?") != std::string::npos);
  CHECK(typo.err.find("A subcommand is required") == std::string::npos);
  auto far = kilnctl({"--socket", "/nonexistent.sock", "frobnicate"});
  CHECK(far.code == 1);
  CHECK(far.err.find("unknown command 'frobnicate'") != std::string::npos);
  CHECK(far.err.find("did you mean") == std::string::npos);
  auto version = kilnctl({"--version"});
  CHECK(version.code == 0);
  CHECK(version.out.rfind("kilnctl 0.1.0 (protocol 1)", 0) == 0);
}

TEST_CASE("ExportToACompressedArchiveNameIsRefusedRatherThanWritingAFolderByThatName") {
  TempDir dir;
  for (const char* name : {"out.tgz", "out.tar.gz", "out.tar.zst", "out.zip"}) {
    CAPTURE(name);
    auto r = kilnctl({"export", (dir / name).string(), "--socket", (dir / "none.sock").string()});
    CHECK(r.code == 1);
    CHECK(r.err.find("compressed archive") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(dir / name));
  }
}

TEST_CASE("TrustLsWithoutAFleetReportsItAndSucceedsAsFleetStatusDoes") {
  TempDir dir;
  KilndProcess d(dir.path(), "");
  REQUIRE_MESSAGE(d.start(), d.log());
  auto trust = kilnctl(cmd({"trust", "ls"}, {}, d));
  CHECK_MESSAGE(trust.code == 0, trust.err);
  CHECK(trust.out.find("no fleet") != std::string::npos);
  auto as_json = kilnctl(cmd({"trust", "ls", "--json"}, {}, d));
  CHECK(as_json.code == 0);
  CHECK(nlohmann::json::parse(as_json.out)["trusted_keys"].empty());
  CHECK(kilnctl(cmd({"fleet"}, {}, d)).code == 0);
}
