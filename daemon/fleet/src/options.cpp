// [fleet] in kilnd.toml. See kiln/fleet/options.hpp.
#include "kiln/fleet/options.hpp"

#include <fstream>
#include <set>
#include <sstream>

#include <toml++/toml.h>

namespace kiln::fleet {

namespace {

Error bad(std::string_view origin, const std::string& option, const std::string& why) {
  return make_error(Errc::invalid_argument, std::string(origin) + ": fleet." + option + ": " + why);
}

Status read_bool(const toml::table& t, std::string_view origin, const char* name, bool& out) {
  const toml::node* n = t.get(name);
  if (!n) return {};
  if (!n->is_boolean()) return bad(origin, name, "expected true or false");
  out = *n->value<bool>();
  return {};
}

Status read_string(const toml::table& t, std::string_view origin, const char* name, std::string& out) {
  const toml::node* n = t.get(name);
  if (!n) return {};
  if (!n->is_string()) return bad(origin, name, "expected a string");
  out = *n->value<std::string>();
  return {};
}

Status read_path(const toml::table& t, std::string_view origin, const char* name, std::filesystem::path& out) {
  std::string s;
  KILN_TRY(read_string(t, origin, name, s));
  if (t.get(name)) out = s;
  return {};
}

Status read_seconds(const toml::table& t, std::string_view origin, const char* name, long long lo, long long hi,
                    long long& out) {
  const toml::node* n = t.get(name);
  if (!n) return {};
  auto v = n->value<long long>();
  if (!n->is_integer() || !v || *v < lo || *v > hi) {
    return bad(origin, name, "expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
  }
  out = *v;
  return {};
}

Status apply_table(FleetConfig& c, const toml::table& f, std::string_view origin) {
  static const std::set<std::string> known{
      "registry",         "repository",       "basic_auth_file",  "token_file",        "ca_file",
      "client_cert_file", "client_key_file",  "pull",             "push",              "signing_key_file",
      "signing_key_name", "trusted_keys",     "require_signatures", "connect_timeout_s", "io_timeout_s",
      "push_retry_min_s", "push_retry_max_s", "pull_threads", "coordinator", "coordinator_prefix", "node_name",
      "lease_ttl_s",      "coordinator_timeout_ms", "poll_max_ms", "hedge_factor", "expected_build_s"};
  for (auto&& [k, v] : f) {
    (void)v;
    if (!known.count(std::string(k.str()))) return bad(origin, std::string(k.str()), "unknown option");
  }
  KILN_TRY(read_string(f, origin, "registry", c.registry));
  KILN_TRY(read_string(f, origin, "repository", c.repository));
  KILN_TRY(read_path(f, origin, "basic_auth_file", c.basic_auth_file));
  KILN_TRY(read_path(f, origin, "token_file", c.token_file));
  KILN_TRY(read_path(f, origin, "ca_file", c.ca_file));
  KILN_TRY(read_path(f, origin, "client_cert_file", c.client_cert_file));
  KILN_TRY(read_path(f, origin, "client_key_file", c.client_key_file));
  KILN_TRY(read_bool(f, origin, "pull", c.pull));
  KILN_TRY(read_bool(f, origin, "push", c.push));
  KILN_TRY(read_path(f, origin, "signing_key_file", c.signing_key_file));
  KILN_TRY(read_string(f, origin, "signing_key_name", c.signing_key_name));
  KILN_TRY(read_bool(f, origin, "require_signatures", c.require_signatures));
  if (const toml::node* n = f.get("trusted_keys")) {
    const toml::array* a = n->as_array();
    if (!a) return bad(origin, "trusted_keys", "expected an array of \"name:base64\" strings");
    std::vector<std::string> keys;
    for (const auto& e : *a) {
      if (!e.is_string()) return bad(origin, "trusted_keys", "every element must be a string");
      keys.push_back(*e.value<std::string>());
    }
    c.trusted_keys = std::move(keys);
  }
  if (const toml::node* n = f.get("coordinator")) {
    const toml::array* a = n->as_array();
    if (!a) return bad(origin, "coordinator", "expected an array of etcd endpoints, e.g. [\"http://10.0.0.5:2379\"]");
    std::vector<std::string> eps;
    for (const auto& e : *a) {
      if (!e.is_string()) return bad(origin, "coordinator", "every element must be a string");
      const std::string ep = *e.value<std::string>();
      const std::string rest = ep.starts_with("http://") ? ep.substr(7) : std::string();
      if (rest.empty() || rest.find('/') != std::string::npos || rest.find('@') != std::string::npos ||
          rest.find(':') == std::string::npos) {
        return bad(origin, "coordinator", "'" + ep.substr(0, 200) + "' is not \"http://host:port\"");
      }
      eps.push_back(ep);
    }
    c.coordinator = std::move(eps);
  }
  KILN_TRY(read_string(f, origin, "coordinator_prefix", c.coordinator_prefix));
  KILN_TRY(read_string(f, origin, "node_name", c.node_name));
  if (c.coordinator_prefix.empty() || c.coordinator_prefix.find_first_of(" \t\n") != std::string::npos) {
    return bad(origin, "coordinator_prefix", "expected a non-empty key prefix without spaces");
  }
  if (c.node_name.size() > 128 || c.node_name.find_first_of("\n\"") != std::string::npos) {
    return bad(origin, "node_name", "expected at most 128 characters, no quotes or newlines");
  }
  long long ttl = c.lease_ttl.count(), ctimeout = c.coordinator_timeout.count(), pmax = c.poll_max.count();
  long long expected = c.expected_build.count();
  KILN_TRY(read_seconds(f, origin, "lease_ttl_s", 2, 3600, ttl));
  KILN_TRY(read_seconds(f, origin, "coordinator_timeout_ms", 50, 60'000, ctimeout));
  KILN_TRY(read_seconds(f, origin, "poll_max_ms", 50, 60'000, pmax));
  KILN_TRY(read_seconds(f, origin, "expected_build_s", 1, 7 * 24 * 3600, expected));
  if (const toml::node* n = f.get("hedge_factor")) {
    auto v = n->value<double>();
    if (!(n->is_floating_point() || n->is_integer()) || !v || *v < 0 || *v > 1000) {
      return bad(origin, "hedge_factor", "expected a number from 0 (never hedge) to 1000");
    }
    c.hedge_factor = *v;
  }
  c.lease_ttl = std::chrono::seconds(ttl);
  c.coordinator_timeout = std::chrono::milliseconds(ctimeout);
  c.poll_max = std::chrono::milliseconds(pmax);
  c.expected_build = std::chrono::seconds(expected);
  long long connect = c.connect_timeout.count() / 1000, io = c.io_timeout.count() / 1000;
  long long rmin = c.push_retry_min.count(), rmax = c.push_retry_max.count(), threads = c.pull_threads;
  KILN_TRY(read_seconds(f, origin, "connect_timeout_s", 1, 600, connect));
  KILN_TRY(read_seconds(f, origin, "io_timeout_s", 1, 3600, io));
  KILN_TRY(read_seconds(f, origin, "push_retry_min_s", 1, 3600, rmin));
  KILN_TRY(read_seconds(f, origin, "push_retry_max_s", 1, 24 * 3600, rmax));
  KILN_TRY(read_seconds(f, origin, "pull_threads", 1, 64, threads));
  if (rmax < rmin) return bad(origin, "push_retry_max_s", "must be at least push_retry_min_s");
  c.connect_timeout = std::chrono::seconds(connect);
  c.io_timeout = std::chrono::seconds(io);
  c.push_retry_min = std::chrono::seconds(rmin);
  c.push_retry_max = std::chrono::seconds(rmax);
  c.pull_threads = static_cast<unsigned>(threads);
  if (!c.enabled()) {
    if (!c.coordinator.empty()) return bad(origin, "coordinator", "needs a registry: waiters pull the holder's build from it");
    return {};
  }
  if (!c.coordinator.empty() && (!c.push || !c.pull)) {
    return bad(origin, "coordinator",
               "needs push = true and pull = true: a node that claims a key shares what it builds, and one that "
               "waits for another node takes its build from the registry");
  }
  if (!c.basic_auth_file.empty() && !c.token_file.empty()) {
    return bad(origin, "token_file", "give basic_auth_file or token_file, not both");
  }
  if (c.client_cert_file.empty() != c.client_key_file.empty()) {
    return bad(origin, "client_key_file", "client_cert_file and client_key_file go together");
  }
  if (c.push && c.signing_key_file.empty()) {
    return bad(origin, "signing_key_file", "push = true needs a signing key (kilnctl keygen NAME), or set push = false");
  }
  if (c.pull && c.require_signatures && c.trusted_keys.empty() && c.signing_key_file.empty()) {
    return bad(origin, "trusted_keys", "pull = true with require_signatures needs at least one trusted key");
  }
  return {};
}

}  // namespace

Status apply_fleet_toml(FleetConfig& config, std::string_view toml_text, std::string_view origin) {
  toml::table root;
  try {
    root = toml::parse(toml_text, origin);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << origin << ":" << e.source().begin.line << ":" << e.source().begin.column << ": " << e.description();
    return make_error(Errc::invalid_argument, os.str());
  }
  const toml::node* f = root.get("fleet");
  if (!f) return {};
  if (!f->is_table()) return make_error(Errc::invalid_argument, std::string(origin) + ": fleet: expected a table");
  FleetConfig copy = config;
  KILN_TRY(apply_table(copy, *f->as_table(), origin));
  config = std::move(copy);
  return {};
}

Status apply_fleet_toml_file(FleetConfig& config, const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return make_error(Errc::io_error, "cannot read " + file.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return apply_fleet_toml(config, ss.str(), file.string());
}

}  // namespace kiln::fleet
