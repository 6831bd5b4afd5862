// Who may do what: roles from SO_PEERCRED against [access], refusals answered and
// logged, and SIGHUP taking a new access list at once.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <fstream>

#include "kiln/protocol/messages.hpp"
#include "support/kilnd_process.hpp"
#include "support/raw_client.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::test;
namespace proto = kiln::protocol;
using proto::MsgType;

namespace {

std::string uid() { return std::to_string(::getuid()); }

proto::ErrorBody error_of(const RawFrame& f) {
  REQUIRE(f.header.type == MsgType::error);
  auto e = proto::decode<proto::ErrorBody>(f.body);
  REQUIRE(e);
  return *e;
}

}  // namespace

TEST_CASE("a peer with no role is refused every operation, with a reason, and it is logged") {
  TempDir dir;
  // trust_owner = false: the test's own uid (kilnd's owner) gets no implicit admin;
  // build_groups = []: its group, the socket's, builds by default.
  KilndProcess d(dir.path(), "[access]\ntrust_owner = false\nread_users = []\nbuild_groups = []\n");
  RawClient c(d.socket());
  auto hello = proto::decode<proto::HelloReply>(c.hello());
  REQUIRE(hello);
  CHECK(hello->roles.empty());
  proto::GetRequest get;
  get.ref.key_digest = *test_key("x").digest();
  auto e = error_of(c.call(MsgType::get, proto::encode(get)));
  CHECK(e.code == Errc::permission_denied);
  CHECK(e.message.find("needs the read role") != std::string::npos);
  CHECK(e.message.find("uid " + uid()) != std::string::npos);
  CHECK(error_of(c.call(MsgType::stats, "{}")).code == Errc::permission_denied);
  CHECK(d.wait_for_log("refused: get", std::chrono::seconds(5)));
  CHECK(c.call(MsgType::status, "{}").header.type == MsgType::error);
}

TEST_CASE("a reader may read but not build, put or administer; a refused put's chunks are skipped") {
  TempDir dir;
  // build_groups = []: the test's own group is the socket's, which builds by default.
  KilndProcess d(dir.path(), "[access]\ntrust_owner = false\nread_users = [\"" + uid() + "\"]\nbuild_groups = []\n");
  RawClient c(d.socket());
  auto hello = proto::decode<proto::HelloReply>(c.hello());
  REQUIRE(hello);
  CHECK(hello->roles == std::vector<std::string>{"read"});
  CHECK(c.call(MsgType::stats, "{}").header.type == MsgType::ok);

  auto put = c.put(test_key("p"), std::string(3 << 20, 'a'), 1 << 20);
  auto e = error_of(put);
  CHECK(e.code == Errc::permission_denied);
  CHECK(e.message.find("needs the put role") != std::string::npos);
  CHECK(e.message.find("put_users") != std::string::npos);
  // The refused put's chunks were skipped; the connection still answers in order.
  CHECK(c.call(MsgType::stats, "{}").header.type == MsgType::ok);

  proto::KeyOpRequest del;
  del.ref.key_digest = *test_key("p").digest();
  CHECK(error_of(c.call(MsgType::del, proto::encode(del))).code == Errc::permission_denied);
  CHECK(error_of(c.call(MsgType::gc, "{}")).code == Errc::permission_denied);
  // A GET that would build on a miss needs build.
  proto::GetRequest get;
  get.ref.key = test_key("p");
  get.on_miss = proto::OnMiss::build;
  auto built = error_of(c.call(MsgType::get, proto::encode(get)));
  CHECK(built.code == Errc::permission_denied);
  CHECK(built.message.find("needs the build role") != std::string::npos);
}

TEST_CASE("group membership grants a role: build_groups builds and cannot put, put_groups puts") {
  TempDir dir;
  const std::string gid = std::to_string(::getgid());
  {
    KilndProcess d(dir.path(), "[access]\ntrust_owner = false\nread_users = []\nbuild_groups = [\"" + gid + "\"]\n");
    RawClient c(d.socket());
    auto hello = proto::decode<proto::HelloReply>(c.hello());
    REQUIRE(hello);
    CHECK(hello->roles == std::vector<std::string>{"read", "build"});
    CHECK(error_of(c.put(test_key("g"), "bytes")).code == Errc::permission_denied);
  }
  TempDir dir2;
  KilndProcess d(dir2.path(), "[access]\ntrust_owner = false\nread_users = []\nput_groups = [\"" + gid + "\"]\n");
  RawClient c(d.socket());
  auto hello = proto::decode<proto::HelloReply>(c.hello());
  REQUIRE(hello);
  CHECK(hello->roles == std::vector<std::string>{"read", "build", "put"});
  CHECK(c.put(test_key("g"), "bytes").header.type == MsgType::ok);
}

TEST_CASE("an old config's write_groups gets build, not put, and kilnd says so") {
  TempDir dir;
  KilndProcess d(dir.path(), "[access]\ntrust_owner = false\nread_users = []\nbuild_groups = []\nwrite_groups = [\"" +
                                 std::to_string(::getgid()) + "\"]\n");
  CHECK(d.wait_for_log("write_users / write_groups name the role that was split into build and put",
                       std::chrono::seconds(10)));
  RawClient c(d.socket());
  auto hello = proto::decode<proto::HelloReply>(c.hello());
  REQUIRE(hello);
  CHECK(hello->roles == std::vector<std::string>{"read", "build"});
  CHECK(error_of(c.put(test_key("w"), "bytes")).code == Errc::permission_denied);
}

TEST_CASE("SIGHUP applies a new access list; a bad file keeps the old one") {
  TempDir dir;
  KilndProcess d(dir.path(), "[access]\ntrust_owner = false\nread_users = [\"" + uid() + "\"]\nbuild_groups = []\n");
  {
    RawClient c(d.socket());
    c.hello();
    CHECK(c.call(MsgType::stats, "{}").header.type == MsgType::ok);
  }
  std::ofstream(dir / "kilnd.toml") << "[access]\ntrust_owner = false\nread_users = []\nbuild_groups = []\n";
  d.signal(SIGHUP);
  REQUIRE(d.wait_for_log("reloaded configuration", std::chrono::seconds(30)));
  {
    RawClient c(d.socket());
    c.hello();
    CHECK(error_of(c.call(MsgType::stats, "{}")).code == Errc::permission_denied);
  }
  std::ofstream(dir / "kilnd.toml") << "[access]\nno_such_option = 1\n";
  d.signal(SIGHUP);
  REQUIRE(d.wait_for_log("reload failed", std::chrono::seconds(30)));
  CHECK(d.log().find("access.no_such_option: unknown option") != std::string::npos);
  RawClient c(d.socket());
  c.hello();
  CHECK(error_of(c.call(MsgType::stats, "{}")).code == Errc::permission_denied);  // old config kept
}

TEST_CASE("the socket gets the configured file mode") {
  TempDir dir;
  KilndProcess d(dir.path(), "[access]\nsocket_mode = \"0600\"\n");
  auto perms = std::filesystem::status(d.socket()).permissions();
  CHECK(perms == (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));
}
