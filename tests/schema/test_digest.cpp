#include <doctest/doctest.h>

#include "kiln/digest.hpp"

TEST_CASE("sha256 of a known string matches the published vector") {
  CHECK(kiln::sha256(std::string_view("abc")).hex() ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("streamed sha256 equals one-shot sha256") {
  kiln::Sha256 h;
  h.update(std::string_view("ab"));
  h.update(std::string_view("c"));
  CHECK(h.finish() == kiln::sha256(std::string_view("abc")));
}

TEST_CASE("digest hex round-trips and rejects bad input") {
  auto d = kiln::sha256(std::string_view("kiln"));
  auto back = kiln::Digest::from_hex(d.hex());
  REQUIRE(back);
  CHECK(*back == d);
  CHECK_FALSE(kiln::Digest::from_hex("abc"));
  CHECK(kiln::Digest::from_hex(std::string(64, 'g')).error().code == kiln::Errc::invalid_argument);
}
