// kiln artifacts and sources as OCI manifests (schema/oci-layout.md).
#include <doctest/doctest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "kiln/oci/kiln_layout.hpp"
#include "oci_test_util.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::oci;
using namespace kiln::oci::test_util;
namespace fs = std::filesystem;

TEST_CASE("ArtifactsAndSourcesRoundTripWithTheirKeysAndBytes") {
  test::TempDir dir;
  Key k1 = sample_key("FluxTransformerBlock");
  Key k2 = sample_key("FluxSingleTransformerBlock", ArtifactKind::megacache);
  Key k3 = sample_key("FluxSingleTransformerBlock");  // same bytes as k1: one blob
  std::string a1 = pattern(300000, 1), a2 = pattern(1000, 2), src = pattern(70000, 3);
  std::string model_hash(64, 'a');
  for (auto format : {LayoutFormat::directory, LayoutFormat::tar}) {
    fs::path path = dir / (format == LayoutFormat::tar ? "e.tar" : "e");
    {
      auto w = LayoutWriter::create(path, format);
      REQUIRE(w);
      REQUIRE(write_artifact(**w, k1, {1763700000, 36.6}, sha256(a1), a1.size(), source_of(a1)));
      REQUIRE(write_artifact(**w, k2, {1763700001, std::nullopt}, sha256(a2), a2.size(), source_of(a2)));
      REQUIRE(write_artifact(**w, k3, {0, 1.5}, sha256(a1), a1.size(), source_of(a1)));
      REQUIRE(write_source(**w, {model_hash, "flux_single.pt2", 1763600000}, sha256(src), src.size(), source_of(src)));
      REQUIRE((*w)->finish());
    }
    auto r = LayoutReader::open(path);
    REQUIRE(r);
    auto c = read_contents(**r);
    REQUIRE_MESSAGE(c, (c ? "" : c.error().to_string()));
    REQUIRE(c->artifacts.size() == 3);
    REQUIRE(c->sources.size() == 1);
    CHECK(c->skipped.empty());
    const auto& x = c->artifacts[0];
    CHECK(x.key == k1);
    CHECK(x.key_digest == *k1.digest());
    CHECK(x.manifest.tag() == k1.digest()->hex());
    CHECK(x.meta.created_at == 1763700000);
    REQUIRE(x.meta.build_seconds);
    CHECK(*x.meta.build_seconds == doctest::Approx(36.6));
    CHECK(x.layer.media_type == "application/vnd.kiln.aoti.v1");
    CHECK(x.layer.annotations.at("org.opencontainers.image.title") == "FluxTransformerBlock.pt2");
    CHECK(read_all(**r, x.layer) == a1);
    Key k2_read = k2;
    REQUIRE(k2_read.normalize());  // a megacache key reads back with cpu_isa "any"
    CHECK(c->artifacts[1].key == k2_read);
    CHECK(c->artifacts[1].layer.media_type == "application/vnd.kiln.megacache.v1");
    CHECK(!c->artifacts[1].meta.build_seconds);
    CHECK(read_all(**r, c->artifacts[1].layer) == a2);
    CHECK(c->artifacts[2].key == k3);
    CHECK(c->artifacts[2].layer.digest == x.layer.digest);
    CHECK(c->artifacts[2].meta.created_at == 0);
    const auto& s = c->sources[0];
    CHECK(s.meta.model_hash == model_hash);
    CHECK(s.meta.name == "flux_single.pt2");
    CHECK(s.meta.created_at == 1763600000);
    CHECK(s.manifest.tag() == "source-" + model_hash);
    CHECK(read_all(**r, s.layer) == src);
  }
}

TEST_CASE("ArtifactManifestsAreOci11ArtifactsCarryingEveryKeyField") {
  test::TempDir dir;
  Key k = sample_key("FluxTransformerBlock");
  std::string a = pattern(4096, 9);
  {
    auto w = LayoutWriter::create(dir / "e", LayoutFormat::directory);
    REQUIRE(w);
    REQUIRE(write_artifact(**w, k, {1763700000, 2.0}, sha256(a), a.size(), source_of(a)));
    REQUIRE((*w)->finish());
  }
  auto index = nlohmann::json::parse(slurp(dir / "e" / "index.json"));
  CHECK(index["schemaVersion"] == 2);
  CHECK(index["mediaType"] == "application/vnd.oci.image.index.v1+json");
  auto d = index["manifests"][0];
  CHECK(d["artifactType"] == "application/vnd.kiln.artifact.v1");
  CHECK(d["annotations"]["org.opencontainers.image.ref.name"] == k.digest()->hex());
  std::string digest = d["digest"].get<std::string>().substr(7);
  std::string manifest_text = slurp(dir / "e" / "blobs" / "sha256" / digest);
  CHECK(sha256(manifest_text).hex() == digest);
  auto m = nlohmann::json::parse(manifest_text);
  CHECK(m.dump() == manifest_text);  // sorted keys, no whitespace: reproducible digests
  CHECK(m["schemaVersion"] == 2);
  CHECK(m["mediaType"] == "application/vnd.oci.image.manifest.v1+json");
  CHECK(m["config"]["mediaType"] == "application/vnd.kiln.key.v1+json");
  CHECK(slurp(dir / "e" / "blobs" / "sha256" / m["config"]["digest"].get<std::string>().substr(7)) == k.to_json());
  REQUIRE(m["layers"].size() == 1);
  CHECK(m["layers"][0]["digest"] == "sha256:" + sha256(a).hex());
  CHECK(m["layers"][0]["size"] == a.size());
  auto ann = m["annotations"];
  CHECK(ann["org.kiln.key.digest"] == k.digest()->hex());
  CHECK(ann["org.kiln.format_version"] == "1");
  for (const auto& [field, value] : k.fields()) {
    CAPTURE(field);
    CHECK(ann["org.kiln.key." + field] == value);
  }
  CHECK(ann["org.opencontainers.image.created"] == "2025-11-21T04:40:00Z");
  CHECK(ann["org.kiln.artifact.build_seconds"] == "2.000");

  // Exporting the same content again gives the same bytes.
  {
    auto w = LayoutWriter::create(dir / "f", LayoutFormat::directory);
    REQUIRE(w);
    REQUIRE(write_artifact(**w, k, {1763700000, 2.0}, sha256(a), a.size(), source_of(a)));
    REQUIRE((*w)->finish());
  }
  CHECK(slurp(dir / "f" / "index.json") == slurp(dir / "e" / "index.json"));
}

TEST_CASE("IncompleteKeysAndBadSourcesAreNotExported") {
  test::TempDir dir;
  auto w = LayoutWriter::create(dir / "e", LayoutFormat::directory);
  REQUIRE(w);
  Key k = sample_key("Block");
  k.gpu_arch.clear();
  std::string a = "bytes";
  auto r = write_artifact(**w, k, {}, sha256(a), a.size(), source_of(a));
  REQUIRE(!r);
  CHECK(r.error().code == Errc::invalid_argument);
  CHECK(r.error().message.find("gpu_arch") != std::string::npos);
  auto s = write_source(**w, {"NOTHEX", "x", 0}, sha256(a), a.size(), source_of(a));
  REQUIRE(!s);
  CHECK(s.error().message.find("model hash") != std::string::npos);
}

namespace {

// Writes a layout holding one hand-made manifest whose config is `config` and whose
// layers and annotations are as given: for testing what the reader refuses.
fs::path hand_made(const test::TempDir& dir, const std::string& name, const std::string& config_type,
                   const std::string& config, const std::vector<std::string>& layer_types, nlohmann::json annotations,
                   const std::string& tag) {
  fs::path path = dir / name;
  auto w = LayoutWriter::create(path, LayoutFormat::directory);
  REQUIRE(w);
  auto c = (*w)->add_blob(config_type, config);
  REQUIRE(c);
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& t : layer_types) {
    auto l = (*w)->add_blob(t, "layer-bytes-" + t);
    REQUIRE(l);
    layers.push_back({{"mediaType", t}, {"digest", digest_ref(l->digest)}, {"size", l->size}});
  }
  nlohmann::json m = {{"schemaVersion", 2}, {"mediaType", kImageManifestType},
                      {"config", {{"mediaType", config_type}, {"digest", digest_ref(c->digest)}, {"size", c->size}}},
                      {"layers", layers}, {"annotations", annotations}};
  auto md = (*w)->add_blob(kImageManifestType, m.dump());
  REQUIRE(md);
  REQUIRE((*w)->add_manifest(*md, tag));
  REQUIRE((*w)->finish());
  return path;
}

Error contents_error(const fs::path& path) {
  auto r = LayoutReader::open(path);
  REQUIRE(r);
  auto c = read_contents(**r);
  REQUIRE(!c);
  return c.error();
}

}  // namespace

TEST_CASE("ManifestsThatLieAboutTheirKeyAreRefused") {
  test::TempDir dir;
  Key k = sample_key("Block");
  std::string hex = k.digest()->hex();
  std::string other = sample_key("Other").digest()->hex();
  const std::string aoti(kAotiLayerType);

  SUBCASE("digest annotation differs from the config's key") {
    auto p = hand_made(dir, "a", std::string(kKeyConfigType), k.to_json(), {aoti}, {{"org.kiln.key.digest", other}}, hex);
    auto e = contents_error(p);
    CHECK(e.code == Errc::corrupt);
    CHECK(e.message.find("does not match the key") != std::string::npos);
  }
  SUBCASE("tag differs from the config's key") {
    auto p = hand_made(dir, "a", std::string(kKeyConfigType), k.to_json(), {aoti}, {{"org.kiln.key.digest", hex}}, other);
    auto e = contents_error(p);
    CHECK(e.code == Errc::corrupt);
    CHECK(e.message.find("tag") != std::string::npos);
  }
  SUBCASE("config is not a key") {
    auto p = hand_made(dir, "a", std::string(kKeyConfigType), R"({"kind":"aoti"})", {aoti}, {{"org.kiln.key.digest", hex}}, hex);
    auto e = contents_error(p);
    CHECK(e.code == Errc::corrupt);
    CHECK(e.message.find("not a valid key") != std::string::npos);
  }
  SUBCASE("two layers") {
    auto p = hand_made(dir, "a", std::string(kKeyConfigType), k.to_json(), {aoti, aoti + "x"}, {{"org.kiln.key.digest", hex}}, hex);
    CHECK(contents_error(p).message.find("2 layers") != std::string::npos);
  }
  SUBCASE("layer type of another kind") {
    auto p = hand_made(dir, "a", std::string(kKeyConfigType), k.to_json(), {std::string(kMegacacheLayerType)},
                       {{"org.kiln.key.digest", hex}}, hex);
    CHECK(contents_error(p).code == Errc::corrupt);
  }
  SUBCASE("a compressed layer") {
    auto p = hand_made(dir, "a", std::string(kKeyConfigType), k.to_json(), {aoti + "+zstd"}, {{"org.kiln.key.digest", hex}}, hex);
    auto e = contents_error(p);
    CHECK(e.code == Errc::unsupported);
    CHECK(e.message.find("+zstd") != std::string::npos);
  }
  SUBCASE("a source whose tag is not its model hash") {
    nlohmann::json cfg = {{"format_version", 1}, {"model_hash", std::string(64, 'b')}, {"name", "x"}};
    auto p = hand_made(dir, "a", std::string(kSourceConfigType), cfg.dump(), {std::string(kSourceLayerType)}, nlohmann::json::object(),
                       "source-" + std::string(64, 'c'));
    CHECK(contents_error(p).code == Errc::corrupt);
  }
  SUBCASE("a manifest blob missing") {
    auto p = hand_made(dir, "a", std::string(kKeyConfigType), k.to_json(), {aoti}, {{"org.kiln.key.digest", hex}}, hex);
    for (auto& e : fs::directory_iterator(p / "blobs" / "sha256")) {
      auto j = nlohmann::json::parse(slurp(e.path()), nullptr, false);
      if (!j.is_discarded() && j.is_object() && j.contains("layers")) fs::remove(e.path());
    }
    CHECK(contents_error(p).code == Errc::not_found);
  }
}

TEST_CASE("ForeignManifestsAreSkippedNotErrors") {
  test::TempDir dir;
  auto p = hand_made(dir, "a", "application/vnd.oci.image.config.v1+json", "{}", {"application/vnd.oci.image.layer.v1.tar"},
                     nlohmann::json::object(), "latest");
  auto r = LayoutReader::open(p);
  REQUIRE(r);
  auto c = read_contents(**r);
  REQUIRE(c);
  CHECK(c->artifacts.empty());
  REQUIRE(c->skipped.size() == 1);
  CHECK(c->skipped[0].find("latest") != std::string::npos);
}

TEST_CASE("SkopeoReadsAndCopiesWhatKilnWrites") {
  // A standard OCI tool (installed by ops/install-deps.sh) is the judge of "valid OCI".
  REQUIRE_MESSAGE(std::system("command -v skopeo >/dev/null") == 0, "skopeo is needed (ops/install-deps.sh installs it)");
  test::TempDir dir;
  Key k = sample_key("FluxSingleStreamBlock");
  std::string a = pattern(200000, 5);
  std::string tag = k.digest()->hex();
  for (auto format : {LayoutFormat::directory, LayoutFormat::tar}) {
    bool tar = format == LayoutFormat::tar;
    fs::path path = dir / (tar ? "e.tar" : "e");
    auto w = LayoutWriter::create(path, format);
    REQUIRE(w);
    auto md = write_artifact(**w, k, {1763700000, 2.0}, sha256(a), a.size(), source_of(a));
    REQUIRE(md);
    REQUIRE((*w)->finish());
    std::string ref = std::string(tar ? "oci-archive:" : "oci:") + path.string() + ":" + tag;
    fs::path raw = dir / (tar ? "raw-tar.json" : "raw.json");
    REQUIRE(std::system(("skopeo inspect --raw " + ref + " > " + raw.string()).c_str()) == 0);
    CHECK(sha256(slurp(raw)) == md->digest);  // the very manifest bytes kiln wrote
    // A copy re-reads and verifies every blob; the layer comes out byte for byte.
    fs::path out = dir / (tar ? "copy-tar" : "copy");
    REQUIRE(std::system(("skopeo copy --quiet " + ref + " dir:" + out.string()).c_str()) == 0);
    CHECK(slurp(out / sha256(a).hex()) == a);
    CHECK(slurp(out / sha256(k.to_json()).hex()) == k.to_json());
  }
}
