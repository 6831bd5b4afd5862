// [fleet] in kilnd.toml (daemon/fleet/options.cpp).
#include <doctest/doctest.h>

#include "kiln/fleet/options.hpp"

using namespace kiln;
using namespace kiln::fleet;

TEST_CASE("WithoutAFleetSectionThereIsNoFleet") {
  FleetConfig c;
  REQUIRE(apply_fleet_toml(c, "[builds]\nenabled = true\n", "t.toml").has_value());
  CHECK_FALSE(c.enabled());
  CHECK(c.require_signatures);
  CHECK(c.pull);
  CHECK(c.push);
}

TEST_CASE("FleetOptionsAreReadAndCheckedTogether") {
  FleetConfig c;
  auto st = apply_fleet_toml(c,
                             "[fleet]\nregistry = \"https://r:5000\"\nsigning_key_file = \"/k.pem\"\n"
                             "trusted_keys = [\"a:AAAA\"]\npush_retry_max_s = 7\n",
                             "t.toml");
  REQUIRE_MESSAGE(st.has_value(), (st ? "" : st.error().to_string()));
  CHECK(c.enabled());
  CHECK(c.push_retry_max.count() == 7);
  CHECK(c.trusted_keys.size() == 1);

  FleetConfig d;
  auto no_key = apply_fleet_toml(d, "[fleet]\nregistry = \"https://r\"\ntrusted_keys = [\"a:AAAA\"]\n", "t.toml");
  REQUIRE_FALSE(no_key.has_value());
  CHECK(no_key.error().message.find("signing_key_file") != std::string::npos);
  CHECK_FALSE(d.enabled());  // unchanged on error

  auto no_trust = apply_fleet_toml(d, "[fleet]\nregistry = \"https://r\"\npush = false\n", "t.toml");
  REQUIRE_FALSE(no_trust.has_value());
  CHECK(no_trust.error().message.find("trusted_keys") != std::string::npos);

  auto unknown = apply_fleet_toml(d, "[fleet]\nregistri = \"https://r\"\n", "t.toml");
  REQUIRE_FALSE(unknown.has_value());
  CHECK(unknown.error().message.find("fleet.registri: unknown option") != std::string::npos);
}
