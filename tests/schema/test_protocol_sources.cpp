// LIST_SOURCES, GET_SOURCE and STATUS's GPUs (schema/protocol.md).
#include <doctest/doctest.h>

#include "kiln/protocol/messages.hpp"

using namespace kiln;
using namespace kiln::protocol;

namespace {
const std::string kHash(64, 'c');
}

TEST_CASE("source listing round-trips with its prefix, page and stored size") {
  ListSourcesRequest q{"ab12", 50, 100};
  auto q2 = decode<ListSourcesRequest>(encode(q));
  REQUIRE(q2);
  CHECK(q2->model_hash_prefix == "ab12");
  CHECK(q2->limit == 50);
  CHECK(q2->offset == 100);
  auto empty = decode<ListSourcesRequest>("");
  REQUIRE(empty);
  CHECK(empty->model_hash_prefix.empty());
  CHECK(empty->limit == 1000);

  SourceMeta s;
  s.model_hash = kHash;
  s.blob_digest = sha256(std::string_view("archive"));
  s.size = 5ull << 30;
  s.stored_size = 123456;
  s.created_at = 1700000000;
  s.name = "flux_single.pt2";
  ListSourcesReply r{{s, s}, 150};
  auto r2 = decode<ListSourcesReply>(encode(r));
  REQUIRE(r2);
  REQUIRE(r2->items.size() == 2);
  CHECK(r2->items[0].model_hash == kHash);
  CHECK(r2->items[0].size == 5ull << 30);
  CHECK(r2->items[0].stored_size == 123456);
  CHECK(r2->items[0].created_at == 1700000000);
  CHECK(r2->items[1].name == "flux_single.pt2");
  CHECK(r2->next_offset == 150u);
  // A source shape from an older kilnd (no stored_size) still decodes; the size reads 0.
  auto old = decode<PutSourceReply>(R"({"source":{"model_hash":")" + kHash + R"(","blob_digest":")" +
                                    s.blob_digest.hex() + R"(","size":7}})");
  REQUIRE(old);
  CHECK(old->source.stored_size == 0);
  CHECK(encode(PutSourceReply{old->source}).find("stored_size") == std::string::npos);
}

TEST_CASE("a bad model hash prefix is refused naming the field") {
  for (const char* bad : {R"({"model_hash_prefix":"ABCD"})", R"({"model_hash_prefix":"xyz"})",
                          R"({"model_hash_prefix":7})"}) {
    auto r = decode<ListSourcesRequest>(bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::invalid_argument);
    CHECK(r.error().message.find("model_hash_prefix") != std::string::npos);
  }
  auto long_prefix = decode<ListSourcesRequest>(R"({"model_hash_prefix":")" + std::string(65, 'a') + "\"}");
  CHECK_FALSE(long_prefix);
  CHECK(decode<ListSourcesRequest>(R"({"limit":-1})").error().message.find("list_sources.limit") !=
        std::string::npos);
}

TEST_CASE("get_source round-trips and checks its hash and delivery") {
  GetSourceRequest g{kHash, Delivery::stream};
  auto g2 = decode<GetSourceRequest>(encode(g));
  REQUIRE(g2);
  CHECK(g2->model_hash == kHash);
  CHECK(g2->delivery == Delivery::stream);
  auto dflt = decode<GetSourceRequest>(R"({"model_hash":")" + kHash + "\"}");
  REQUIRE(dflt);
  CHECK(dflt->delivery == Delivery::fd);

  auto missing = decode<GetSourceRequest>("{}");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message.find("get_source.model_hash: required") != std::string::npos);
  auto short_hash = decode<GetSourceRequest>(R"({"model_hash":"abc"})");
  REQUIRE_FALSE(short_hash);
  CHECK(short_hash.error().message.find("64 lowercase hex") != std::string::npos);
  auto upper = decode<GetSourceRequest>(R"({"model_hash":")" + std::string(64, 'A') + "\"}");
  CHECK_FALSE(upper);
  auto bad_delivery = decode<GetSourceRequest>(R"({"model_hash":")" + kHash + R"(","delivery":"pigeon"})");
  REQUIRE_FALSE(bad_delivery);
  CHECK(bad_delivery.error().message.find("get_source: delivery") != std::string::npos);
  CHECK(decode<GetSourceRequest>("{").error().code == Errc::protocol_error);

  GetSourceReply r;
  r.delivery = Delivery::fd;
  r.source.model_hash = kHash;
  r.source.blob_digest = sha256(std::string_view("a"));
  r.source.size = 1;
  auto r2 = decode<GetSourceReply>(encode(r));
  REQUIRE(r2);
  CHECK(r2->delivery == Delivery::fd);
  CHECK(r2->source.model_hash == kHash);
  CHECK_FALSE(decode<GetSourceReply>(R"({"delivery":"fd"})"));  // a reply needs its source
}

TEST_CASE("status carries the node's GPUs, the note when none, and the build slots") {
  StatusReply s;
  s.server = "kilnd/0.1.0";
  s.gpus = {{0, "NVIDIA H200", "sm_90", 150081716224ull, "GPU-8c1f"}, {1, "NVIDIA H200", "sm_90", 1, "GPU-2"}};
  s.build_slots = {{"gpu0", "sm_90", "NVIDIA H200", 1, 3, 2}};
  auto s2 = decode<StatusReply>(encode(s));
  REQUIRE(s2);
  REQUIRE(s2->gpus.size() == 2);
  CHECK(s2->gpus[0].name == "NVIDIA H200");
  CHECK(s2->gpus[0].arch == "sm_90");
  CHECK(s2->gpus[0].memory_bytes == 150081716224ull);
  CHECK(s2->gpus[0].uuid == "GPU-8c1f");
  CHECK(s2->gpus[1].index == 1);
  CHECK(s2->gpu_note.empty());
  REQUIRE(s2->build_slots.size() == 1);
  CHECK(s2->build_slots[0].running == 1);
  CHECK(s2->build_slots[0].queued == 3);
  CHECK(s2->build_slots[0].builds_at_once == 2);
  auto older = decode<StatusReply>(R"({"server":"k","build_slots":[{"name":"gpu0","running":0,"queued":0}]})");
  REQUIRE(older);
  CHECK(older->build_slots[0].builds_at_once == 1);  // a kilnd that does not say runs one

  CHECK(s2->verify_total == 0);  // no VERIFY running: no "verify" member
  CHECK(encode(s).find("\"verify\"") == std::string::npos);
  s.verify_checked = 120;
  s.verify_total = 4000;
  auto v2 = decode<StatusReply>(encode(s));
  REQUIRE(v2);
  CHECK(v2->verify_checked == 120);
  CHECK(v2->verify_total == 4000);

  StatusReply none;
  none.server = "kilnd/0.1.0";
  none.gpu_note = "libcuda.so.1 not loadable";
  auto n2 = decode<StatusReply>(encode(none));
  REQUIRE(n2);
  CHECK(n2->gpus.empty());
  CHECK(n2->gpu_note == "libcuda.so.1 not loadable");
  // An older kilnd's reply has none of the fields.
  auto old = decode<StatusReply>(R"({"server":"kilnd/0.0.9"})");
  REQUIRE(old);
  CHECK(old->gpus.empty());
  CHECK(old->build_slots.empty());
  auto bad = decode<StatusReply>(R"({"server":"k","gpus":[{"name":"x"}]})");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("gpus") != std::string::npos);
}

TEST_CASE("listing and fetching sources need the read role and are requests") {
  CHECK(required_role(MsgType::list_sources) == Role::read);
  CHECK(required_role(MsgType::get_source) == Role::read);
  CHECK(is_known_type(0x1A));
  CHECK(is_known_type(0x1B));
  CHECK(is_request_type(MsgType::get_source));
  CHECK(type_name(MsgType::list_sources) == "LIST_SOURCES");
  CHECK(op_name(MsgType::get_source) == "get_source");
  CHECK_FALSE(is_known_type(0x1F));
}
