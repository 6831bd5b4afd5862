// GET "auto" against a real kilnd: small artifacts come back inline (OK + one CHUNK),
// larger ones, or any when the client's frames are too small or the limit is 0, as a
// descriptor; hello says the limit.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <random>

#include "kiln/protocol/messages.hpp"
#include "random_bytes.hpp"
#include "support/kilnd_process.hpp"
#include "support/raw_client.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::test;
namespace proto = kiln::protocol;
using proto::MsgType;

namespace {

struct Got {
  proto::Delivery delivery;
  std::string bytes;
  std::size_t frames = 0;
};

// GET by digest with `delivery`; the bytes however they came.
Got get(RawClient& c, const Digest& d, proto::Delivery delivery) {
  proto::GetRequest g;
  g.ref.key_digest = d;
  g.delivery = delivery;
  auto r = c.call(MsgType::get, proto::encode(g));
  REQUIRE(r.header.type == MsgType::ok);
  auto reply = proto::decode<proto::GetReply>(r.body);
  REQUIRE(reply);
  REQUIRE(reply->found);
  Got got{reply->delivery, {}, 1};
  if (reply->delivery == proto::Delivery::fd) {
    REQUIRE(r.fd >= 0);
    got.bytes = read_fd(r.fd);
    ::close(r.fd);
    return got;
  }
  CHECK(r.fd < 0);
  REQUIRE((r.header.flags & proto::kFlagMore) != 0);
  for (;;) {
    auto chunk = c.recv();
    REQUIRE(chunk);
    REQUIRE(chunk->header.type == MsgType::chunk);
    ++got.frames;
    got.bytes += chunk->body;
    if (chunk->header.flags & proto::kFlagEnd) break;
  }
  return got;
}

Digest put(RawClient& c, const std::string& name, const std::string& data) {
  Key key = test_key(name);
  auto r = c.put(key, data);
  REQUIRE(r.header.type == MsgType::ok);
  return *key.digest();
}

}  // namespace

TEST_CASE("auto: small artifacts inline in one CHUNK, larger ones as a descriptor; hello states the limit") {
  TempDir dir;
  KilndProcess d(dir.path(), "[limits]\ninline_max_bytes = \"8KiB\"\n");
  RawClient c(d.socket());
  auto hello = proto::decode<proto::HelloReply>(c.hello());
  REQUIRE(hello);
  CHECK(hello->inline_max == 8192);
  CHECK(std::find(hello->capabilities.begin(), hello->capabilities.end(), "auto") != hello->capabilities.end());

  const std::string zero, small = test::random_bytes(4096, 1), edge = test::random_bytes(8192, 2), large = test::random_bytes(8193, 3);
  const Digest dz = put(c, "zero", zero), ds = put(c, "small", small), de = put(c, "edge", edge),
               dl = put(c, "large", large);
  for (int round = 0; round < 2; ++round) {  // cold (from the store), then from the hot set
    CAPTURE(round);
    auto gz = get(c, dz, proto::Delivery::automatic);
    CHECK(gz.delivery == proto::Delivery::stream);
    CHECK(gz.bytes.empty());
    auto gs = get(c, ds, proto::Delivery::automatic);
    CHECK(gs.delivery == proto::Delivery::stream);
    CHECK(gs.frames == 2);  // the reply and one CHUNK
    CHECK(gs.bytes == small);
    auto ge = get(c, de, proto::Delivery::automatic);
    CHECK(ge.delivery == proto::Delivery::stream);
    CHECK(ge.bytes == edge);
    auto gl = get(c, dl, proto::Delivery::automatic);
    CHECK(gl.delivery == proto::Delivery::fd);
    CHECK(gl.bytes == large);
  }
  // Asking for a descriptor still gets one, however small.
  CHECK(get(c, ds, proto::Delivery::fd).delivery == proto::Delivery::fd);
  // Requests keep their order on the connection after inline replies.
  CHECK(c.call(MsgType::stats, "{}").header.type == MsgType::ok);
}

TEST_CASE("auto: a client whose frames are smaller than the artifact gets a descriptor") {
  TempDir dir;
  KilndProcess d(dir.path(), "");
  RawClient c(d.socket());
  proto::HelloRequest req;
  req.client = "kiln-test";
  req.capabilities = {"fd", "stream"};
  req.max_frame = 4096;
  auto r = c.call(MsgType::hello, proto::encode(req));
  REQUIRE(r.header.type == MsgType::ok);
  auto hello = proto::decode<proto::HelloReply>(r.body);
  REQUIRE(hello);
  CHECK(hello->inline_max == 4096);
  const std::string data = test::random_bytes(6000, 4);
  const Digest dd = put(c, "mid", data);
  auto g = get(c, dd, proto::Delivery::automatic);
  CHECK(g.delivery == proto::Delivery::fd);
  CHECK(g.bytes == data);
}

TEST_CASE("auto: inline_max_bytes = 0 means always a descriptor; an oversized limit is refused") {
  TempDir dir;
  {
    KilndProcess d(dir.path() / "zero", "[limits]\ninline_max_bytes = 0\n");
    RawClient c(d.socket());
    c.hello();
    const Digest dd = put(c, "tiny", "abc");
    auto g = get(c, dd, proto::Delivery::automatic);
    CHECK(g.delivery == proto::Delivery::fd);
    CHECK(g.bytes == "abc");
  }
  CHECK_THROWS_WITH_AS(KilndProcess(dir.path() / "big", "[limits]\ninline_max_bytes = \"2MiB\"\n"),
                       doctest::Contains("inline_max_bytes"), std::runtime_error);
}

TEST_CASE("a reply never says auto; a request with an unknown delivery is refused") {
  CHECK_FALSE(proto::decode<proto::GetReply>(R"({"found":true,"delivery":"auto","info":{}})"));
  auto bad = proto::decode<proto::GetRequest>(R"({"key_digest":")" + std::string(64, 'a') +
                                              R"(","delivery":"carrier-pigeon"})");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("auto") != std::string::npos);
}
