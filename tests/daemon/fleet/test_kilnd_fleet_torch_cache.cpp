// torch.compile's cache entries across the fleet: kilnd nodes with [torch_cache] listeners
// sharing Debian's docker-registry on loopback. What torch writes on one node is signed,
// pushed and served to a GET on another; entries need a trusted signature whatever
// require_signatures says; rewritten entries (PGO) take the last writer, immutable ones
// (FX graph) the first; a registry that hangs costs one GET its reply time, not every GET.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "kiln/protocol/messages.hpp"
#include "kiln/torch_cache/torch_key.hpp"
#include "registry_fixture.hpp"
#include "resp_client.hpp"
#include "support/http_get.hpp"
#include "support/kilnd_process.hpp"
#include "support/raw_calls.hpp"
#include "temp_dir.hpp"
#include "torch_cache_config.hpp"
#include "wait_until.hpp"

using namespace kiln;
using namespace std::chrono_literals;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kFx = "pt2:fx-graph-v1::fgraph0123456789:c1";
const std::string kPgo = test::kPgo;

// A kilnd node: builds off, the metrics endpoint on, a torch cache socket, and `fleet` (a
// [fleet] table, or more [torch_cache] keys and then one) after it.
struct Node {
  test::TorchCacheConfig torch;
  std::unique_ptr<test::KilndProcess> kilnd;
  test::RawConn kiln;

  Node(const fs::path& dir, const std::string& fleet, int reply_timeout_ms = 60'000) {
    torch.durability = "deferred";
    torch.reply_timeout_ms = reply_timeout_ms;
    kilnd = std::make_unique<test::KilndProcess>(
        dir, torch.toml(fleet, "metrics_listen = \"127.0.0.1:0\"\n[builds]\nenabled = false\n"));
    kiln = test::connect_raw(kilnd->socket());
  }
  json status() { return json::parse(test::call_ok(*kiln, protocol::MsgType::status, "{}")); }
  json stat(const std::string& torch_key) {
    auto k = torch_cache::map_torch_key(torch_key);
    REQUIRE(k.has_value());
    return json::parse(test::call_ok(*kiln, protocol::MsgType::stat, "{\"key\":" + k->kiln_key().to_json() + "}"));
  }
  // Prometheus text of this node's /metrics.
  std::string metrics() { return test::http_get(status()["metrics"].get<std::string>()); }
  // The value of one metric line (name with its labels), or -1 when absent.
  long metric(const std::string& series) {
    const std::string page = metrics();
    const auto at = page.find("\n" + series + " ");
    if (at == std::string::npos) return -1;
    return std::stol(page.substr(at + series.size() + 2));
  }
  std::uint64_t pending() { return status()["fleet"]["pending_pushes"].get<std::uint64_t>(); }
  std::uint64_t pushes() { return status()["fleet"]["pushes"].get<std::uint64_t>(); }
};

// SET over a fresh connection, as redis-py 8 would (HELLO 3 first); true on +OK.
bool set(Node& n, const std::string& key, const std::string& value) {
  test::RespClient c(n.torch.torch_sock);
  auto hello = c.call({"HELLO", "3"});
  if (!hello || hello->type != '%') return false;
  auto r = c.call({"SET", key, value});
  return r && r->type == '+' && r->text == "OK";
}

// GET over a fresh RESP3 connection: the value, or nullopt for the `_` nil. A closed
// connection or an error reply fails the test (kilnd must never answer a GET so).
std::optional<std::string> get(Node& n, const std::string& key) {
  test::RespClient c(n.torch.torch_sock);
  auto hello = c.call({"HELLO", "3"});
  REQUIRE(hello);
  auto r = c.call({"GET", key});
  REQUIRE_MESSAGE(r, "no reply to GET " << key);
  REQUIRE(r->type != '-');
  if (r->type == '_') return std::nullopt;
  REQUIRE(r->type == '$');
  return r->text;
}

// Waits until the node has pushed everything it queued, at least `count` pushes in all.
void wait_pushed(Node& n, std::uint64_t count) {
  REQUIRE_MESSAGE(test::wait_until([&] { return n.pending() == 0 && n.pushes() >= count; }),
                  "pushes: " << n.status()["fleet"].dump());
}

}  // namespace

TEST_CASE("ATorchCacheEntryWrittenOnOneNodeIsSignedPushedAndServedToAGetOnAnother") {
  test::TempDir dir;
  test::Registry reg(dir / "registry");
  const std::string trust_a = test::write_signing_key(dir.path(), "builder-a");
  Node a(dir / "a", reg.fleet_toml({true, true, dir / "builder-a.pem", {trust_a}}));
  Node b(dir / "b", reg.fleet_toml({false, true, {}, {trust_a}}));

  const std::string value = "{\"data\": \"" + std::string(200'000, 'x') + "\"}";
  REQUIRE(set(a, kFx, value));
  wait_pushed(a, 1);
  CHECK(a.stat(kFx)["info"]["origin"] == "torch_cache");

  CHECK_FALSE(b.stat(kFx)["found"].get<bool>());
  CHECK(get(b, kFx) == value);  // a miss on b, pulled within the GET
  json sb = b.stat(kFx);
  REQUIRE(sb["found"].get<bool>());
  CHECK(sb["info"]["origin"] == "registry");
  CHECK(sb["info"]["signer"] == "builder-a");
  CHECK(b.metric("kiln_torch_cache_fleet_lookups_total{outcome=\"hit\"}") == 1);
  // Now it is b's own: served without the registry, and not pushed back by b.
  CHECK(get(b, kFx) == value);
  CHECK(b.metric("kiln_torch_cache_fleet_lookups_total{outcome=\"hit\"}") == 1);
  CHECK(b.pending() == 0);

  // A key nobody wrote is a miss on both, asked of the registry once per GET.
  CHECK_FALSE(get(b, "pt2:fx-graph-v1::nobody:c1").has_value());
  CHECK(b.metric("kiln_torch_cache_fleet_lookups_total{outcome=\"miss\"}") == 1);
}

TEST_CASE("WithTorchCacheFleetOffEntriesStayOnTheNodeWhileTheFleetIsConfigured") {
  test::TempDir dir;
  test::Registry reg(dir / "registry");
  const std::string trust_a = test::write_signing_key(dir.path(), "builder-a");
  Node a(dir / "a", "fleet = false\n" + reg.fleet_toml({true, true, dir / "builder-a.pem", {trust_a}}));
  Node b(dir / "b", reg.fleet_toml({false, true, {}, {trust_a}}));

  CHECK(a.status()["torch_cache"]["fleet"] == false);
  CHECK(b.status()["torch_cache"]["fleet"] == true);
  REQUIRE(set(a, kFx, "{\"data\": \"stays\"}"));
  // The outbox row would be written in the transaction that stores the entry.
  REQUIRE(test::wait_until([&] { return a.stat(kFx)["found"].get<bool>(); }));
  CHECK(a.pending() == 0);
  CHECK(a.pushes() == 0);
  CHECK_FALSE(get(b, kFx).has_value());
  CHECK(b.metric("kiln_torch_cache_fleet_lookups_total{outcome=\"miss\"}") == 1);
  // Nor does a look in the registry on a miss.
  CHECK_FALSE(get(a, "pt2:fx-graph-v1::elsewhere:c1").has_value());
  CHECK(a.metric("kiln_torch_cache_fleet_lookups_total{outcome=\"miss\"}") == 0);
}

TEST_CASE("ATorchCacheEntryFromTheRegistryNeedsATrustedSignatureEvenWithRequireSignaturesOff") {
  test::TempDir dir;
  test::Registry reg(dir / "registry");
  const std::string trust_s = test::write_signing_key(dir.path(), "stranger");
  const std::string trust_b = test::write_signing_key(dir.path(), "builder-b");
  Node s(dir / "s", reg.fleet_toml({true, true, dir / "stranger.pem", {trust_s}}));
  // b trusts only its own key, and accepts unsigned artifacts: not torch cache entries.
  Node b(dir / "b", reg.fleet_toml({false, true, {}, {trust_b}}) + "require_signatures = false\n");

  REQUIRE(set(s, kFx, "{\"data\": \"planted\"}"));
  wait_pushed(s, 1);
  CHECK_FALSE(get(b, kFx).has_value());
  CHECK_FALSE(b.stat(kFx)["found"].get<bool>());
  CHECK(b.status()["fleet"]["refusals"]["unknown_signer"].get<int>() >= 1);
  CHECK(b.metric("kiln_torch_cache_fleet_lookups_total{outcome=\"miss\"}") == 1);
  CHECK(b.kilnd->log().find("stranger") != std::string::npos);
}

TEST_CASE("AcrossTheFleetARewrittenEntryTakesTheLastWriterAndAnImmutableOneTheFirst") {
  test::TempDir dir;
  test::Registry reg(dir / "registry");
  const std::string trust_a = test::write_signing_key(dir.path(), "builder-a");
  const std::string trust_b = test::write_signing_key(dir.path(), "builder-b");
  Node a(dir / "a", reg.fleet_toml({true, true, dir / "builder-a.pem", {trust_a, trust_b}}));
  Node b(dir / "b", reg.fleet_toml({true, false, dir / "builder-b.pem", {trust_a, trust_b}}));

  REQUIRE(set(a, kFx, "{\"data\": \"graph from a\"}"));
  REQUIRE(set(a, kPgo, "{\"data\": \"profile 1\"}"));
  wait_pushed(a, 2);
  // b (pull off) wrote both on its own: torch would never write other bytes under an FX
  // graph key, which is what shows that the registry keeps the first.
  REQUIRE(set(b, kFx, "{\"data\": \"graph from b\"}"));
  REQUIRE(set(b, kPgo, "{\"data\": \"profile 2\"}"));
  wait_pushed(b, 1);  // the PGO profile replaced; the FX graph was there already
  CHECK(b.pushes() == 1);
  CHECK(b.kilnd->log().find("the last writer wins") != std::string::npos);

  Node c(dir / "c", reg.fleet_toml({false, true, {}, {trust_a, trust_b}}));
  CHECK(get(c, kFx) == "{\"data\": \"graph from a\"}");
  CHECK(get(c, kPgo) == "{\"data\": \"profile 2\"}");
  CHECK(c.stat(kPgo)["info"]["signer"] == "builder-b");

  // A later rewrite on a goes up again: the newest value wins, whoever wrote the last.
  REQUIRE(set(a, kPgo, "{\"data\": \"profile 3\"}"));
  wait_pushed(a, 3);
  Node d(dir / "d", reg.fleet_toml({false, true, {}, {trust_a, trust_b}}));
  CHECK(get(d, kPgo) == "{\"data\": \"profile 3\"}");
}

TEST_CASE("ARegistryThatNeverAnswersCostsOneGetItsReplyTimeoutThenGetsAnswerFromTheNode") {
  test::TempDir dir;
  // A TCP listener that accepts (the kernel completes the handshake) and never says a word:
  // a registry hung behind a load balancer.
  const int hole = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(hole >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(hole, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(hole, 64) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(hole, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const int port = ntohs(addr.sin_port);
  // io_timeout 3 s: kilnd's stop waits for the hung pull to give up.
  const std::string trust_a = test::write_signing_key(dir.path(), "builder-a");
  const std::string fleet = "[fleet]\nregistry = \"https://127.0.0.1:" + std::to_string(port) +
                            "\"\nrepository = \"kiln/test\"\npush = false\npull = true\nconnect_timeout_s = 3\n"
                            "io_timeout_s = 3\ntrusted_keys = [\"" + trust_a + "\"]\n";
  Node n(dir / "n", fleet, 1000);

  REQUIRE(set(n, kPgo, "{\"data\": \"local\"}"));
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_FALSE(get(n, kFx).has_value());  // waits out its reply time on the registry
  const auto first = std::chrono::steady_clock::now() - t0;
  CHECK(first >= 900ms);
  CHECK(first < 5s);  // redis-py 8's limit, which would fail the user's compile
  const auto t1 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) CHECK_FALSE(get(n, "pt2:fx-graph-v1::other" + std::to_string(i) + ":c1").has_value());
  CHECK(get(n, kPgo) == "{\"data\": \"local\"}");  // hits on the node go on
  // 20 misses answered from the node: far less than 20 reply times.
  CHECK(std::chrono::steady_clock::now() - t1 < 10s);
  CHECK(n.metric("kiln_torch_cache_fleet_lookups_total{outcome=\"late\"}") == 1);
  CHECK(n.metric("kiln_torch_cache_fleet_lookups_total{outcome=\"skipped\"}") == 20);
  CHECK(n.kilnd->log().find("did not answer within torch_cache.reply_timeout_ms") != std::string::npos);
  ::close(hole);
}
