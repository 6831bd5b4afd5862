// Signatures: keys, trust list, payload binding (daemon/fleet/signature.cpp).
#include <doctest/doctest.h>

#include "kiln/fleet/http_client.hpp"
#include "kiln/fleet/signature.hpp"

using namespace kiln;
using namespace kiln::fleet;

namespace {
std::span<const std::byte> bytes_of(const std::vector<std::byte>& v) { return v; }
}  // namespace

TEST_CASE("ASignatureVerifiesOnlyForItsPayloadAndKey") {
  auto a = SigningKey::generate("builder-a");
  auto b = SigningKey::generate("builder-b");
  REQUIRE(a.has_value());
  REQUIRE(b.has_value());
  const Digest manifest = sha256(std::string_view("manifest"));
  const std::string payload = make_payload("kiln", manifest, "artifact:" + std::string(64, 'a'), "builder-a");
  auto sig = a->sign(payload);
  REQUIRE(sig.has_value());
  CHECK(sig->size() == 64);
  CHECK(verify_signature(a->public_key(), payload, bytes_of(*sig)));
  CHECK_FALSE(verify_signature(b->public_key(), payload, bytes_of(*sig)));
  std::string altered = payload;
  altered[altered.size() / 2] ^= 1;
  CHECK_FALSE(verify_signature(a->public_key(), altered, bytes_of(*sig)));

  auto fields = parse_payload(payload);
  REQUIRE(fields.has_value());
  CHECK(fields->manifest_digest == manifest);
  CHECK(fields->subject == "artifact:" + std::string(64, 'a'));
  CHECK(fields->signer == "builder-a");
}

TEST_CASE("TrustListEntriesAreNameColonBase64AndRoundTrip") {
  auto a = SigningKey::generate("builder-a");
  REQUIRE(a.has_value());
  const std::string entry = a->public_key().to_string();
  CHECK(entry.rfind("builder-a:", 0) == 0);
  auto parsed = PublicKey::parse(entry);
  REQUIRE(parsed.has_value());
  CHECK(parsed->raw == a->public_key().raw);
  CHECK(TrustList::parse({entry}).has_value());
  CHECK_FALSE(TrustList::parse({entry, entry}).has_value());       // a name twice
  CHECK_FALSE(PublicKey::parse("no-colon").has_value());
  CHECK_FALSE(PublicKey::parse("bad name:AAAA").has_value());
  CHECK_FALSE(PublicKey::parse("short:AAAA").has_value());
  CHECK(a->public_key().to_pem().find("BEGIN PUBLIC KEY") != std::string::npos);
}

TEST_CASE("PayloadsThatAreNotKilnsAreCorrupt") {
  CHECK(parse_payload("not json").error().code == Errc::corrupt);
  CHECK(parse_payload("{}").error().code == Errc::corrupt);
  CHECK(parse_payload(R"({"critical":{"type":"x","image":{}},"optional":{}})").error().code == Errc::corrupt);
}

