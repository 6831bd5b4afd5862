// [fleet] in kilnd.toml. See kiln/fleet/options.hpp.
#include "kiln/fleet/options.hpp"

#include "kiln/fleet/http_client.hpp"
#include "kiln/fleet/registry_client.hpp"
#include "kiln/toml/options.hpp"

namespace kiln::fleet {

namespace {

Status apply_table(FleetConfig& c, const toml_options::Table& f) {
  KILN_TRY(f.only({"registry", "repository", "basic_auth_file", "token_file", "identity_token_file", "ca_file", "client_cert_file",
                   "client_key_file", "pull", "push", "signing_key_file", "signing_key_name", "trusted_keys",
                   "require_signatures", "connect_timeout_s", "io_timeout_s", "pull_timeout_s", "push_retry_min_s", "push_retry_max_s",
                   "pull_threads", "coordinator", "coordinator_prefix", "node_name", "lease_ttl_s",
                   "coordinator_timeout_ms", "poll_max_ms", "hedge_factor", "expected_build_s"}));
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  KILN_TRY(f.string("registry", c.registry));
  KILN_TRY(f.string("repository", c.repository));
  KILN_TRY(f.path("basic_auth_file", c.basic_auth_file));
  KILN_TRY(f.path("token_file", c.token_file));
  KILN_TRY(f.path("identity_token_file", c.identity_token_file));
  KILN_TRY(f.path("ca_file", c.ca_file));
  KILN_TRY(f.path("client_cert_file", c.client_cert_file));
  KILN_TRY(f.path("client_key_file", c.client_key_file));
  KILN_TRY(f.boolean("pull", c.pull));
  KILN_TRY(f.boolean("push", c.push));
  KILN_TRY(f.path("signing_key_file", c.signing_key_file));
  KILN_TRY(f.string("signing_key_name", c.signing_key_name));
  KILN_TRY(f.boolean("require_signatures", c.require_signatures));
  KILN_TRY(f.strings("trusted_keys", c.trusted_keys, {.expected = "an array of \"name:base64\" strings"}));
  std::vector<std::string> eps = c.coordinator;
  KILN_TRY(f.strings("coordinator", eps, {.expected = "an array of etcd endpoints, e.g. [\"http://10.0.0.5:2379\"]"}));
  for (const std::string& ep : eps) {
    const std::string rest = ep.starts_with("http://") ? ep.substr(7) : std::string();
    if (rest.empty() || rest.find('/') != std::string::npos || rest.find('@') != std::string::npos ||
        rest.find(':') == std::string::npos) {
      return f.error("coordinator", "'" + ep.substr(0, 200) + "' is not \"http://host:port\"");
    }
  }
  c.coordinator = std::move(eps);
  KILN_TRY(f.string("coordinator_prefix", c.coordinator_prefix));
  KILN_TRY(f.string("node_name", c.node_name));
  if (c.coordinator_prefix.empty() || c.coordinator_prefix.find_first_of(" \t\n") != std::string::npos) {
    return f.error("coordinator_prefix", "expected a non-empty key prefix without spaces");
  }
  if (c.node_name.size() > 128 || c.node_name.find_first_of("\n\"") != std::string::npos) {
    return f.error("node_name", "expected at most 128 characters, no quotes or newlines");
  }
  KILN_TRY(f.duration("lease_ttl_s", c.lease_ttl, seconds(2), seconds(3600)));
  KILN_TRY(f.duration("coordinator_timeout_ms", c.coordinator_timeout, milliseconds(50), milliseconds(60'000)));
  KILN_TRY(f.duration("poll_max_ms", c.poll_max, milliseconds(50), milliseconds(60'000)));
  KILN_TRY(f.duration("expected_build_s", c.expected_build, seconds(1), seconds(7 * 24 * 3600)));
  KILN_TRY(f.number("hedge_factor", c.hedge_factor, 0, 1000));  // 0: never hedge
  KILN_TRY(f.duration("connect_timeout_s", c.connect_timeout, seconds(1), seconds(600)));
  KILN_TRY(f.duration("io_timeout_s", c.io_timeout, seconds(1), seconds(3600)));
  KILN_TRY(f.duration("pull_timeout_s", c.pull_timeout, seconds(1), seconds(3600)));
  KILN_TRY(f.duration("push_retry_min_s", c.push_retry_min, seconds(1), seconds(3600)));
  KILN_TRY(f.duration("push_retry_max_s", c.push_retry_max, seconds(1), seconds(24 * 3600)));
  KILN_TRY(f.integer("pull_threads", c.pull_threads, 1, 64));
  if (c.push_retry_max < c.push_retry_min) return f.error("push_retry_max_s", "must be at least push_retry_min_s");
  // What the fleet tier would refuse at start, refused here (and so by --check-config).
  if (c.enabled()) {
    if (auto st = check_base_url(c.registry); !st) return f.error("registry", st.error().message);
    if (!valid_repository(c.repository)) {
      return f.error("repository", "'" + c.repository.substr(0, 200) +
                                       "' is not a valid repository name: lowercase letters and digits, "
                                       "parts joined by one . _ - or /");
    }
  }
  if (!c.enabled()) {
    if (!c.coordinator.empty()) return f.error("coordinator", "needs a registry: waiters pull the holder's build from it");
    return {};
  }
  if (!c.coordinator.empty() && (!c.push || !c.pull)) {
    return f.error("coordinator",
               "needs push = true and pull = true: a node that claims a key shares what it builds, and one that "
               "waits for another node takes its build from the registry");
  }
  if (!c.basic_auth_file.empty() + !c.token_file.empty() + !c.identity_token_file.empty() > 1) {
    return f.error(c.identity_token_file.empty() ? "token_file" : "identity_token_file",
                   "give one of basic_auth_file, token_file and identity_token_file");
  }
  if (c.client_cert_file.empty() != c.client_key_file.empty()) {
    return f.error("client_key_file", "client_cert_file and client_key_file go together");
  }
  if (c.push && c.signing_key_file.empty()) {
    return f.error("signing_key_file", "push = true needs a signing key (kilnctl keygen NAME), or set push = false");
  }
  if (c.pull && c.require_signatures && c.trusted_keys.empty() && c.signing_key_file.empty()) {
    return f.error("trusted_keys", "pull = true with require_signatures needs at least one trusted key");
  }
  return {};
}

}  // namespace

Status apply_fleet_toml(FleetConfig& config, std::string_view toml_text, std::string_view origin) {
  FleetConfig copy = config;
  KILN_TRY(toml_options::read_section(toml_text, origin, "fleet",
                                      [&](const toml_options::Table& f) { return apply_table(copy, f); }));
  config = std::move(copy);
  return {};
}

Status apply_fleet_toml_file(FleetConfig& config, const std::filesystem::path& file) {
  auto text = toml_options::read_text(file);
  if (!text) return std::move(text).error();
  return apply_fleet_toml(config, *text, file.string());
}

}  // namespace kiln::fleet
