// torch's cache keys as kiln keys (schema/torch-cache.md): stable, node-independent, and
// which of torch's caches are never overwritten.
#include <doctest/doctest.h>

#include "kiln/torch_cache/torch_key.hpp"

using namespace kiln;
using namespace kiln::torch_cache;

TEST_CASE("torch's key maps to a complete kiln key of kind torch_cache, the same every time") {
  const std::string k = "pt2:fx-graph-v1::fjx5zcq2ug3qfbhbl3r7oovmzzf2qhbjzw3u3nj7r7vwm7ljphkl:c1";
  auto a = map_torch_key(k);
  REQUIRE(a);
  auto key = a->kiln_key();
  CHECK(key.kind == ArtifactKind::torch_cache);
  CHECK(key.is_complete());
  CHECK(a->cache_id == "fx-graph-v1");
  CHECK(key.region == "fx-graph-v1");
  CHECK(key.model_hash == sha256(k).hex());
  CHECK(key.compile_options.find(k) != std::string::npos);
  CHECK(a->overwrite == Overwrite::never);
  auto b = map_torch_key(k);
  REQUIRE(b);
  CHECK(a->digest == b->digest);
  CHECK(a->digest == *key.digest());
  auto round = Key::from_json(key.to_json());
  REQUIRE(round);
  CHECK(*round->digest() == a->digest);
  auto other = map_torch_key(k + "x");
  REQUIRE(other);
  CHECK(other->digest != a->digest);
}

TEST_CASE("FX graph and AOTAutograd entries are never overwritten; PGO, autotune and unknown ones are") {
  CHECK(overwrite_of(cache_id_of("pt2:fx-graph-v1::abc:c1")) == Overwrite::never);
  CHECK(overwrite_of(cache_id_of("pt2:autograd-experimental::abc:c1")) == Overwrite::never);
  CHECK(overwrite_of(cache_id_of("pt2:dynamo-pgo::code:c1")) == Overwrite::last_writer_wins);
  CHECK(overwrite_of(cache_id_of("pt2:bundled-autotune-v1::abc:c1")) == Overwrite::last_writer_wins);
  CHECK(overwrite_of(cache_id_of("pt2:" + std::string(64, 'a') + "::triton_.py:c1")) == Overwrite::last_writer_wins);
  CHECK(overwrite_of(cache_id_of("somebody-else:key")) == Overwrite::last_writer_wins);
  CHECK(cache_id_of("pt2:::x").empty());
  CHECK(cache_id_of("pt2:abc").empty());
}

TEST_CASE("any bytes make a key; keys that are not printable are recorded in hex; empty and huge are refused") {
  auto bin = map_torch_key(std::string("a\0\n\xff", 4));
  REQUIRE(bin);
  CHECK(bin->kiln_key().region == "-");
  CHECK(bin->kiln_key().compile_options.find("torch_key_hex") != std::string::npos);
  CHECK(bin->digest == *bin->kiln_key().digest());
  CHECK(!map_torch_key(""));
  CHECK(!map_torch_key(std::string(kMaxKeyBytes + 1, 'k')));
  CHECK(map_torch_key(std::string(kMaxKeyBytes, 'k')));
}

TEST_CASE("the digest written directly equals Key::digest() of the kiln key, whatever the key holds") {
  for (std::string k : {std::string("pt2:fx-graph-v1::abc:c1"), std::string("pt2:dynamo-pgo::a \"quoted\" \\ key:c1"),
                        std::string("plain"), std::string("pt2:x::"), std::string("caf\xc3\xa9"),
                        std::string(300, '\x01'), std::string("pt2:") + std::string(300, 'i') + "::k:c1",
                        std::string(kMaxKeyBytes, 'z')}) {
    CAPTURE(k.substr(0, 40));
    auto t = map_torch_key(k);
    REQUIRE(t);
    auto key = t->kiln_key();
    auto d = key.digest();
    REQUIRE(d);
    CHECK(*d == t->digest);
    auto canonical = canonical_json(key.compile_options);
    REQUIRE(canonical);
    CHECK(*canonical == key.compile_options);
    // One writer's own entry: the same rule, another digest.
    auto own = with_writer(*t, "uid:1000");
    auto own_key = own.kiln_key();
    REQUIRE(own_key.digest());
    CHECK(*own_key.digest() == own.digest);
    CHECK(own.digest != t->digest);
    auto own_canonical = canonical_json(own_key.compile_options);
    REQUIRE(own_canonical);
    CHECK(*own_canonical == own_key.compile_options);
  }
}

TEST_CASE("each writer's entry of a torch key is its own; the shared one has no writer") {
  auto shared = map_torch_key("pt2:fx-graph-v1::abc:c1");
  REQUIRE(shared);
  CHECK(shared->writer.empty());
  CHECK(shared->kiln_key().compile_options.find("writer") == std::string::npos);
  auto a = with_writer(*shared, "uid:1000"), b = with_writer(*shared, "uid:1001"), t = with_writer(*shared, "tcp");
  CHECK(a.digest != b.digest);
  CHECK(a.digest != t.digest);
  CHECK(a.kiln_key().compile_options == R"({"torch_key":"pt2:fx-graph-v1::abc:c1","writer":"uid:1000"})");
  CHECK(with_writer(a, "").digest == shared->digest);  // back to the shared entry
  CHECK(a.overwrite == Overwrite::never);             // what the writer changes nothing else
}
