// ustar writer and reader: round trips, compatibility with GNU tar, malformed archives.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "kiln/oci/tar.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::oci;

namespace {

std::span<const std::byte> bytes(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

std::string read_entry(const TarReader& r, const std::string& name) {
  const TarEntry* e = r.find(name);
  REQUIRE(e != nullptr);
  std::string out;
  auto st = r.read(*e, [&](std::span<const std::byte> d) -> Status {
    out.append(reinterpret_cast<const char*>(d.data()), d.size());
    return {};
  });
  REQUIRE(st);
  return out;
}

std::string pattern(std::size_t n, unsigned seed) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed) & 0xff);
  return s;
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const std::filesystem::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary);
  out << s;
}

}  // namespace

TEST_CASE("FilesOfEverySizeRoundTripThroughATar") {
  test::TempDir dir;
  auto file = dir / "a.tar";
  std::string long_name = "blobs/sha256/" + std::string(64, 'a') + "/" + std::string(90, 'b');  // > 100: prefix split
  std::vector<std::pair<std::string, std::string>> files = {
      {"empty", ""}, {"one", "x"}, {"block", pattern(512, 1)}, {"block_plus", pattern(513, 2)},
      {"big", pattern(3 << 20, 3)}, {long_name, "long"}};
  {
    auto w = TarWriter::create(file);
    REQUIRE(w);
    REQUIRE(w->add_directory("blobs"));
    for (auto& [name, data] : files) REQUIRE(w->add_file(name, bytes(data)));
    REQUIRE(w->finish());
  }
  auto r = TarReader::open(file);
  REQUIRE(r);
  CHECK(r->entries().size() == files.size() + 1);
  CHECK(r->find("blobs")->type == TarEntry::Type::directory);
  for (auto& [name, data] : files) CHECK(read_entry(*r, name) == data);
  CHECK(r->find("absent") == nullptr);

  // GNU tar reads what we wrote, names and sizes intact.
  std::string cmd = "tar -tvf " + file.string() + " > " + (dir / "list").string();
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::string listing = slurp(dir / "list");
  CHECK(listing.find(long_name) != std::string::npos);
  CHECK(listing.find(std::to_string(3 << 20)) != std::string::npos);
}

TEST_CASE("ArchivesFromGnuTarAreReadIncludingPaxAndLongNames") {
  test::TempDir dir;
  std::filesystem::create_directories(dir / "src" / "blobs" / "sha256");
  std::string deep = std::string(120, 'n');  // one part longer than 100: pax or GNU long name
  spit(dir / "src" / "oci-layout", "{}");
  spit(dir / "src" / "blobs" / "sha256" / deep, pattern(1000, 7));
  for (std::string fmt : {"pax", "gnu", "ustar"}) {
    CAPTURE(fmt);
    auto file = dir / ("t-" + fmt + ".tar");
    std::string cmd = "tar --format=" + fmt + " -C " + (dir / "src").string() + " -cf " + file.string() + " . 2>/dev/null";
    int rc = std::system(cmd.c_str());
    if (fmt == "ustar") {
      CHECK(rc != 0);  // GNU tar itself cannot store a 120-byte part in ustar
      continue;
    }
    REQUIRE(rc == 0);
    auto r = TarReader::open(file);
    REQUIRE_MESSAGE(r, (r ? "" : r.error().to_string()));
    CHECK(read_entry(*r, "oci-layout") == "{}");  // "./" prefix stripped
    CHECK(read_entry(*r, "blobs/sha256/" + deep) == pattern(1000, 7));
  }
}

TEST_CASE("WriterRefusesBadNamesSizesAndExistingFiles") {
  test::TempDir dir;
  spit(dir / "exists.tar", "x");
  auto existing = TarWriter::create(dir / "exists.tar");
  REQUIRE(!existing);
  CHECK(existing.error().code == Errc::invalid_argument);

  auto w = TarWriter::create(dir / "b.tar");
  REQUIRE(w);
  for (std::string bad : {"/etc/passwd", "a/../b", "", "a//b"}) {
    CAPTURE(bad);
    auto w2 = TarWriter::create(dir / ("n" + std::to_string(bad.size()) + ".tar"));
    REQUIRE(w2);
    auto st = w2->add_file(bad, bytes("x"));
    REQUIRE(!st);
    CHECK(st.error().code == Errc::invalid_argument);
  }
  REQUIRE(w->begin_file("f", 3));
  auto over = w->write(bytes("abcd"));
  REQUIRE(!over);
  // The writer stays failed: a later call returns the first error.
  auto later = w->finish();
  REQUIRE(!later);
  CHECK(later.error().message == over.error().message);

  auto w3 = TarWriter::create(dir / "c.tar");
  REQUIRE(w3);
  REQUIRE(w3->begin_file("f", 3));
  REQUIRE(w3->write(bytes("ab")));
  auto under = w3->end_file();
  REQUIRE(!under);
  CHECK(under.error().message.find("announced 3") != std::string::npos);
}

TEST_CASE("MalformedArchivesGiveClearErrors") {
  test::TempDir dir;
  auto good = dir / "good.tar";
  {
    auto w = TarWriter::create(good);
    REQUIRE(w);
    REQUIRE(w->add_file("a", bytes(pattern(2000, 1))));
    REQUIRE(w->add_file("b", bytes("bee")));
    REQUIRE(w->finish());
  }
  std::string raw = slurp(good);

  SUBCASE("truncated in the middle of an entry's data") {
    spit(dir / "t.tar", raw.substr(0, 512 + 1000));
    auto r = TarReader::open(dir / "t.tar");
    REQUIRE(!r);
    CHECK(r.error().code == Errc::corrupt);
    CHECK(r.error().message.find("truncated") != std::string::npos);
  }
  SUBCASE("a damaged header fails its checksum") {
    std::string bad = raw;
    bad[5] = 'Z';
    spit(dir / "c.tar", bad);
    auto r = TarReader::open(dir / "c.tar");
    REQUIRE(!r);
    CHECK(r.error().code == Errc::corrupt);
    CHECK(r.error().message.find("checksum") != std::string::npos);
  }
  SUBCASE("not a tar at all") {
    spit(dir / "n.tar", std::string(2000, 'q'));
    auto r = TarReader::open(dir / "n.tar");
    REQUIRE(!r);
    CHECK(r.error().code == Errc::corrupt);
  }
  SUBCASE("a missing end marker is tolerated when every entry is whole") {
    spit(dir / "e.tar", raw.substr(0, raw.size() - 1024));
    auto r = TarReader::open(dir / "e.tar");
    REQUIRE(r);
    CHECK(read_entry(*r, "b") == "bee");
  }
  SUBCASE("symlinks and '..' names from GNU tar are refused") {
    std::filesystem::create_directories(dir / "s");
    std::filesystem::create_symlink("/etc/passwd", dir / "s" / "link");
    std::string cmd = "tar -C " + (dir / "s").string() + " -cf " + (dir / "l.tar").string() + " link";
    REQUIRE(std::system(cmd.c_str()) == 0);
    auto r = TarReader::open(dir / "l.tar");
    REQUIRE(!r);
    CHECK(r.error().code == Errc::invalid_argument);
    CHECK(r.error().message.find("link") != std::string::npos);

    std::filesystem::create_directories(dir / "d" / "x");
    spit(dir / "d" / "f", "evil");
    cmd = "tar -C " + (dir / "d" / "x").string() + " -cPf " + (dir / "dd.tar").string() + " ../f";
    REQUIRE(std::system(cmd.c_str()) == 0);
    auto r2 = TarReader::open(dir / "dd.tar");
    REQUIRE(!r2);
    CHECK(r2.error().message.find("..") != std::string::npos);
  }
  SUBCASE("a duplicate name is refused") {
    auto w = TarWriter::create(dir / "dup.tar");
    REQUIRE(w);
    REQUIRE(w->add_file("a", bytes("1")));
    REQUIRE(w->add_file("./a", bytes("2")));
    REQUIRE(w->finish());
    auto r = TarReader::open(dir / "dup.tar");
    REQUIRE(!r);
    CHECK(r.error().message.find("twice") != std::string::npos);
  }
}
