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

TEST_CASE("AnIdentityTokenFileIsReadAndIsOneCredentialAmongThree") {
  const std::string base = "[fleet]\nregistry = \"https://r\"\npush = false\ntrusted_keys = [\"a:AAAA\"]\n";
  FleetConfig c;
  auto st = apply_fleet_toml(c, base + "identity_token_file = \"/etc/kiln/identity\"\n", "t.toml");
  REQUIRE_MESSAGE(st.has_value(), (st ? "" : st.error().to_string()));
  CHECK(c.identity_token_file == "/etc/kiln/identity");
  FleetConfig d;
  auto both = apply_fleet_toml(d, base + "identity_token_file = \"/i\"\nbasic_auth_file = \"/b\"\n", "t.toml");
  REQUIRE_FALSE(both.has_value());
  CHECK(both.error().message.find("fleet.identity_token_file") != std::string::npos);
  CHECK(both.error().message.find("give one of basic_auth_file, token_file and identity_token_file") != std::string::npos);
}

TEST_CASE("CoordinatorOptionsAreReadWithTheirDefaultsAndBadOnesNameTheOption") {
  FleetConfig defaults;
  CHECK(defaults.coordinator.empty());
  CHECK(defaults.coordinator_prefix == "kiln");
  CHECK(defaults.lease_ttl.count() == 10);
  CHECK(defaults.coordinator_timeout.count() == 1000);
  CHECK(defaults.hedge_factor == 4);

  const std::string base = "[fleet]\nregistry = \"https://r:5000\"\nsigning_key_file = \"/k.pem\"\n";
  FleetConfig c;
  auto st = apply_fleet_toml(c,
                             base + "coordinator = [\"http://10.0.0.5:2379\", \"http://10.0.0.6:2379\"]\n"
                                    "node_name = \"gpu-17\"\nlease_ttl_s = 5\ncoordinator_timeout_ms = 250\n"
                                    "poll_max_ms = 500\nhedge_factor = 2.5\nexpected_build_s = 60\n"
                                    "coordinator_prefix = \"team/kiln\"\n",
                             "t.toml");
  REQUIRE_MESSAGE(st.has_value(), (st ? "" : st.error().to_string()));
  CHECK(c.coordinator.size() == 2);
  CHECK(c.node_name == "gpu-17");
  CHECK(c.lease_ttl.count() == 5);
  CHECK(c.coordinator_timeout.count() == 250);
  CHECK(c.poll_max.count() == 500);
  CHECK(c.hedge_factor == 2.5);
  CHECK(c.expected_build.count() == 60);
  CHECK(c.coordinator_prefix == "team/kiln");

  struct Bad {
    std::string text, says;
  };
  for (const Bad& b : std::vector<Bad>{
           {base + "coordinator = \"http://h:2379\"\n", "fleet.coordinator"},
           {base + "coordinator = [\"https://h:2379\"]\n", "fleet.coordinator"},
           {base + "coordinator = [\"http://h:2379/v3\"]\n", "fleet.coordinator"},
           {base + "coordinator = [\"http://h:2379\"]\npush = false\ntrusted_keys = [\"a:AAAA\"]\n", "push = true"},
           {base + "coordinator = [\"http://h:2379\"]\npull = false\n", "pull = true"},
           {"[fleet]\ncoordinator = [\"http://h:2379\"]\n", "needs a registry"},
           {base + "lease_ttl_s = 1\n", "fleet.lease_ttl_s"},
           {base + "hedge_factor = -1\n", "fleet.hedge_factor"},
           {base + "coordinator_timeout_ms = 0\n", "fleet.coordinator_timeout_ms"},
           {base + "repository = \"Kiln\"\n", "fleet.repository"},
           {"[fleet]\nregistry = \"https://r:5000/v2\"\nsigning_key_file = \"/k.pem\"\n", "fleet.registry"},
           {"[fleet]\nregistry = \"https://user:secret@r:5000\"\nsigning_key_file = \"/k.pem\"\n", "fleet.registry"},
       }) {
    CAPTURE(b.text);
    FleetConfig d;
    auto r = apply_fleet_toml(d, b.text, "t.toml");
    REQUIRE_FALSE(r.has_value());
    CHECK_MESSAGE(r.error().message.find(b.says) != std::string::npos, r.error().message);
    CHECK(r.error().message.find("secret") == std::string::npos);  // never a credential
  }
}
