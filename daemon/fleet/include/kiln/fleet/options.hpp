// kiln/fleet/options.hpp — [fleet] in kilnd.toml: the registry the node shares artifacts
// through, its credentials, and whom the node trusts. Without [fleet] (registry unset) the
// node shares nothing and behaves as a lone kilnd. ops/kilnd.toml documents every option.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/result.hpp"

namespace kiln::fleet {

struct FleetConfig {
  std::string registry;                     // "https://host:port"; "" = no fleet
  std::string repository = "kiln";
  std::filesystem::path basic_auth_file;    // "user:password"; "" = none
  std::filesystem::path token_file;         // a bearer token; "" = none
  // A refresh token (Docker's identity token) exchanged for the registry's tokens
  // (kiln/fleet/registry_auth.hpp); "" = none. At most one of the three files.
  std::filesystem::path identity_token_file;
  std::filesystem::path ca_file;            // "" = the system's trust store
  std::filesystem::path client_cert_file;   // mTLS; "" = none
  std::filesystem::path client_key_file;
  bool pull = true;                         // a miss looks in the registry before building
  bool push = true;                         // what this node builds is signed and pushed
  std::filesystem::path signing_key_file;   // PEM ed25519; required when push = true
  std::string signing_key_name;             // "" = the key file's stem
  std::vector<std::string> trusted_keys;    // "name:base64"; the node's own key is trusted too
  bool require_signatures = true;           // refuse anything from the registry not signed by a trusted key
  std::chrono::milliseconds connect_timeout{10'000};
  std::chrono::milliseconds io_timeout{30'000};
  // A miss's whole registry lookup (manifest, signature, config, layer), from the miss's
  // arrival: past it the miss is answered as a miss and the lookup ends. 10 s: well inside
  // a serving client's patience, and 2.5 MB weight-free packages need 250 KB/s.
  std::chrono::milliseconds pull_timeout{10'000};
  std::chrono::seconds push_retry_min{1};   // backoff after a failed push, doubling...
  std::chrono::seconds push_retry_max{300}; // ...up to this
  unsigned pull_threads = 4;                // pulls at once

  // One build per key across the fleet (schema/etcd-coordination.md): etcd endpoints
  // ("http://host:port", members of one cluster). Empty = each node builds what it lacks
  // (single flight per node only). Needs push and pull: a claimed key is shared through the
  // registry, and waiters take it from there.
  std::vector<std::string> coordinator;
  std::string coordinator_prefix = "kiln";  // etcd keys under "<prefix>/claim/", "<prefix>/failed/"
  std::string node_name;                    // this node in claims; "" = the host name
  std::chrono::seconds lease_ttl{10};       // a holder cut off this long loses its claims
  std::chrono::milliseconds coordinator_timeout{1000};  // each etcd request; never blocks longer
  std::chrono::milliseconds poll_max{1000}; // a waiter looks again at most this far apart
  // A waiter builds too (hedges) once the holder has run this many times the key's
  // expected build time; 0 = never.
  double hedge_factor = 4;
  // A key's expected build time when this node knows none for its model and region.
  std::chrono::seconds expected_build{600};

  bool enabled() const { return !registry.empty(); }
};

// Reads [fleet] from a kilnd.toml (text or file) over `config`; on error `config` is
// unchanged. invalid_argument names the file and the option (never a credential);
// io_error when the file is unreadable.
Status apply_fleet_toml(FleetConfig& config, std::string_view toml_text, std::string_view origin);
Status apply_fleet_toml_file(FleetConfig& config, const std::filesystem::path& file);

}  // namespace kiln::fleet
