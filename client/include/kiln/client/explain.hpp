// kiln/client/explain.hpp — why a key missed: the stored keys nearest to it and the fields
// that differ, and, for a model hash with no source, how to register one (DESIGN.md: "A
// miss must be explainable"). protocol.md, "EXPLAIN".
//
// EXPLAIN is composed by the client from requests every daemon answers (STATUS for the
// node fields a daemon would fill in, LIST by model hash, then by region, then the first
// page of everything, and LIST_SOURCES): it needs the read role only and works against
// any kilnd of protocol 1. Not thread-safe with other calls on the same Client.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "kiln/client/artifact.hpp"
#include "kiln/key.hpp"
#include "kiln/result.hpp"

namespace kiln::client {

class Client;

struct NearKey {
  ArtifactInfo artifact;
  std::vector<std::string> differing;  // key field names (key_field_names() order)
};

struct Explanation {
  Key key;                            // the key asked about, node fields filled as the daemon would
  std::optional<Digest> key_digest;   // nullopt when the key is incomplete or malformed
  std::string key_error;              // why there is no digest
  bool stored = false;                // the key itself is stored: a hit, not a miss
  std::vector<NearKey> nearest;       // fewest differing fields first, at most `limit`
  std::size_t candidates = 0;         // stored keys compared
  bool source_registered = false;     // a source is registered under key.model_hash
  std::string advice;                 // what to do next, one sentence ("" when stored)
};

// Ranks `stored` by how many key fields differ from `key` (ties: the order given), keeping
// at most `limit`. Pure; used by explain().
std::vector<NearKey> nearest_keys(const Key& key, const std::vector<ArtifactInfo>& stored, std::size_t limit);

// The explanation of `key` against the daemon `client` talks to. Errors: the daemon's
// (unavailable when it is gone, permission_denied without the read role).
Result<Explanation> explain(Client& client, const Key& key, std::size_t limit = 5);

// JSON form: {"key_digest":..,"stored":..,"nearest":[{"key_digest":..,"differing":[..],
// "key":{..}}],"candidates":..,"source_registered":..,"advice":".."}
std::string to_json(const Explanation& e);

}  // namespace kiln::client
