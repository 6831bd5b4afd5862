// The wire protocol's JSON bodies (schema/protocol.md, "Messages").
#include <doctest/doctest.h>

#include "kiln/protocol/messages.hpp"
#include "sample_key.hpp"

using namespace kiln;
using namespace kiln::protocol;

namespace {
Key complete_key() { return test::sample_key("full"); }
}  // namespace

TEST_CASE("requests and replies round-trip") {
  GetRequest g;
  g.ref.key = complete_key();
  g.delivery = Delivery::stream;
  g.on_miss = OnMiss::build;
  g.wait_ms = 5000;
  auto g2 = decode<GetRequest>(encode(g));
  REQUIRE(g2);
  CHECK(g2->ref.key == g.ref.key);
  CHECK(g2->delivery == Delivery::stream);
  CHECK(g2->on_miss == OnMiss::build);
  CHECK(g2->wait_ms == 5000);

  ArtifactMeta m;
  m.key = complete_key();
  m.key_digest = *m.key.digest();
  m.blob_digest = sha256(std::string_view("x"));
  m.size = 1ull << 40;
  m.pinned = true;
  GetReply r{true, Delivery::fd, std::nullopt, m};
  auto r2 = decode<GetReply>(encode(r));
  REQUIRE(r2);
  CHECK(r2->info->size == 1ull << 40);
  CHECK(r2->info->key_digest == m.key_digest);
  CHECK(r2->info->pinned);

  ErrorBody e{Errc::quota_exceeded, "store full"};
  auto e2 = decode<ErrorBody>(encode(e));
  REQUIRE(e2);
  CHECK(e2->code == Errc::quota_exceeded);
  CHECK(encode(e).find("\"name\":\"quota_exceeded\"") != std::string::npos);

  PrewarmReply p{"h1", {{m.key_digest, "queued", std::nullopt}, {std::nullopt, "invalid", "key.region: empty"}}};
  auto p2 = decode<PrewarmReply>(encode(p));
  REQUIRE(p2);
  CHECK(p2->results.size() == 2);
  CHECK(p2->results[1].error == "key.region: empty");
}

TEST_CASE("a GET by digest decodes the same through the plain-body path as through JSON") {
  const std::string hex = sha256(std::string_view("k")).hex();
  for (Delivery d : {Delivery::fd, Delivery::stream, Delivery::automatic}) {
    GetRequest g;
    g.ref.key_digest = *Digest::from_hex(hex);
    g.delivery = d;
    // Written directly, byte for byte what the JSON encoder writes.
    const std::string general = R"({"delivery":")" +
                                std::string(d == Delivery::fd ? "fd" : d == Delivery::stream ? "stream" : "auto") +
                                R"(","key_digest":")" + hex + R"("})";
    CHECK(encode(g) == general);
    auto g2 = decode<GetRequest>(encode(g));  // encode's bytes: the plain path
    REQUIRE(g2);
    CHECK(g2->ref.key_digest == g.ref.key_digest);
    CHECK(!g2->ref.key);
    CHECK(g2->delivery == d);
    CHECK(g2->on_miss == OnMiss::none);
    CHECK(g2->wait_ms == 0);
    CHECK(!g2->quiet);
  }
  // Other spellings of the same request take the general path and agree.
  for (std::string body : {R"({ "delivery": "auto", "key_digest": ")" + hex + R"(" })",
                           R"({"key_digest":")" + hex + R"(","delivery":"auto"})",
                           R"({"delivery":"auto","key_digest":")" + hex + R"(","quiet":false})"}) {
    CAPTURE(body);
    auto g = decode<GetRequest>(body);
    REQUIRE(g);
    CHECK(g->ref.key_digest->hex() == hex);
    CHECK(g->delivery == Delivery::automatic);
  }
  // What the plain path does not accept is refused as before, naming the field.
  auto bad_hex = decode<GetRequest>(R"({"delivery":"auto","key_digest":")" + std::string(63, 'a') + R"(g"})");
  REQUIRE(!bad_hex);
  CHECK(bad_hex.error().message.find("key_digest") != std::string::npos);
  auto bad_delivery = decode<GetRequest>(R"({"delivery":"autox","key_digest":")" + hex + R"("})");
  REQUIRE(!bad_delivery);
  CHECK(bad_delivery.error().message.find("delivery") != std::string::npos);
  auto short_hex = decode<GetRequest>(R"({"delivery":"fd","key_digest":")" + hex.substr(1) + R"("})");
  CHECK(!short_hex);
}

TEST_CASE("malformed bodies name the field and never throw") {
  CHECK(decode<GetRequest>("{").error().code == Errc::protocol_error);
  CHECK(decode<GetRequest>("[1]").error().code == Errc::protocol_error);
  auto both = decode<GetRequest>(R"({"key_digest":")" + std::string(64, 'a') + R"(","key":{}})");
  CHECK(both.error().code == Errc::invalid_argument);
  auto neither = decode<GetRequest>("{}");
  CHECK(neither.error().message.find("key_digest or key required") != std::string::npos);
  auto bad = decode<ListRequest>(R"({"limit":-4})");
  CHECK(bad.error().message.find("list.limit") != std::string::npos);
  auto big = decode<HelloRequest>(R"({"versions":[1],"max_frame":99999999999})");
  CHECK(big.error().message.find("hello.max_frame") != std::string::npos);
  auto ev = decode<EvictRequest>("{}");
  CHECK(ev.error().code == Errc::invalid_argument);
  // Unknown error codes from a newer peer decode as internal, message kept.
  auto e = decode<ErrorBody>(R"({"code":999,"message":"new"})");
  REQUIRE(e);
  CHECK(e->code == Errc::internal);
  CHECK(e->message == "new");
  // Unknown fields are ignored.
  CHECK(decode<StatsRequest>(R"({"future_field":true})"));
  CHECK(decode<StatsRequest>(""));
}

TEST_CASE("roles are cumulative and every request type needs the documented one") {
  CHECK(required_role(MsgType::get) == Role::read);
  // Storing bytes made elsewhere is put; having kilnd's own worker build is build.
  CHECK(required_role(MsgType::put) == Role::put);
  CHECK(required_role(MsgType::put_source) == Role::build);
  CHECK(required_role(MsgType::build) == Role::build);
  CHECK(required_role(MsgType::prewarm_submit) == Role::build);
  CHECK(required_role(MsgType::del) == Role::admin);
  CHECK(required_role(MsgType::evict) == Role::admin);
  CHECK(required_role(MsgType::hello) == Role::none);
  CHECK(role_names_upto(Role::build) == std::vector<std::string>{"read", "build"});
  CHECK(role_names_upto(Role::put) == std::vector<std::string>{"read", "build", "put"});
  CHECK(role_names_upto(Role::admin) == std::vector<std::string>{"read", "build", "put", "admin"});
}

TEST_CASE("a body nested past the limit is refused before parsing, however long") {
  // Four MiB of '[' is what one frame can carry; refusing it must not parse it.
  std::string deep(4u << 20, '[');
  auto r = decode<GetRequest>(deep);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::protocol_error);
  CHECK(r.error().message.find("nests deeper than 64") != std::string::npos);

  // 64 levels pass the depth check (and then fail only as a GET body would).
  std::string ok_depth = R"({"key_digest":"x","pad":)" + std::string(63, '[') + std::string(63, ']') + "}";
  auto fine = decode<GetRequest>(ok_depth);
  REQUIRE_FALSE(fine);
  CHECK(fine.error().message.find("nests deeper") == std::string::npos);

  // Brackets inside strings, escaped quotes included, are text, not nesting.
  std::string in_string = R"({"key_digest":")" + std::string(100, '[') + R"(\"" + std::string(100, '{') + R"("})";
  auto text = decode<GetRequest>(in_string);
  REQUIRE_FALSE(text);
  CHECK(text.error().message.find("nests deeper") == std::string::npos);
}

// PUT's origin and created_at (kilnctl import): sent only when set, so a plain PUT is the
// body it always was and an older kilnd, which ignores unknown fields, takes it as a put.
TEST_CASE("a put carries origin and created_at only when an import sets them") {
  PutRequest plain;
  plain.key = complete_key();
  const std::string body = encode(plain);
  CHECK(body.find("origin") == std::string::npos);
  CHECK(body.find("created_at") == std::string::npos);
  auto back = decode<PutRequest>(body);
  REQUIRE(back);
  CHECK(back->origin == "put");
  CHECK_FALSE(back->created_at);
  PutRequest imported = plain;
  imported.origin = "import";
  imported.created_at = 1'600'000'000;
  auto got = decode<PutRequest>(encode(imported));
  REQUIRE(got);
  CHECK(got->origin == "import");
  CHECK(got->created_at == 1'600'000'000);
}
