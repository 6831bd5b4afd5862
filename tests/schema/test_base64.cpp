// kiln's one base64 codec (kiln/base64.hpp): padded, round-trips any bytes, refuses what is
// not base64.
#include <doctest/doctest.h>

#include <initializer_list>
#include <string>

#include "kiln/base64.hpp"

using kiln::base64_decode;
using kiln::base64_encode;

namespace {
std::string encode(const std::string& s) { return base64_encode(std::as_bytes(std::span(s.data(), s.size()))); }
}  // namespace

TEST_CASE("base64 round-trips with padding, as RFC 4648 writes it") {
  CHECK(encode("") == "");
  CHECK(encode("f") == "Zg==");
  CHECK(encode("fo") == "Zm8=");
  CHECK(encode("foo") == "Zm9v");
  CHECK(encode("user:password") == "dXNlcjpwYXNzd29yZA==");
  const std::initializer_list<std::string> samples{"", "a", "ab", "abc", "abcd", "user:password",
                                                   std::string("\0\xff\x10", 3)};
  for (const std::string& s : samples) {
    auto dec = base64_decode(encode(s));
    REQUIRE(dec.has_value());
    CHECK(std::string(reinterpret_cast<const char*>(dec->data()), dec->size()) == s);
  }
}

TEST_CASE("base64 that is not padded or not base64 is refused") {
  CHECK_FALSE(base64_decode("Zg"));
  CHECK_FALSE(base64_decode("Zm9v!A=="));
}
