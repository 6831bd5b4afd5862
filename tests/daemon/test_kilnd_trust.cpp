// Storing bytes is not running code in other users' processes (SECURITY.md): what the
// socket's group gets by default, that a build-role user cannot put bytes another user
// loads, and that torch.compile cache entries are trusted per writer. Each case runs real
// clients (kilnctl, Debian's redis-cli) as throwaway users through setpriv, against a real
// kilnd run by the test's own user (root in CI).
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "kiln/key.hpp"
#include "support/kilnd_process.hpp"
#include "support/raw_client.hpp"
#include "temp_dir.hpp"
#include "torch_cache/torch_cache_config.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

// Throwaway identities: nobody/nogroup (65534, a member of the socket's group below) and a
// uid with no passwd entry and a group of its own (65533), which the socket's group lacks.
constexpr int kInGroup = 65534;
constexpr int kOther = 65533;

struct Ran {
  int rc = -1;
  std::string out;
};

// `cmd` run by sh as uid `uid` with gid `uid` and no other group, stdout and stderr together.
Ran as_user(int uid, const std::string& cmd) {
  const std::string id = std::to_string(uid);
  const std::string full = "setpriv --reuid=" + id + " --regid=" + id + " --clear-groups -- sh -c '" + cmd + "' 2>&1";
  FILE* p = ::popen(full.c_str(), "r");
  REQUIRE(p);
  Ran r;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) r.out.append(buf, n);
  int st = ::pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  return r;
}

// The folders above a socket must let the throwaway users reach it (short_temp_dir is 0700).
void open_to_all(const std::filesystem::path& socket) { ::chmod(socket.parent_path().c_str(), 0755); }

std::string kilnctl(const KilndProcess& d) { return std::string(KILN_KILNCTL) + " --socket " + d.socket().string(); }

std::vector<std::string> roles_of(const KilndProcess& d, int uid) {
  auto r = as_user(uid, kilnctl(d) + " --json status");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  return nlohmann::json::parse(r.out).at("roles").get<std::vector<std::string>>();
}

// A key file and an artifact file every user can read.
std::string world_readable(const TempDir& dir, const std::string& name, const std::string& text) {
  auto path = std::filesystem::path(dir.path()) / name;
  std::ofstream(path) << text;
  ::chmod(path.c_str(), 0644);
  ::chmod(dir.path().c_str(), 0755);
  return path.string();
}

// The socket files get nogroup (kInGroup's group) and mode 0666: everyone can connect, and
// [access] alone decides.
const std::string kShared = "[access]\nsocket_mode = \"0666\"\nsocket_group = \"nogroup\"\n";

std::string redis(const std::filesystem::path& sock, int uid, const std::string& args) {
  auto r = as_user(uid, "redis-cli -s " + sock.string() + " " + args);
  return r.out;
}

}  // namespace

TEST_CASE("the default config gives the socket's group read and build, and everyone else read") {
  TempDir dir;
  KilndProcess d(dir.path(), kShared);
  open_to_all(d.socket());
  CHECK(roles_of(d, kInGroup) == std::vector<std::string>{"read", "build"});
  CHECK(roles_of(d, kOther) == std::vector<std::string>{"read"});
}

TEST_CASE("a build-role user cannot store bytes under a key another user loads") {
  TempDir dir;
  KilndProcess d(dir.path(), kShared);
  open_to_all(d.socket());
  const Key key = test_key("trust-put");
  const std::string key_file = world_readable(dir, "key.json", key.to_json());
  const std::string evil = world_readable(dir, "evil.so", "not what the key's builder made");
  auto put = as_user(kInGroup, kilnctl(d) + " put --key " + key_file + " " + evil);
  INFO(put.out);
  CHECK(put.rc != 0);
  CHECK(put.out.find("needs the put role") != std::string::npos);
  CHECK(put.out.find("put_users") != std::string::npos);
  // Nothing was stored: another user's GET misses.
  CHECK(as_user(kOther, kilnctl(d) + " get --key " + key_file + " -o /dev/null").rc == 2);
  // A node that cannot verify a source stores it as sent: that is put's too.
  const std::string src = world_readable(dir, "src.pt2", "an export");
  auto reg = as_user(kInGroup, kilnctl(d) + " source add " + src + " --model-hash " + key.model_hash);
  INFO(reg.out);
  CHECK(reg.rc != 0);
  CHECK(reg.out.find("needs the put role") != std::string::npos);
  // A trusted publisher (kilnd's own user, admin) may put, and the others load it.
  REQUIRE(std::system((kilnctl(d) + " put --key " + key_file + " " + evil + " >/dev/null").c_str()) == 0);
  CHECK(as_user(kOther, kilnctl(d) + " get --key " + key_file + " -o /dev/null").rc == 0);
}

TEST_CASE("put_users makes a publisher: its put is stored") {
  TempDir dir;
  KilndProcess d(dir.path(), kShared + "put_users = [\"" + std::to_string(kInGroup) + "\"]\n");
  open_to_all(d.socket());
  CHECK(roles_of(d, kInGroup) == std::vector<std::string>{"read", "build", "put"});
  const Key key = test_key("trust-publisher");
  const std::string key_file = world_readable(dir, "key.json", key.to_json());
  const std::string bytes = world_readable(dir, "a.so", "published");
  auto put = as_user(kInGroup, kilnctl(d) + " put --key " + key_file + " " + bytes);
  INFO(put.out);
  CHECK(put.rc == 0);
}

TEST_CASE("a torch.compile cache entry one user sets is a miss for another unless its writer is trusted") {
  TempDir dir;
  TorchCacheConfig t;
  KilndProcess d(dir.path(), t.toml("", "") + kShared);
  open_to_all(t.torch_sock);
  const std::string k = "pt2:fx-graph-v1::trust::1";
  // Both users hold build (the socket's group for one, by the config below for the other).
  CHECK(redis(t.torch_sock, kInGroup, "SET " + k + " mine") == "OK\n");
  CHECK(redis(t.torch_sock, kInGroup, "GET " + k) == "mine\n");          // the writer's own
  CHECK(redis(t.torch_sock, kOther, "GET " + k) == "\n");                 // another user: a miss
  CHECK(redis(t.torch_sock, 0, "GET " + k) == "\n");                      // root too
  // Without build (kOther is not in the socket's group) a SET is refused: the connection closes.
  CHECK(redis(t.torch_sock, kOther, "SET " + k + " theirs").find("OK") == std::string::npos);
  CHECK(redis(t.torch_sock, kInGroup, "GET " + k) == "mine\n");
  // A trusted writer (kilnd's own user: admin, above put) writes the shared entry everyone reads.
  const std::string shared = "pt2:fx-graph-v1::trust::2";
  CHECK(redis(t.torch_sock, 0, "SET " + shared + " trusted") == "OK\n");
  CHECK(redis(t.torch_sock, kOther, "GET " + shared) == "trusted\n");
  CHECK(redis(t.torch_sock, kInGroup, "GET " + shared) == "trusted\n");
}

TEST_CASE("a writer in put_users is trusted: its torch.compile cache entries are everyone's") {
  TempDir dir;
  TorchCacheConfig t;
  KilndProcess d(dir.path(), t.toml("", "") + kShared + "put_users = [\"" + std::to_string(kInGroup) + "\"]\n" +
                                 "build_users = [\"" + std::to_string(kOther) + "\"]\n");
  open_to_all(t.torch_sock);
  const std::string k = "pt2:fx-graph-v1::trust::3";
  CHECK(redis(t.torch_sock, kInGroup, "SET " + k + " published") == "OK\n");
  CHECK(redis(t.torch_sock, kOther, "GET " + k) == "published\n");
  // kOther (build) writes its own entry; it reads its own first, and the publisher does not see it.
  const std::string own = "pt2:autotune::trust::4";
  CHECK(redis(t.torch_sock, kInGroup, "SET " + own + " shared-v1") == "OK\n");
  CHECK(redis(t.torch_sock, kOther, "SET " + own + " private-v2") == "OK\n");
  CHECK(redis(t.torch_sock, kOther, "GET " + own) == "private-v2\n");
  CHECK(redis(t.torch_sock, kInGroup, "GET " + own) == "shared-v1\n");
}
