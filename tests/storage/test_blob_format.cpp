// Blob files: header encoding, writer and verified reader (schema/blob-format.md).
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>

#include "blob_format.hpp"
#include "blob_reader.hpp"
#include "blob_writer.hpp"
#include "random_bytes.hpp"
#include "store_test_util.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::storage;
using kiln::test::make_bytes;

namespace {

FinishedBlob write_blob(const std::filesystem::path& dir, std::span<const std::byte> data,
                        Compression c = Compression::zstd) {
  auto w = BlobWriter::create(real_file_system(), dir, c, 3, 0);
  REQUIRE(w);
  // Several writes, as a stream would arrive.
  std::size_t step = 7777;
  for (std::size_t off = 0; off < data.size(); off += step) {
    REQUIRE((*w)->write(data.subspan(off, std::min(step, data.size() - off))));
  }
  auto f = (*w)->finish();
  REQUIRE(f);
  return *f;
}

Status read_all(const std::filesystem::path& p, const Digest& d, std::vector<std::byte>& out) {
  out.clear();
  return read_blob(real_file_system(), p, d, [&](std::span<const std::byte> piece) -> Status {
    out.insert(out.end(), piece.begin(), piece.end());
    return {};
  });
}

std::vector<char> file_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

void write_file(const std::filesystem::path& p, const std::vector<char>& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("blob header round-trips and is 80 bytes with the documented layout") {
  BlobHeader h;
  h.compression = Compression::zstd;
  h.size = 0x0102030405060708ULL;
  h.payload_size = 1234;
  h.digest = sha256(std::string_view("x"));
  auto bytes = encode_blob_header(h);
  CHECK(bytes.size() == 80);
  CHECK(std::memcmp(bytes.data(), "KILNBLOB", 8) == 0);
  CHECK(static_cast<int>(bytes[8]) == 1);   // version, little-endian
  CHECK(static_cast<int>(bytes[10]) == 1);  // zstd
  CHECK(static_cast<int>(bytes[12]) == 80);
  CHECK(static_cast<int>(bytes[16]) == 0x08);  // size, little-endian
  auto back = decode_blob_header(bytes, "t");
  REQUIRE(back);
  CHECK(back->size == h.size);
  CHECK(back->payload_size == 1234);
  CHECK(back->digest == h.digest);
}

TEST_CASE("a damaged header is reported precisely") {
  BlobHeader h;
  h.size = 10;
  h.payload_size = 20;
  auto good = encode_blob_header(h);
  auto msg = [](std::span<const std::byte> b) {
    auto r = decode_blob_header(b, "f");
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::corrupt);
    return r.error().message;
  };
  CHECK(msg(std::span<const std::byte>(good.data(), 40)).find("truncated header") != std::string::npos);
  auto bad = good;
  bad[0] = std::byte{'X'};
  CHECK(msg(bad).find("not a kiln blob") != std::string::npos);
  bad = good;
  bad[8] = std::byte{2};
  CHECK(msg(bad).find("unsupported blob format version 2") != std::string::npos);
  bad = good;
  bad[20] ^= std::byte{1};
  CHECK(msg(bad).find("header check") != std::string::npos);
}

TEST_CASE("written blobs read back through the sink and directly, compressed or not") {
  kiln::test::TempDir dir;
  for (auto c : {Compression::zstd, Compression::none}) {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{4096}, std::size_t{3'000'001}}) {
      auto data = make_bytes(n, n + 1);
      auto blob = write_blob(dir.path(), data, c);
      CHECK(blob.header.size == n);
      CHECK(blob.header.digest == sha256(data));
      CHECK(std::filesystem::file_size(blob.temp_path) == blob.file_size);
      std::vector<std::byte> out;
      REQUIRE(read_all(blob.temp_path, blob.header.digest, out));
      CHECK(out == data);
      if (n > 0) {
        std::vector<std::byte> direct(n);
        ByteSink none = [](std::span<const std::byte>) -> Status { return {}; };
        REQUIRE(read_blob(real_file_system(), blob.temp_path, blob.header.digest, none, direct));
        CHECK(direct == data);
      }
      std::filesystem::remove(blob.temp_path);
    }
  }
}

TEST_CASE("zstd compresses code-like bytes; random bytes, where zstd does not gain, are stored raw") {
  kiln::test::TempDir dir;
  std::string text;
  while (text.size() < 1'000'000) text += "for (int i = 0; i < n; ++i) out[i] = in[i] * scale + bias;\n";
  auto code = write_blob(dir.path(), kiln::test::as_bytes(text));
  CHECK(code.file_size * 20 < text.size());
  CHECK(code.header.compression == Compression::zstd);
  const std::vector<std::byte> random = kiln::test::random_byte_vector(1'000'000, 1);
  auto rnd = write_blob(dir.path(), random);
  CHECK(rnd.header.compression == Compression::none);
  CHECK(rnd.file_size == random.size() + kBlobHeaderSize);
  std::vector<std::byte> back;
  REQUIRE(read_all(rnd.temp_path, rnd.header.digest, back));
  CHECK(back == random);
  // Random bytes after a compressible first MiB stay in the zstd frame.
  std::vector<std::byte> mixed(text.size());
  std::memcpy(mixed.data(), text.data(), text.size());
  mixed.insert(mixed.end(), random.begin(), random.end());
  auto mix = write_blob(dir.path(), mixed);
  CHECK(mix.header.compression == Compression::zstd);
  REQUIRE(read_all(mix.temp_path, mix.header.digest, back));
  CHECK(back == mixed);
}

TEST_CASE("every kind of damage to a blob file is detected on read") {
  kiln::test::TempDir dir;
  auto data = make_bytes(200000, 5);
  auto blob = write_blob(dir.path(), data);
  const auto original = file_bytes(blob.temp_path);
  auto expect_corrupt = [&](const std::vector<char>& bytes, const std::string& why) {
    write_file(blob.temp_path, bytes);
    std::vector<std::byte> out;
    auto st = read_all(blob.temp_path, blob.header.digest, out);
    REQUIRE_FALSE(st);
    CHECK(st.error().code == Errc::corrupt);
    CHECK_MESSAGE(st.error().message.find(why) != std::string::npos, st.error().message);
  };
  auto truncated = original;
  truncated.resize(original.size() - 1);
  expect_corrupt(truncated, "truncated or extended");
  auto extended = original;
  extended.push_back('x');
  expect_corrupt(extended, "truncated or extended");
  expect_corrupt(std::vector<char>(original.begin(), original.begin() + 30), "truncated header");
  expect_corrupt({}, "truncated header");
  auto payload = original;
  payload[original.size() / 2] ^= 0x40;
  expect_corrupt(payload, "blob");  // zstd error or digest mismatch, depending on the byte
  // Wrong address: a whole, valid blob of other content under this digest.
  auto other = write_blob(dir.path(), make_bytes(1000, 6));
  expect_corrupt(file_bytes(other.temp_path), "not the expected one");
  // A foreign file.
  std::string foreign = "PK\x03\x04 this is a zip file, not a kiln blob at all.................................";
  expect_corrupt(std::vector<char>(foreign.begin(), foreign.end()), "not a kiln blob");
}

TEST_CASE("a sink error stops the read and is returned") {
  kiln::test::TempDir dir;
  auto data = make_bytes(2'000'000, 1);
  auto blob = write_blob(dir.path(), data);
  int calls = 0;
  auto st = read_blob(real_file_system(), blob.temp_path, blob.header.digest, [&](std::span<const std::byte>) -> Status {
    ++calls;
    return make_error(Errc::cancelled, "client went away");
  });
  REQUIRE_FALSE(st);
  CHECK(st.error().code == Errc::cancelled);
  CHECK(calls == 1);
}

TEST_CASE("a writer destroyed before finish removes its temporary file") {
  kiln::test::TempDir dir;
  {
    auto w = BlobWriter::create(real_file_system(), dir.path(), Compression::zstd, 3, 0);
    REQUIRE(w);
    REQUIRE((*w)->write(make_bytes(100000, 1)));
    CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), {}) == 1);
  }
  CHECK(std::filesystem::is_empty(dir.path()));
}

TEST_CASE("a writer past its size limit fails with quota_exceeded and keeps failing") {
  kiln::test::TempDir dir;
  auto w = BlobWriter::create(real_file_system(), dir.path(), Compression::none, 3, 3 << 20);
  REQUIRE(w);
  auto data = make_bytes(1 << 20, 1);
  Status st;
  for (int i = 0; i < 5 && st; ++i) st = (*w)->write(data);
  REQUIRE_FALSE(st);
  CHECK(st.error().code == Errc::quota_exceeded);
  CHECK_FALSE((*w)->write(data));
  CHECK_FALSE((*w)->finish());
}

TEST_CASE("content that is not the blob's address is caught by the SHA-256, small or large, sink or direct") {
  // The payload and its XXH3 are intact; only the address in the header is another
  // content's digest (header check recomputed), so only the SHA-256 of the content can
  // tell. Large blobs hash on a helper thread while zstd decompresses (hash_pipeline.hpp).
  kiln::test::TempDir dir;
  for (auto c : {Compression::zstd, Compression::none}) {
    for (std::size_t n : {std::size_t{5000}, std::size_t{3'000'001}, std::size_t{9'000'000}}) {
      CAPTURE(n);
      auto data = make_bytes(n, n + 7);
      auto blob = write_blob(dir.path(), data, c);
      auto bytes = file_bytes(blob.temp_path);
      BlobHeader h = blob.header;
      h.digest = sha256(std::string_view("other content"));
      auto header = encode_blob_header(h);
      std::memcpy(bytes.data(), header.data(), header.size());
      write_file(blob.temp_path, bytes);
      std::vector<std::byte> out;
      auto st = read_all(blob.temp_path, h.digest, out);
      REQUIRE_FALSE(st);
      CHECK(st.error().code == Errc::corrupt);
      CHECK_MESSAGE(st.error().message.find("content digest mismatch") != std::string::npos, st.error().message);
      std::vector<std::byte> direct(n);
      ByteSink none = [](std::span<const std::byte>) -> Status { return {}; };
      st = read_blob(real_file_system(), blob.temp_path, h.digest, none, direct);
      REQUIRE_FALSE(st);
      CHECK(st.error().message.find("content digest mismatch") != std::string::npos);
      // The xxh3 check does not hash the content: it passes, as ReadCheck documents.
      CHECK(read_blob(real_file_system(), blob.temp_path, h.digest, none, direct, ReadCheck::xxh3));
      std::filesystem::remove(blob.temp_path);
    }
  }
}

TEST_CASE("a sink that fails part-way through a large read stops it cleanly, and the next read works") {
  kiln::test::TempDir dir;
  auto data = make_bytes(6'000'000, 11);
  auto blob = write_blob(dir.path(), data);
  std::size_t got = 0;
  auto st = read_blob(real_file_system(), blob.temp_path, blob.header.digest, [&](std::span<const std::byte> p) -> Status {
    got += p.size();
    if (got > 2'000'000) return make_error(Errc::cancelled, "client went away");
    return {};
  });
  REQUIRE_FALSE(st);
  CHECK(st.error().code == Errc::cancelled);
  std::vector<std::byte> out;
  REQUIRE(read_all(blob.temp_path, blob.header.digest, out));
  CHECK(out == data);
}

TEST_CASE("a sink may read another blob from inside a read") {
  kiln::test::TempDir dir;
  auto outer = make_bytes(3'000'000, 21);
  auto inner = make_bytes(2'000'000, 22);
  auto a = write_blob(dir.path(), outer);
  auto b = write_blob(dir.path(), inner);
  std::vector<std::byte> got_outer, got_inner;
  bool nested = false;
  auto st = read_blob(real_file_system(), a.temp_path, a.header.digest, [&](std::span<const std::byte> p) -> Status {
    got_outer.insert(got_outer.end(), p.begin(), p.end());
    if (!nested) {
      nested = true;
      KILN_TRY(read_all(b.temp_path, b.header.digest, got_inner));
    }
    return {};
  });
  REQUIRE_MESSAGE(st, (st ? "" : st.error().to_string()));
  CHECK(got_outer == outer);
  CHECK(got_inner == inner);
}
