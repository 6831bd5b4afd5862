// kilnd's torch.compile cache listener over raw sockets: the Redis protocol as redis-py 8
// meets it (HELLO 3, the `_` nil), pipelining, large values, malformed and oversized input
// (never a crash, never an error reply to GET/SET), roles, and entries that live in the
// store: kiln's LIST, STATS and EVICT see them and a restart keeps them.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <random>

#include "kiln/protocol/messages.hpp"
#include "random_bytes.hpp"
#include "resp_client.hpp"
#include "support/kilnd_process.hpp"
#include "support/raw_client.hpp"
#include "temp_dir.hpp"
#include "torch_cache_config.hpp"

using namespace kiln;
using namespace kiln::test;
namespace proto = kiln::protocol;
using proto::MsgType;

namespace {



// The connection was closed with no reply at all: what kilnd does instead of an error.
void check_closed_silently(RespClient& c) {
  CHECK(c.wait_closed());
  CHECK(c.unread().empty());
}

bool still_serves(const std::filesystem::path& sock) {
  RespClient c(sock);
  auto r = c.call({"PING"});
  return r && r->type == '+' && r->text == "PONG";
}

std::string uid() { return std::to_string(::getuid()); }

}  // namespace

TEST_CASE("HELLO 3 gets a RESP3 map with proto 3; then a missing key is _ and a stored one its bytes") {
  TempDir dir;
  TorchCacheConfig t;
  KilndProcess d(dir.path(), t.toml());
  RespClient c(t.torch_sock);
  auto hello = c.call({"HELLO", "3"});
  REQUIRE(hello);
  CHECK(hello->type == '%');
  REQUIRE(hello->get("proto"));
  CHECK(hello->get("proto")->type == ':');
  CHECK(hello->get("proto")->text == "3");
  auto setinfo = c.call({"CLIENT", "SETINFO", "LIB-NAME", "redis-py"});
  REQUIRE(setinfo);
  CHECK(setinfo->text == "OK");
  auto miss = c.call({"GET", kFx});
  REQUIRE(miss);
  CHECK(miss->type == '_');
  auto set = c.call({"SET", kFx, "{\"data\": \"abc\"}", "EX", "3600"});
  REQUIRE(set);
  CHECK(set->type == '+');
  auto hit = c.call({"GET", kFx});
  REQUIRE(hit);
  CHECK(hit->type == '$');
  CHECK(hit->text == "{\"data\": \"abc\"}");
}

TEST_CASE("without HELLO the protocol is RESP2: a missing key is $-1; HELLO 2 answers a flat array") {
  TempDir dir;
  TorchCacheConfig t;
  KilndProcess d(dir.path(), t.toml());
  RespClient c(t.torch_sock);
  auto miss = c.call({"GET", "nothing"});
  REQUIRE(miss);
  CHECK(miss->type == '$');
  CHECK(miss->null);
  auto hello = c.call({"HELLO", "2"});
  REQUIRE(hello);
  CHECK(hello->type == '*');
  REQUIRE(hello->get("proto"));
  CHECK(hello->get("proto")->text == "2");
}

TEST_CASE("pipelined commands are answered in order, from one write and from bytes split anywhere") {
  TempDir dir;
  TorchCacheConfig t;
  KilndProcess d(dir.path(), t.toml());
  std::string batch = "*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n"
                      "*3\r\n$3\r\nSET\r\n$1\r\na\r\n$2\r\nv1\r\n"
                      "*2\r\n$3\r\nGET\r\n$1\r\na\r\n"
                      "*2\r\n$3\r\nGET\r\n$1\r\nb\r\n"
                      "PING\r\n"
                      "*6\r\n$3\r\nSET\r\n$1\r\na\r\n$2\r\nv2\r\n$2\r\nNX\r\n$2\r\nPX\r\n"  // half a request
                      "$3\r\n100\r\n"
                      "*4\r\n$3\r\nSET\r\n$1\r\nz\r\n$2\r\nv3\r\n$2\r\nXX\r\n";
  for (std::size_t split : {std::size_t(0), std::size_t(1), std::size_t(7), std::size_t(50)}) {
    CAPTURE(split);
    RespClient c(t.torch_sock);
    if (split == 0) {
      REQUIRE(c.send_raw(batch));
    } else {
      for (std::size_t i = 0; i < batch.size(); i += split) {
        REQUIRE(c.send_raw(std::string_view(batch).substr(i, split)));
      }
    }
    auto hello = c.recv();
    REQUIRE(hello);
    CHECK(hello->type == '%');
    auto set = c.recv();
    REQUIRE(set);
    CHECK(set->text == "OK");
    auto get = c.recv();
    REQUIRE(get);
    CHECK(get->text == "v1");
    auto miss = c.recv();
    REQUIRE(miss);
    CHECK(miss->type == '_');
    auto pong = c.recv();
    REQUIRE(pong);
    CHECK(pong->text == "PONG");
    auto nx = c.recv();  // NX on an existing key: nothing stored, RESP3 null
    REQUIRE(nx);
    CHECK(nx->type == '_');
    auto xx = c.recv();  // XX on a missing key: the same
    REQUIRE(xx);
    CHECK(xx->type == '_');
  }
}

TEST_CASE("values of 1.2 MB and 10 MB go in and come back exactly, over partial writes") {
  TempDir dir;
  TorchCacheConfig t;
  KilndProcess d(dir.path(), t.toml());
  RespClient c(t.torch_sock);
  for (std::size_t n : {std::size_t(1'200'000), std::size_t(10'000'000)}) {
    CAPTURE(n);
    std::string v = kiln::test::random_bytes(n, n);
    std::string key = "pt2:fx-graph-v1::large" + std::to_string(n) + ":c1";
    std::string req = "*3\r\n$3\r\nSET\r\n$" + std::to_string(key.size()) + "\r\n" + key + "\r\n$" +
                      std::to_string(n) + "\r\n" + v + "\r\n";
    for (std::size_t i = 0; i < req.size(); i += 999'983) REQUIRE(c.send_raw(std::string_view(req).substr(i, 999'983)));
    auto ok = c.recv();
    REQUIRE(ok);
    CHECK(ok->text == "OK");
    for (int round = 0; round < 2; ++round) {  // cold (from the store), then hot
      auto got = c.call({"GET", key});
      REQUIRE(got);
      CHECK(got->text.size() == n);
      CHECK(got->text == v);
    }
  }
}

TEST_CASE("malformed and oversized input closes that connection only, without an error reply") {
  TempDir dir;
  TorchCacheConfig t;
  KilndProcess d(dir.path(), t.toml());
  const std::vector<std::string> bad = {
      "*2\r\n$3\r\nGET\r\n$17000\r\n" + std::string(17000, 'k') + "\r\n",  // key past 16 KiB
      "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$16777217\r\n",                      // value past max_value_bytes
      "*2000\r\n",                                                         // too many arguments
      "*1\r\n$-5\r\n",
      "*x\r\n",
      "*1\r\n$3\r\nGETX\r\n",                                              // bulk not ended by CRLF
      std::string(70 * 1024, 'A'),                                         // an endless inline line
      "*2\r\n$3\r\nGET\r\n",                                               // then nothing: see below
      "*1\r\n$3\r\nGET\r\n",                                               // GET without a key
      "*4\r\n$3\r\nGET\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n",
      "*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$3\r\nGET\r\n",              // SET ... GET: not supported
      "*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nEX\r\n$2\r\n-1\r\n",
      "*2\r\n$5\r\nHELLO\r\n$1\r\n9\r\n",                                  // a protocol kiln does not speak
  };
  for (std::size_t i = 0; i < bad.size(); ++i) {
    CAPTURE(i);
    RespClient c(t.torch_sock);
    REQUIRE(c.send_raw(bad[i]));
    if (i == 7) {
      c.send_raw("*");  // an incomplete request is simply waited for: no close, no reply
      CHECK(!c.recv(std::chrono::milliseconds(300)));
      CHECK(!c.closed());
      continue;
    }
    check_closed_silently(c);
  }
  // Random bytes: whatever comes back, kilnd survives and still serves.
  std::mt19937 rng(12);
  for (int i = 0; i < 200; ++i) {
    RespClient c(t.torch_sock);
    std::string junk = kiln::test::random_bytes(rng() % 300, static_cast<unsigned>(i));
    if (i % 2) junk = "*3\r\n$3\r\nSET\r\n" + junk;
    c.send_raw(junk);
  }
  CHECK(still_serves(t.torch_sock));
  CHECK(d.running());
  CHECK(d.wait_for_log("torch cache connection from uid=", std::chrono::seconds(30)));
}

TEST_CASE("unknown commands get an error reply and the connection goes on") {
  TempDir dir;
  TorchCacheConfig t;
  KilndProcess d(dir.path(), t.toml());
  RespClient c(t.torch_sock);
  auto r = c.call({"FLUSHALL"});
  REQUIRE(r);
  CHECK(r->type == '-');
  CHECK(r->text.rfind("ERR unknown command", 0) == 0);
  auto sel = c.call({"SELECT", "0"});
  REQUIRE(sel);
  CHECK(sel->text == "OK");
  auto quit = c.call({"QUIT"});
  REQUIRE(quit);
  CHECK(quit->text == "OK");
  CHECK(c.wait_closed());
}

TEST_CASE("roles: a reader may GET but its SET closes; a peer with no role cannot GET") {
  TempDir dir;
  TorchCacheConfig t;
  KilndProcess d(dir.path(), t.toml() + "[access]\ntrust_owner = false\nread_users = [\"" + uid() + "\"]\nbuild_groups = []\n");
  {
    RespClient c(t.torch_sock);
    auto miss = c.call({"GET", kFx});
    REQUIRE(miss);
    CHECK(miss->null);
    REQUIRE(c.send({"SET", kFx, "v"}));
    check_closed_silently(c);
  }
  CHECK(d.wait_for_log("SET refused: the peer has no build role", std::chrono::seconds(30)));
  TorchCacheConfig t2;
  TempDir dir2;
  KilndProcess none(dir2.path(), t2.toml() + "[access]\ntrust_owner = false\nread_users = []\nbuild_groups = []\n");
  RespClient c(t2.torch_sock);
  auto pong = c.call({"PING"});
  REQUIRE(pong);
  REQUIRE(c.send({"GET", kFx}));
  check_closed_silently(c);
}

TEST_CASE("AUTH when configured: GET before it closes, a wrong password closes, the right one works") {
  TempDir dir;
  TorchCacheConfig t;
  KilndProcess d(dir.path(), t.toml("password = \"hunter2\"\n"));
  {
    RespClient c(t.torch_sock);
    REQUIRE(c.send({"GET", kFx}));
    check_closed_silently(c);
  }
  {
    RespClient c(t.torch_sock);
    REQUIRE(c.send({"AUTH", "nope"}));
    check_closed_silently(c);
  }
  RespClient c(t.torch_sock);
  auto ok = c.call({"AUTH", "hunter2"});
  REQUIRE(ok);
  CHECK(ok->text == "OK");
  auto miss = c.call({"GET", kFx});
  REQUIRE(miss);
  CHECK(miss->null);
}

TEST_CASE("FX graph entries keep their first value; PGO entries take the last; a restart keeps both") {
  TempDir dir;
  TorchCacheConfig t;
  std::optional<KilndProcess> d;
  d.emplace(dir.path(), t.toml());
  {
    RespClient c(t.torch_sock);
    for (const auto& v : {"first", "second"}) {
      for (const auto& k : {kFx, kPgo}) {
        auto r = c.call({"SET", k, v});
        REQUIRE(r);
        CHECK(r->text == "OK");
      }
    }
    CHECK(c.call({"GET", kFx})->text == "first");
    CHECK(c.call({"GET", kPgo})->text == "second");
  }
  d->signal(SIGTERM);
  REQUIRE(d->wait(std::chrono::seconds(20)) == 0);
  CHECK(!std::filesystem::exists(t.torch_sock));  // removed by the clean stop
  d.reset();
  d.emplace(dir.path(), t.toml());
  RespClient c(t.torch_sock);
  auto fx = c.call({"GET", kFx});
  REQUIRE(fx);
  CHECK(fx->text == "first");
  auto pgo = c.call({"GET", kPgo});
  REQUIRE(pgo);
  CHECK(pgo->text == "second");
}

TEST_CASE("entries are kiln artifacts of kind torch_cache: listed, counted, and evicted (then a miss)") {
  TempDir dir;
  TorchCacheConfig t;
  KilndProcess d(dir.path(), t.toml());
  RespClient c(t.torch_sock);
  REQUIRE(c.call({"SET", kFx, "graph"})->text == "OK");
  REQUIRE(c.call({"SET", kPgo, "profile"})->text == "OK");
  REQUIRE(c.call({"GET", kFx})->text == "graph");  // now a hot copy too

  RawClient k(d.socket());
  k.hello();
  proto::ListRequest list;
  list.filters["kind"] = "torch_cache";
  auto listed = k.call(MsgType::list, proto::encode(list));
  REQUIRE(listed.header.type == MsgType::ok);
  auto items = proto::decode<proto::ListReply>(listed.body);
  REQUIRE(items);
  REQUIRE(items->items.size() == 2);
  bool saw_fx = false;
  for (const auto& m : items->items) {
    CHECK(m.key.kind == ArtifactKind::torch_cache);
    if (m.key.region == "fx-graph-v1") {
      saw_fx = true;
      CHECK(m.key.compile_options.find(kFx) != std::string::npos);
      CHECK(m.size == 5);
    }
  }
  CHECK(saw_fx);
  auto stats = proto::decode<proto::StatsReply>(k.call(MsgType::stats, "{}").body);
  REQUIRE(stats);
  CHECK(stats->store.at("entries") == 2);
  CHECK(stats->store.at("hits") >= 1);

  proto::EvictRequest ev;
  ev.filters["region"] = "fx-graph-v1";
  auto evicted = proto::decode<proto::EvictReply>(k.call(MsgType::evict, proto::encode(ev)).body);
  REQUIRE(evicted);
  CHECK(evicted->evicted == 1);
  auto gone = c.call({"GET", kFx});
  REQUIRE(gone);
  CHECK(gone->null);  // the hot copy went with it
  CHECK(c.call({"GET", kPgo})->text == "profile");
}
