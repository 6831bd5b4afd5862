// Whole kilnd nodes sharing artifacts through a registry with token auth (Debian's
// docker-registry, `auth: token`, the issuer in token_registry_fixture.hpp): one node
// builds and pushes, another pulls; and the registry's tokens running out between and
// during their work, which the nodes renew without a failed push or pull.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "kiln/protocol/messages.hpp"
#include "kilnd_builds.hpp"
#include "registry_fixture.hpp"
#include "support/kilnd_process.hpp"
#include "support/raw_calls.hpp"
#include "support/raw_client.hpp"
#include "temp_dir.hpp"
#include "test_node.hpp"
#include "token_registry_fixture.hpp"

using namespace kiln;
using namespace std::chrono_literals;
using json = nlohmann::json;
namespace fs = std::filesystem;
using kiln::test::token_registry::TokenRegistry;

namespace {

using Conn = test::RawConn;

json status(Conn& c) { return json::parse(test::call_ok(*c, protocol::MsgType::status, "{}")); }

json fleet_of(Conn& c) { return status(c)["fleet"]; }

std::string register_source(Conn& c) { return test::put_source_text(*c, "src.json", json{{"behavior", "ok"}}.dump()); }

// The builds this node ran or runs (BUILD_STATUS).
std::size_t builds(Conn& c) {
  return json::parse(test::call_ok(*c, protocol::MsgType::build_status, "{}"))["builds"].size();
}

void build(Conn& c, const Key& key) { test::build_and_wait(*c, key); }
std::string get(Conn& c, const Key& key) { return test::get_bytes(*c, key); }

std::string origin(Conn& c, const Key& key) {
  return json::parse(test::call_ok(*c, protocol::MsgType::stat, "{\"key\":" + key.to_json() + "}"))["info"]["origin"];
}

bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds limit = 30s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(100ms);
  }
  return pred();
}

// A builds and pushes `region` of the source `hash`; B (pull only) is then served the same
// bytes from the registry without building. Every push and pull succeeds at its first
// attempt: a node that fails once and retries would pass a looser check.
void build_push_pull(Conn& a, Conn& b, const std::string& hash, const std::string& region) {
  CAPTURE(region);
  const std::uint64_t pushes = fleet_of(a)["pushes"].get<std::uint64_t>();
  const Key key = test::source_key(hash, region, {1, 64});
  build(a, key);
  const std::string bytes = get(a, key);
  REQUIRE_FALSE(bytes.empty());
  // The artifact's manifest (and the source's the first time).
  REQUIRE_MESSAGE(wait_until([&] {
                    const json f = fleet_of(a);
                    return f["pending_pushes"] == 0 && f["pushes"].get<std::uint64_t>() > pushes;
                  }),
                  fleet_of(a).dump());
  const json fa = fleet_of(a);
  CHECK_MESSAGE(fa["push_failures"] == 0, fa.dump());
  CHECK_MESSAGE(fa["failing_pushes"] == 0, fa.dump());
  const std::uint64_t hits = fleet_of(b)["registry_hits"].get<std::uint64_t>();
  CHECK(get(b, key) == bytes);
  CHECK(origin(b, key) == "registry");
  const json fb = fleet_of(b);
  CHECK_MESSAGE(fb["registry_hits"].get<std::uint64_t>() == hits + 1, fb.dump());
  CHECK(builds(b) == 0);
}

struct Nodes {
  Nodes(const fs::path& dir, const TokenRegistry& reg)
      : trust((fs::create_directories(dir), test::write_signing_key(dir, "builder-a"))),
        // A with the user of basic_auth_file (token GET), B with a refresh token (OAuth2 POST).
        a(dir / "a", test::builds_toml({.failure_ttl_s = 0}) +
                         reg.fleet_toml("basic_auth_file", true, true, dir / "builder-a.pem", {trust})),
        b(dir / "b", test::builds_toml({.failure_ttl_s = 0}) + reg.fleet_toml("identity_token_file", false, true, {}, {trust})),
        ca(test::connect_raw(a.socket())),
        cb(test::connect_raw(b.socket())) {}
  std::string trust;
  test::KilndProcess a, b;
  Conn ca, cb;
};

}  // namespace

TEST_CASE("AKilndPushesToATokenRegistryAndAPeerPullsWithTokensOfItsOwn") {
  test::TempDir dir;
  TokenRegistry reg(dir / "registry");
  Nodes n(dir.path(), reg);
  const std::string hash = register_source(n.ca);
  build_push_pull(n.ca, n.cb, hash, "Block");
  CHECK(fleet_of(n.ca)["reachable"] == true);
  const int issued = reg.issuer().issued();
  CHECK(issued >= 2);  // A's and B's own: tokens are per node
  // A second artifact costs no token at all: both nodes' tokens are cached.
  build_push_pull(n.ca, n.cb, hash, "Other");
  CHECK(reg.issuer().issued() == issued);
}

// Two ways a token runs out: the issuer says so (expires_in: the node renews before it
// asks), and the registry refuses one the node still holds (revoked, or clocks apart: the
// 401 invalid_token, answered by fetching a new token and sending the request again).
TEST_CASE("ExpiredRegistryTokensAreRenewedAndTheNodesGoOn") {
  test::TempDir dir;
  TokenRegistry reg(dir / "registry");
  struct Life {
    std::string what;
    int registry_s, expires_in;
  };
  for (const Life& life : {Life{"told_by_expires_in", 3, 3}, Life{"refused_by_the_registry_first", 3, 300}}) {
    CAPTURE(life.what);
    reg.issuer().set_lifetimes(life.registry_s, life.expires_in);
    // Fresh nodes, so that the tokens in their caches are of this lifetime.
    Nodes n(dir / life.what, reg);
    const std::string hash = register_source(n.ca);
    build_push_pull(n.ca, n.cb, hash, "Warm");
    std::this_thread::sleep_for(std::chrono::seconds(life.registry_s + 2));  // past the tokens' end
    const int issued = reg.issuer().issued();
    build_push_pull(n.ca, n.cb, hash, "Expired");
    CHECK(reg.issuer().issued() >= issued + 2);  // A and B renewed theirs
    CHECK(n.a.log().find("permission_denied") == std::string::npos);
    CHECK(n.b.log().find("permission_denied") == std::string::npos);
  }
  // The registry did refuse the tokens the nodes still held, and they went on.
  CHECK(test::slurp(reg.dir() / "registry.log").find("invalid token") != std::string::npos);
}
