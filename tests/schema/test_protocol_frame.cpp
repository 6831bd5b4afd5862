// The wire protocol's framing (schema/protocol.md, "Frame").
#include <doctest/doctest.h>

#include <cstring>

#include "kiln/protocol/frame.hpp"

using namespace kiln;
using namespace kiln::protocol;

TEST_CASE("a header round-trips and is laid out as the spec says") {
  FrameHeader h{kVersion, MsgType::get, kFlagFd, 0x01020304u, 0x0A0B0C0Du};
  auto b = encode_header(h);
  CHECK(std::memcmp(b.data(), "KILN", 4) == 0);
  CHECK(std::to_integer<int>(b[4]) == 1);
  CHECK(std::to_integer<int>(b[5]) == 0x02);
  CHECK(std::to_integer<int>(b[6]) == 0x02);  // flags little-endian
  CHECK(std::to_integer<int>(b[8]) == 0x04);  // request id little-endian
  CHECK(std::to_integer<int>(b[15]) == 0x0A);
  auto d = decode_header(b, 0xFFFFFFFFu);
  REQUIRE(d);
  CHECK(d->type == MsgType::get);
  CHECK(d->flags == kFlagFd);
  CHECK(d->request_id == 0x01020304u);
  CHECK(d->length == 0x0A0B0C0Du);
}

TEST_CASE("bad headers are refused with the reason, and the request id when readable") {
  FrameHeader h{kVersion, MsgType::stats, 0, 42, 100};
  auto b = encode_header(h);
  std::uint32_t rid = 0;
  CHECK(decode_header(b, 99, &rid).error().code == Errc::protocol_error);  // too long
  CHECK(rid == 42);
  auto v = b;
  v[4] = std::byte{2};
  CHECK(decode_header(v, 1000).error().code == Errc::unsupported);
  auto m = b;
  m[0] = std::byte{'X'};
  CHECK(decode_header(m, 1000, &rid).error().code == Errc::protocol_error);
  CHECK(rid == 0);
  auto f = b;
  f[7] = std::byte{0x80};
  CHECK(decode_header(f, 1000).error().code == Errc::protocol_error);
  // An unknown type is well-framed: decodes, and is_known_type() says no.
  auto t = b;
  t[5] = std::byte{0x55};
  REQUIRE(decode_header(t, 1000));
  CHECK_FALSE(is_known_type(0x55));
}

TEST_CASE("the parser reassembles frames fed a byte at a time and poisons on garbage") {
  auto a = encode_frame({kVersion, MsgType::put, 0, 1, 0}, std::string_view("{\"a\":1}"));
  auto b = encode_frame({kVersion, MsgType::chunk, kFlagEnd, 1, 0}, std::string_view(""));
  std::vector<std::byte> all(a);
  all.insert(all.end(), b.begin(), b.end());
  FrameParser p;
  std::vector<Frame> got;
  for (auto byte : all) {
    p.feed(std::span(&byte, 1));
    for (;;) {
      auto f = p.next();
      REQUIRE(f);
      if (!*f) break;
      got.push_back(std::move(**f));
    }
  }
  REQUIRE(got.size() == 2);
  CHECK(got[0].body_text() == "{\"a\":1}");
  CHECK(got[1].header.flags == kFlagEnd);
  CHECK(got[1].body.empty());

  std::string junk = "not a frame at all";
  p.feed(std::as_bytes(std::span(junk.data(), junk.size())));
  CHECK_FALSE(p.next());
  CHECK_FALSE(p.next());  // stays poisoned
}

TEST_CASE("every request type has a name and is a request") {
  for (int t = 0; t < 256; ++t) {
    if (!is_known_type(static_cast<std::uint8_t>(t))) continue;
    auto type = static_cast<MsgType>(t);
    CHECK(type_name(type) != "UNKNOWN");
    CHECK(is_request_type(type) == (t < 0x20));
  }
}
