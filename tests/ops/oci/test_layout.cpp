// OCI image layouts as folders and tars: round trips, atomic output, verified reads.
#include <doctest/doctest.h>

#include <cstdlib>

#include "kiln/oci/layout.hpp"
#include "oci_test_util.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::oci;
using namespace kiln::oci::test_util;
namespace fs = std::filesystem;

namespace {

struct Written {
  std::string big = pattern(5 << 20, 1);
  Descriptor big_desc, manifest_desc;
};

Written write_and_finish(const fs::path& path, LayoutFormat format) {
  Written w;
  auto writer = LayoutWriter::create(path, format);
  REQUIRE(writer);
  auto big = (*writer)->add_blob("application/x-big", sha256(w.big), w.big.size(), source_of(w.big));
  REQUIRE(big);
  w.big_desc = *big;
  auto m = (*writer)->add_blob(kImageManifestType, R"({"schemaVersion":2})");
  REQUIRE(m);
  REQUIRE((*writer)->add_manifest(*m, "v1"));
  REQUIRE((*writer)->finish());
  w.manifest_desc = *m;
  return w;
}

}  // namespace

TEST_CASE("LayoutRoundTripsAsFolderAndTar") {
  test::TempDir dir;
  for (auto format : {LayoutFormat::directory, LayoutFormat::tar}) {
    fs::path path = dir / (format == LayoutFormat::tar ? "x.tar" : "x");
    CAPTURE(path);
    Written w;
    {
      auto writer = LayoutWriter::create(path, format);
      REQUIRE(writer);
      auto big = (*writer)->add_blob("application/x-big", sha256(w.big), w.big.size(), source_of(w.big));
      REQUIRE(big);
      auto again = (*writer)->add_blob("application/x-big", sha256(w.big), w.big.size(), source_of(w.big));
      REQUIRE(again);
      auto m = (*writer)->add_blob(kImageManifestType, R"({"schemaVersion":2})");
      REQUIRE(m);
      m->artifact_type = "application/x-test";
      REQUIRE((*writer)->add_manifest(*m, "v1"));
      auto dup = (*writer)->add_manifest(*m, "v1");
      CHECK(!dup);
      // The duplicate tag failed the writer: it refuses to finish.
      CHECK(!(*writer)->finish());
    }
    CHECK(!fs::exists(path));
    fs::path partial = path;
    partial += ".partial";
    CHECK(!fs::exists(partial));

    w = write_and_finish(path, format);
    CHECK(fs::exists(path));
    CHECK(!fs::exists(partial));
    auto reader = LayoutReader::open(path);
    REQUIRE_MESSAGE(reader, (reader ? "" : reader.error().to_string()));
    REQUIRE((*reader)->manifests().size() == 1);
    const Descriptor& m = (*reader)->manifests()[0];
    CHECK(m.tag() == "v1");
    CHECK(m.digest == w.manifest_desc.digest);
    CHECK(read_all(**reader, m) == R"({"schemaVersion":2})");
    CHECK(read_all(**reader, w.big_desc) == w.big);
    CHECK((*reader)->has_blob(w.big_desc.digest));
  }
  // What tar sees: the standard names, index.json last.
  std::string cmd = "tar -tf " + (dir / "x.tar").string() + " > " + (dir / "list").string();
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::string list = slurp(dir / "list");
  CHECK(list.starts_with("oci-layout\nblobs/\nblobs/sha256/\n"));
  CHECK(list.ends_with("index.json\n"));
  // And the folder has the spec's files.
  CHECK(slurp(dir / "x" / "oci-layout") == R"({"imageLayoutVersion":"1.0.0"})");
  CHECK(fs::exists(dir / "x" / "blobs" / "sha256" / sha256(pattern(5 << 20, 1)).hex()));
}

TEST_CASE("WriterRefusesAnExistingPathAndBytesThatDoNotMatchTheirDigest") {
  test::TempDir dir;
  fs::create_directories(dir / "taken");
  auto taken = LayoutWriter::create(dir / "taken", LayoutFormat::directory);
  REQUIRE(!taken);
  CHECK(taken.error().code == Errc::invalid_argument);
  CHECK(fs::exists(dir / "taken"));

  for (auto format : {LayoutFormat::directory, LayoutFormat::tar}) {
    fs::path path = dir / (format == LayoutFormat::tar ? "bad.tar" : "bad");
    auto writer = LayoutWriter::create(path, format);
    REQUIRE(writer);
    std::string data = "the real bytes";
    auto wrong = (*writer)->add_blob("application/x", sha256(std::string("other bytes")), data.size(), source_of(data));
    REQUIRE(!wrong);
    CHECK(wrong.error().code == Errc::corrupt);
    auto short_size = (*writer)->add_blob("application/x", sha256(data), data.size() + 1, source_of(data));
    CHECK(!short_size);
    auto fin = (*writer)->finish();
    REQUIRE(!fin);
    CHECK(fin.error().code == Errc::corrupt);
    writer->reset();
    CHECK(!fs::exists(path));
  }
}

TEST_CASE("ReaderRejectsMalformedLayoutsNamingWhatIsWrong") {
  test::TempDir dir;
  fs::path layout = dir / "l";
  Written w = write_and_finish(layout, LayoutFormat::directory);
  auto expect = [&](Errc code, const std::string& words) {
    auto r = LayoutReader::open(layout);
    REQUIRE(!r);
    CHECK(r.error().code == code);
    CHECK_MESSAGE(r.error().message.find(words) != std::string::npos, r.error().message);
  };
  std::string index = slurp(layout / "index.json");

  SUBCASE("missing path") {
    auto r = LayoutReader::open(dir / "nope");
    REQUIRE(!r);
    CHECK(r.error().code == Errc::not_found);
  }
  SUBCASE("no oci-layout") {
    fs::remove(layout / "oci-layout");
    expect(Errc::invalid_argument, "oci-layout");
  }
  SUBCASE("wrong layout version") {
    spit(layout / "oci-layout", R"({"imageLayoutVersion":"2.0.0"})");
    expect(Errc::invalid_argument, "imageLayoutVersion");
  }
  SUBCASE("no index.json") {
    fs::remove(layout / "index.json");
    expect(Errc::invalid_argument, "index.json");
  }
  SUBCASE("index.json not JSON") {
    spit(layout / "index.json", "{ nope");
    expect(Errc::invalid_argument, "not valid JSON");
  }
  SUBCASE("a descriptor with a bad digest") {
    spit(layout / "index.json", R"({"schemaVersion":2,"manifests":[{"mediaType":"x","digest":"sha256:zz","size":1}]})");
    expect(Errc::invalid_argument, "manifests[0].digest");
  }
  SUBCASE("a descriptor with another algorithm") {
    spit(layout / "index.json", R"({"schemaVersion":2,"manifests":[{"mediaType":"x","digest":"sha512:00","size":1}]})");
    expect(Errc::unsupported, "sha512");
  }
  SUBCASE("a blob that was damaged on disk") {
    fs::path blob = layout / "blobs" / "sha256" / w.big_desc.digest.hex();
    std::string data = slurp(blob);
    data[12345] ^= 1;
    spit(blob, data);
    auto r = LayoutReader::open(layout);
    REQUIRE(r);
    auto st = (*r)->read_blob(w.big_desc, [](std::span<const std::byte>) -> Status { return {}; });
    REQUIRE(!st);
    CHECK(st.error().code == Errc::corrupt);
    CHECK(st.error().message.find(w.big_desc.digest.hex()) != std::string::npos);
  }
  SUBCASE("a blob that is missing or of the wrong size") {
    fs::path blob = layout / "blobs" / "sha256" / w.big_desc.digest.hex();
    spit(blob, "short");
    auto r = LayoutReader::open(layout);
    REQUIRE(r);
    auto st = (*r)->read_blob(w.big_desc, [](std::span<const std::byte>) -> Status { return {}; });
    REQUIRE(!st);
    CHECK(st.error().code == Errc::corrupt);
    fs::remove(blob);
    auto st2 = (*r)->read_blob(w.big_desc, [](std::span<const std::byte>) -> Status { return {}; });
    REQUIRE(!st2);
    CHECK(st2.error().code == Errc::not_found);
  }
  SUBCASE("a tar cut off before its index") {
    fs::path tar = dir / "t.tar";
    write_and_finish(tar, LayoutFormat::tar);
    std::string raw = slurp(tar);
    // index.json is the last entry: header + one data block + end marker.
    spit(tar, raw.substr(0, raw.size() - 1024 - 1024));
    auto r = LayoutReader::open(tar);
    REQUIRE(!r);
    CHECK(r.error().message.find("index.json") != std::string::npos);
  }
  SUBCASE("a file that is not a tar") {
    spit(dir / "junk.tar", std::string(4096, 'j'));
    auto r = LayoutReader::open(dir / "junk.tar");
    REQUIRE(!r);
    CHECK(r.error().message.find("neither an OCI layout folder nor a readable tar") != std::string::npos);
  }
}
