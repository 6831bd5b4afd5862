// etcd's JSON gateway through EtcdClient: against Debian's real etcd on loopback (leases,
// compare-and-set claims, the gateway's omitted fields), and against a fake gateway whose
// replies are malformed (clear errors, never a crash or a wrong answer). The records kiln
// keeps in etcd (claim_record.hpp): round trips and refusals.

#include <thread>

#include <doctest/doctest.h>

#include "etcd_fixture.hpp"
#include "kiln/fleet/claim_record.hpp"
#include "kiln/fleet/etcd_client.hpp"
#include "loopback_http_server.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::fleet;
using namespace std::chrono_literals;

namespace {

std::unique_ptr<EtcdClient> client(const std::vector<std::string>& endpoints) {
  auto c = EtcdClient::create({endpoints, 10s});  // etcd fsyncs each write: a loaded CI disk is slow
  REQUIRE_MESSAGE(c.has_value(), (c ? "" : c.error().to_string()));
  return std::move(*c);
}

// An etcd gateway that answers every request with `reply` (a whole HTTP response) and closes.
test::LoopbackHttpServer::Answer reply_with(std::string reply) {
  return [reply = std::move(reply)](int fd, const std::string&) {
    test::say(fd, reply);
    return false;
  };
}

std::string http_reply(const std::string& body, const std::string& status = "200 OK") {
  return "HTTP/1.1 " + status + "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

}  // namespace

TEST_CASE("AClaimIsWonOnceAndLostByTheSecondComerWhichSeesTheHolder") {
  test::TempDir dir;
  test::Etcd etcd(dir / "etcd");
  auto c = client({etcd.url()});
  auto l1 = c->grant(5s), l2 = c->grant(5s);
  REQUIRE(l1.has_value());
  REQUIRE(l2.has_value());
  CHECK(*l1 != *l2);
  const std::string key = "kiln/claim/abc";
  auto claim = [&](std::int64_t lease, const std::string& who) {
    return c->txn({{key, EtcdCompare::Target::create_revision, 0}}, {{EtcdOp::Kind::put, key, who, lease}},
                  {{EtcdOp::Kind::range, key, {}, 0}});
  };
  auto first = claim(*l1, "a");
  REQUIRE(first.has_value());
  CHECK(first->succeeded);
  CHECK(first->ranges.empty());
  auto second = claim(*l2, "b");  // the gateway omits "succeeded": false
  REQUIRE(second.has_value());
  CHECK_FALSE(second->succeeded);
  REQUIRE(second->ranges.size() == 1);
  REQUIRE(second->ranges[0].size() == 1);
  CHECK(second->ranges[0][0].value == "a");
  CHECK(second->ranges[0][0].lease == *l1);
  CHECK(second->ranges[0][0].create_revision > 0);

  // Only the holder's lease may delete it.
  auto wrong = c->txn({{key, EtcdCompare::Target::lease, *l2}}, {{EtcdOp::Kind::erase, key, {}, 0}}, {});
  REQUIRE(wrong.has_value());
  CHECK_FALSE(wrong->succeeded);
  CHECK(c->range_prefix("kiln/claim/")->size() == 1);

  // The lease revoked: its claim goes, and a keepalive says the lease is gone (no TTL).
  auto ka = c->keep_alive(*l1);
  REQUIRE(ka.has_value());
  CHECK(*ka > 0);
  REQUIRE(c->revoke(*l1).has_value());
  CHECK(c->range_prefix("kiln/claim/")->empty());
  auto gone = c->keep_alive(*l1);
  REQUIRE(gone.has_value());
  CHECK(*gone == 0);
  CHECK(c->revoke(*l1).has_value());  // revoking twice is fine
  // A put under a lease etcd does not know is not_found (the node grants a new one).
  auto stale = claim(*l1, "a");
  REQUIRE_FALSE(stale.has_value());
  CHECK(stale.error().code == Errc::not_found);
}

TEST_CASE("TakeOverComparesTheClaimsRevisionSoTwoWaitersCannotBothWin") {
  test::TempDir dir;
  test::Etcd etcd(dir / "etcd");
  auto c = client({etcd.url()});
  const std::string key = "kiln/claim/def";
  REQUIRE(c->txn({}, {{EtcdOp::Kind::put, key, "old", 0}}, {}).has_value());
  auto seen = c->range_prefix(key);
  REQUIRE(seen.has_value());
  const auto rev = seen->front().mod_revision;
  auto take = [&](const std::string& who) {
    return c->txn({{key, EtcdCompare::Target::mod_revision, rev}}, {{EtcdOp::Kind::put, key, who, 0}}, {});
  };
  auto w1 = take("b"), w2 = take("c");
  REQUIRE(w1.has_value());
  REQUIRE(w2.has_value());
  CHECK(w1->succeeded);
  CHECK_FALSE(w2->succeeded);
  CHECK(c->range_prefix(key)->front().value == "b");
}

TEST_CASE("ADeadEndpointIsSkippedForTheNextMember") {
  test::TempDir dir;
  test::Etcd etcd(dir / "etcd");
  auto c = client({"http://127.0.0.1:" + std::to_string(test::free_port()), etcd.url()});
  CHECK(c->grant(5s).has_value());
  CHECK(c->endpoint() == etcd.url());
  auto none = client({"http://127.0.0.1:" + std::to_string(test::free_port())});
  auto g = none->grant(5s);
  REQUIRE_FALSE(g.has_value());
  CHECK(g.error().code == Errc::unavailable);
}

TEST_CASE("MalformedGatewayRepliesAreClearProtocolErrors") {
  struct Case {
    const char* what;
    std::string reply;
    Errc code;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"not JSON", http_reply("<html>proxy error</html>"), Errc::protocol_error, "not JSON"},
      {"not an object", http_reply("[1,2]"), Errc::protocol_error, "not a JSON object"},
      {"succeeded not a boolean", http_reply(R"({"succeeded":"yes"})"), Errc::protocol_error, "succeeded"},
      {"kvs not an array", http_reply(R"({"succeeded":false,"responses":[{"response_range":{"kvs":{}}}]})"),
       Errc::protocol_error, "kvs"},
      {"key not base64", http_reply(R"({"responses":[{"response_range":{"kvs":[{"key":"!!!"}]}}]})"),
       Errc::protocol_error, "base64"},
      {"revision not a number", http_reply(R"({"responses":[{"response_range":{"kvs":[{"key":"YQ==","mod_revision":"x"}]}}]})"),
       Errc::protocol_error, "mod_revision"},
      {"range missing", http_reply(R"({"header":{}})"), Errc::protocol_error, "range responses"},
      {"etcd refuses", http_reply(R"({"error":"bad","message":"etcdserver: too many operations","code":3})", "400 Bad Request"),
       Errc::invalid_argument, "too many operations"},
      {"no leader", http_reply(R"({"error":"x","message":"etcdserver: no leader","code":14})", "503 Service Unavailable"),
       Errc::unavailable, "no leader"},
  };
  for (const auto& cs : cases) {
    CAPTURE(cs.what);
    test::LoopbackHttpServer g(reply_with(cs.reply));
    auto c = client({g.url()});
    auto r = c->txn({{"k", EtcdCompare::Target::create_revision, 0}}, {{EtcdOp::Kind::put, "k", "v", 0}},
                    {{EtcdOp::Kind::range, "k", {}, 0}});
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == cs.code);
    CHECK_MESSAGE(r.error().message.find(cs.says) != std::string::npos, r.error().message);
    CHECK(r.error().message.find(g.url()) != std::string::npos);  // names the endpoint
  }
  test::LoopbackHttpServer no_id(reply_with(http_reply(R"({"TTL":"5"})")));
  auto g = client({no_id.url()})->grant(5s);
  REQUIRE_FALSE(g.has_value());
  CHECK(g.error().code == Errc::protocol_error);
  test::LoopbackHttpServer no_result(reply_with(http_reply(R"({"hello":1})")));
  auto k = client({no_result.url()})->keep_alive(7);
  REQUIRE_FALSE(k.has_value());
  CHECK(k.error().code == Errc::protocol_error);
}

TEST_CASE("EndpointsMustBePlainHttpHostAndPort") {
  for (const char* bad : {"127.0.0.1:2379", "https://127.0.0.1:2379", "http://127.0.0.1:2379/v3", "http://u:p@h:1", "http://host"}) {
    CAPTURE(bad);
    auto c = EtcdClient::create({{bad}, 1000ms});
    REQUIRE_FALSE(c.has_value());
    CHECK(c.error().code == Errc::invalid_argument);
  }
  CHECK_FALSE(EtcdClient::create({{}, 1000ms}).has_value());
}

TEST_CASE("ClaimAndFailureRecordsRoundTripAndUnreadableOnesAreRefusedWithTheReason") {
  ClaimRecord c{"node-a", 100, 1900, 42};
  auto back = parse_claim(encode(c));
  REQUIRE(back.has_value());
  CHECK(back->node == "node-a");
  CHECK(back->started == 100);
  CHECK(back->deadline == 1900);
  CHECK(back->expected_s == 42);
  FailureRecord f{"node-b", 7, "the build worker failed: boom"};
  auto fb = parse_failure(encode(f));
  REQUIRE(fb.has_value());
  CHECK(fb->error == f.error);
  CHECK(fb->node == "node-b");

  for (const char* bad : {"", "nope", "[]", R"({"node":"a"})", R"({"v":2,"node":"a","started":1,"deadline":2,"expected_s":1})",
                          R"({"v":1,"node":3,"started":1,"deadline":2,"expected_s":1})",
                          R"({"v":1,"node":"a","started":"1","deadline":2,"expected_s":1})"}) {
    CAPTURE(bad);
    auto r = parse_claim(bad);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == Errc::protocol_error);
    CHECK(r.error().message.find("malformed claim") != std::string::npos);
  }
  CHECK_FALSE(parse_failure(R"({"v":1,"node":"a","at":1})").has_value());
  CHECK(claim_key("kiln", "ab") == "kiln/claim/ab");
  CHECK(failure_key("kiln", "ab") == "kiln/failed/ab");
  CHECK(etcd_prefix_end("kiln/claim/") == "kiln/claim0");
}
