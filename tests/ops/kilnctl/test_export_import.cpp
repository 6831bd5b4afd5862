// kilnctl export / import between two real kilnd nodes: byte-identical artifacts under the
// same keys, through a layout folder and a tar; damaged layouts refused item by item.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "kiln/client/client.hpp"
#include "kiln/oci/kiln_layout.hpp"
#include "ops_test_util.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::ops_test;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kMadeAt = 1'600'000'000;

struct Stored {
  Digest key_digest;
  std::string bytes;
};

// Puts artifacts of assorted sizes (an empty one, two sharing bytes) on node `d`.
std::vector<Stored> fill(const test::KilndProcess& d) {
  auto c = connect(d);
  std::vector<Stored> out;
  std::vector<std::size_t> sizes = {0, 1, 4096, 300'000, 3'000'000, 777};
  for (std::size_t i = 0; i < sizes.size() + 1; ++i) {
    Key k = test::test_key(static_cast<int>(i));
    if (i == 3) k.kind = ArtifactKind::megacache;
    // The last key shares its bytes with the one before it.
    std::string bytes = i < sizes.size() ? random_bytes(sizes[i], static_cast<unsigned>(i + 1)) : out.back().bytes;
    client::PutOptions po;
    po.build_seconds = 1.5 * static_cast<double>(i);
    po.pin = i == 2;
    po.created_at = kMadeAt + static_cast<std::int64_t>(i);  // made long before this test
    auto info = c.put(k, as_bytes(bytes), po);
    REQUIRE_MESSAGE(info, (info ? "" : info.error().to_string()));
    out.push_back({info->key_digest, bytes});
  }
  return out;
}

void check_node_holds(const test::KilndProcess& d, const std::vector<Stored>& want) {
  auto c = connect(d);
  for (const auto& s : want) {
    CAPTURE(s.key_digest.hex());
    auto a = c.get(s.key_digest);
    REQUIRE(a);
    REQUIRE(*a);
    auto bytes = (*a)->read_all();
    REQUIRE(bytes);
    CHECK(std::string(reinterpret_cast<const char*>(bytes->data()), bytes->size()) == s.bytes);
    CHECK((*a)->info().key_digest == s.key_digest);
    CHECK((*a)->info().key.digest().value() == s.key_digest);
  }
}

}  // namespace

TEST_CASE("ExportThenImportIntoAFreshStoreIsByteIdenticalWithTheSameKeys") {
  test::TempDir dir;
  fs::create_directories(dir / "a");
  fs::create_directories(dir / "b");
  fs::create_directories(dir / "c");
  test::KilndProcess a(dir / "a"), b(dir / "b"), c(dir / "c");
  REQUIRE_MESSAGE(a.start(), a.log());
  REQUIRE_MESSAGE(b.start(), b.log());
  REQUIRE_MESSAGE(c.start(), c.log());
  auto stored = fill(a);
  Run stats_before = kilnctl({"stats", "--json"}, a.socket());
  REQUIRE(stats_before.code == 0);
  Run ls_before = kilnctl({"ls", "--json"}, a.socket());
  REQUIRE(ls_before.code == 0);

  Run ex = kilnctl({"export", "--json", (dir / "layout").string()}, a.socket());
  REQUIRE_MESSAGE(ex.code == 0, ex.err);
  json e = json::parse(ex.out);
  CHECK(e["artifacts"] == stored.size());
  CHECK(e["format"] == "directory");
  Run ex_tar = kilnctl({"export", (dir / "layout.tar").string()}, a.socket());
  REQUIRE_MESSAGE(ex_tar.code == 0, ex_tar.err);
  CHECK(ex_tar.out.find("exported 7 artifact(s)") != std::string::npos);
  // Exporting is not using: no hit or miss counted, no artifact's hits or last access moved.
  json sb = json::parse(stats_before.out), sa = json::parse(kilnctl({"stats", "--json"}, a.socket()).out);
  CHECK(sa["store"]["hits"] == sb["store"]["hits"]);
  CHECK(sa["store"]["misses"] == sb["store"]["misses"]);
  json lb = json::parse(ls_before.out)["items"], la = json::parse(kilnctl({"ls", "--json"}, a.socket()).out)["items"];
  REQUIRE(la.size() == lb.size());
  for (std::size_t i = 0; i < la.size(); ++i) {
    CHECK(la[i]["key_digest"] == lb[i]["key_digest"]);  // the same LRU order
    CHECK(la[i]["hits"] == lb[i]["hits"]);
    CHECK(la[i]["last_access"] == lb[i]["last_access"]);
  }
  // A standard tar program reads it, and it holds the OCI layout's files.
  std::string cmd = "tar -tf " + (dir / "layout.tar").string() + " | grep -c '^blobs/sha256/' > " + (dir / "n").string();
  REQUIRE(std::system(cmd.c_str()) == 0);
  CHECK(std::stoi(read_file(dir / "n")) >= 7 + 1 + 6);  // layers (6 distinct), configs, manifests

  Run im = kilnctl({"import", "--json", (dir / "layout").string()}, b.socket());
  REQUIRE_MESSAGE(im.code == 0, im.err);
  json i = json::parse(im.out);
  CHECK(i["imported"] == stored.size());
  CHECK(i["failed"] == 0);
  check_node_holds(b, stored);

  Run im_tar = kilnctl({"import", (dir / "layout.tar").string()}, c.socket());
  REQUIRE_MESSAGE(im_tar.code == 0, im_tar.err);
  CHECK(im_tar.out.find("7 artifacts: 7 imported, 0 already there, 0 failed") != std::string::npos);
  check_node_holds(c, stored);

  // Metadata travels: build time; pins only when the receiving operator asks (--keep-pins).
  auto cb = connect(b);
  auto info = cb.stat(stored[4].key_digest);
  REQUIRE(info);
  REQUIRE(*info);
  CHECK((*info)->build_seconds == doctest::Approx(6.0));
  CHECK(!(*info)->pinned);
  CHECK(!cb.stat(stored[2].key_digest).value().value().pinned);
  // Where it came from, and when it was made (on a, not when b imported it).
  auto ca = connect(a);
  for (std::size_t n = 0; n < stored.size(); ++n) {
    auto on_a = ca.stat(stored[n].key_digest).value().value();
    auto on_b = cb.stat(stored[n].key_digest).value().value();
    CHECK(on_a.origin == "put");
    CHECK(on_b.origin == "import");
    CHECK(on_a.created_at == kMadeAt + static_cast<std::int64_t>(n));
    CHECK(on_b.created_at == on_a.created_at);
  }
  Run inspect = kilnctl({"inspect", "--digest", stored[4].key_digest.hex()}, b.socket());
  REQUIRE_MESSAGE(inspect.code == 0, inspect.err);
  CHECK(inspect.out.find("origin") != std::string::npos);
  CHECK(inspect.out.find("import") != std::string::npos);
  fs::create_directories(dir / "d");
  test::KilndProcess dn(dir / "d");
  REQUIRE_MESSAGE(dn.start(), dn.log());
  Run keep = kilnctl({"import", "--keep-pins", (dir / "layout").string()}, dn.socket());
  REQUIRE_MESSAGE(keep.code == 0, keep.err);
  auto cd = connect(dn);
  CHECK(cd.stat(stored[2].key_digest).value().value().pinned);  // pinned on a
  CHECK(!cd.stat(stored[4].key_digest).value().value().pinned);

  // Importing again changes nothing.
  Run again = kilnctl({"import", "--json", (dir / "layout").string()}, b.socket());
  CHECK(again.code == 0);
  CHECK(json::parse(again.out)["present"] == stored.size());

  // Exporting the new node gives the same manifests (same keys, same bytes, same digests).
  // (--filter takes one value per use: the PATH after it stays the PATH.)
  Run ex_b = kilnctl({"export", "--filter", "kind=megacache", (dir / "from-b").string()}, b.socket());
  REQUIRE_MESSAGE(ex_b.code == 0, ex_b.err);
  auto reader = oci::LayoutReader::open(dir / "from-b");
  REQUIRE(reader);
  auto contents = oci::read_contents(**reader);
  REQUIRE(contents);
  REQUIRE(contents->artifacts.size() == 1);
  CHECK(contents->artifacts[0].key_digest == stored[3].key_digest);

  // An export never overwrites.
  Run exists = kilnctl({"export", (dir / "layout").string()}, a.socket());
  CHECK(exists.code == 1);
  CHECK(exists.err.find("already exists") != std::string::npos);
}

TEST_CASE("ImportSkipsADamagedArtifactAndStoresTheRest") {
  test::TempDir dir;
  fs::create_directories(dir / "a");
  fs::create_directories(dir / "b");
  test::KilndProcess a(dir / "a"), b(dir / "b");
  REQUIRE_MESSAGE(a.start(), a.log());
  REQUIRE_MESSAGE(b.start(), b.log());
  auto stored = fill(a);
  REQUIRE(kilnctl({"export", (dir / "layout").string()}, a.socket()).code == 0);

  // Damage the layer of stored[4] (3 MB, bytes of its own).
  fs::path blob = dir / "layout" / "blobs" / "sha256" / sha256(stored[4].bytes).hex();
  std::string bytes = read_file(blob);
  bytes[1'000'000] ^= 0x40;
  write_file(blob, bytes);

  Run im = kilnctl({"import", "--json", (dir / "layout").string()}, b.socket());
  CHECK(im.code == 6);
  json i = json::parse(im.out);
  CHECK(i["imported"] == stored.size() - 1);
  CHECK(i["failed"] == 1);
  for (const auto& item : i["items"]) {
    if (item["outcome"] == "failed") {
      CHECK(item["key_digest"] == stored[4].key_digest.hex());
      CHECK(item["error"].get<std::string>().find("corrupt") != std::string::npos);
    }
  }
  auto cb = connect(b);
  auto missing = cb.stat(stored[4].key_digest);
  REQUIRE(missing);
  CHECK(!*missing);  // never stored

  // Not a layout at all: a clear error, exit 1.
  write_file(dir / "junk.tar", random_bytes(5000, 3));
  Run junk = kilnctl({"import", (dir / "junk.tar").string()}, b.socket());
  CHECK(junk.code != 0);
  CHECK(junk.err.find("neither an OCI layout folder nor a readable tar") != std::string::npos);
  Run absent = kilnctl({"import", (dir / "absent").string()}, b.socket());
  CHECK(absent.code == 2);
}

TEST_CASE("SourcesKilndHasTravelByDefaultAndAFreshNodeServesThemByteIdentical") {
  test::TempDir dir;
  for (const char* n : {"a", "b", "c"}) fs::create_directories(dir / n);
  test::KilndProcess a(dir / "a"), b(dir / "b"), c(dir / "c");
  REQUIRE_MESSAGE(a.start(), a.log());
  REQUIRE_MESSAGE(b.start(), b.log());
  REQUIRE_MESSAGE(c.start(), c.log());
  auto ca = connect(a);

  // On node a: a source with two artifacts of its model hash, an artifact whose model hash
  // has no source, and a source no artifact uses.
  const std::string archive = random_bytes(200'000, 42);
  write_file(dir / "block.pt2", archive);
  write_file(dir / "unused.pt2", "unused");
  Key k1 = test::test_key(1), k2 = test::test_key(2), lone = test::test_key(3);
  const std::string hash = k1.model_hash;
  k2.model_hash = hash;
  REQUIRE(ca.put_source(hash, "block.pt2", dir / "block.pt2"));
  const std::string unused_hash = std::string(64, 'e');
  REQUIRE(ca.put_source(unused_hash, "unused.pt2", dir / "unused.pt2"));
  for (const Key& k : {k1, k2, lone}) REQUIRE(ca.put(k, as_bytes(random_bytes(1000, 7))));

  Run ex = kilnctl({"export", "--json", (dir / "with.tar").string()}, a.socket());
  REQUIRE_MESSAGE(ex.code == 0, ex.err);
  json e = json::parse(ex.out);
  CHECK(e["artifacts"] == 3);
  CHECK(e["sources"] == 1);
  CHECK(e["sources_from_daemon"] == 1);
  CHECK(e["sources_missing"] == json::array({lone.model_hash}));
  Run ex_human = kilnctl({"export", (dir / "with-folder").string()}, a.socket());
  REQUIRE_MESSAGE(ex_human.code == 0, ex_human.err);
  CHECK(ex_human.out.find("and 1 source(s)") != std::string::npos);
  CHECK(ex_human.out.find(lone.model_hash) != std::string::npos);  // named: a miss there cannot be built

  // The layout names the source by its model hash, with its name.
  auto reader = oci::LayoutReader::open(dir / "with.tar");
  REQUIRE(reader);
  auto contents = oci::read_contents(**reader);
  REQUIRE(contents);
  REQUIRE(contents->sources.size() == 1);
  CHECK(contents->sources[0].meta.model_hash == hash);
  CHECK(contents->sources[0].meta.name == "block.pt2");
  CHECK(contents->sources[0].layer.digest == sha256(archive));

  // Import into fresh node b: the source is registered there; source ls shows it and its
  // bytes come back identical, through kilnctl and through GET_SOURCE itself.
  Run im = kilnctl({"import", "--json", (dir / "with.tar").string()}, b.socket());
  REQUIRE_MESSAGE(im.code == 0, im.err);
  json i = json::parse(im.out);
  CHECK(i["imported"] == 3);
  CHECK(i["sources_imported"] == 1);
  Run ls = kilnctl({"source", "ls", "--json"}, b.socket());
  REQUIRE_MESSAGE(ls.code == 0, ls.err);
  json items = json::parse(ls.out)["items"];
  REQUIRE(items.size() == 1);
  CHECK(items[0]["model_hash"] == hash);
  CHECK(items[0]["size"] == archive.size());
  CHECK(items[0]["name"] == "block.pt2");
  CHECK(items[0]["blob_digest"] == sha256(archive).hex());
  Run get = kilnctl({"source", "get", hash, "-o", (dir / "back.pt2").string()}, b.socket());
  REQUIRE_MESSAGE(get.code == 0, get.err);
  CHECK(read_file(dir / "back.pt2") == archive);
  auto cb = connect(b);
  auto src = cb.get_source(hash);
  REQUIRE_MESSAGE(src, (src ? "" : src.error().to_string()));
  auto bytes = src->read_all();
  REQUIRE(bytes);
  CHECK(std::string(reinterpret_cast<const char*>(bytes->data()), bytes->size()) == archive);
  CHECK(cb.get_source(unused_hash).error().code == Errc::not_found);  // not exported: no artifact used it

  // --no-sources leaves them out: fresh node c gets the artifacts and no source.
  Run ex_none = kilnctl({"export", "--json", "--no-sources", (dir / "without").string()}, a.socket());
  REQUIRE_MESSAGE(ex_none.code == 0, ex_none.err);
  CHECK(json::parse(ex_none.out)["sources"] == 0);
  Run im_none = kilnctl({"import", "--json", (dir / "without").string()}, c.socket());
  REQUIRE_MESSAGE(im_none.code == 0, im_none.err);
  CHECK(json::parse(im_none.out)["imported"] == 3);
  Run ls_c = kilnctl({"source", "ls", "--json"}, c.socket());
  REQUIRE(ls_c.code == 0);
  CHECK(json::parse(ls_c.out)["items"].empty());
}

TEST_CASE("ATorchCacheEntryNeedsNoSourceAndInspectGivesItNoSourceHint") {
  test::TempDir dir;
  test::KilndProcess a(dir.path());
  REQUIRE_MESSAGE(a.start(), a.log());
  auto ca = connect(a);
  Key entry = test::test_key(5);
  entry.kind = ArtifactKind::torch_cache;
  entry.model_hash = std::string(64, 'c');
  entry.compile_options = R"({"torch_key":"fxgraph-abc"})";
  auto info = ca.put(entry, as_bytes(std::string("{\"v\":1}")));
  REQUIRE_MESSAGE(info, (info ? "" : info.error().to_string()));
  auto aoti_info = ca.put(test::test_key(6), as_bytes(std::string("aoti")));
  REQUIRE(aoti_info);

  Run ex = kilnctl({"export", "--json", (dir / "layout").string()}, a.socket());
  REQUIRE_MESSAGE(ex.code == 0, ex.err);
  const json missing = json::parse(ex.out)["sources_missing"];
  CHECK(missing.size() == 1);  // the aoti artifact's model hash only
  CHECK(std::find(missing.begin(), missing.end(), entry.model_hash) == missing.end());

  Run shown = kilnctl({"inspect", "--digest", info->key_digest.hex()}, a.socket());
  REQUIRE_MESSAGE(shown.code == 0, shown.err);
  CHECK(shown.out.find("ls --filter model_hash=") == std::string::npos);
  CHECK(shown.out.find("build_seconds   -") != std::string::npos);  // a put: nothing was built
  Run aoti = kilnctl({"inspect", "--digest", aoti_info->key_digest.hex()}, a.socket());
  CHECK(aoti.out.find("ls --filter model_hash=") != std::string::npos);
}
