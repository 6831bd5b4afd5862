// EXPLAIN, composed from STATUS, LIST and LIST_SOURCES. See kiln/client/explain.hpp.
#include "kiln/client/explain.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "kiln/client/client.hpp"
#include "kiln/client/json.hpp"

namespace kiln::client {

namespace {

// The first page of stored keys matching `filters` (enough to find near keys).
Result<std::vector<ArtifactInfo>> first_page(Client& client, std::map<std::string, std::string> filters) {
  ListQuery q;
  q.filters = std::move(filters);
  q.limit = 1000;
  auto page = client.list(q);
  if (!page) return std::move(page).error();
  return std::move(page->entries);
}

}  // namespace

std::vector<NearKey> nearest_keys(const Key& key, const std::vector<ArtifactInfo>& stored, std::size_t limit) {
  std::vector<NearKey> out;
  out.reserve(stored.size());
  for (const auto& a : stored) out.push_back(NearKey{a, differing_fields(key, a.key)});
  std::stable_sort(out.begin(), out.end(),
                   [](const NearKey& x, const NearKey& y) { return x.differing.size() < y.differing.size(); });
  if (out.size() > limit) out.resize(limit);
  return out;
}

Result<Explanation> explain(Client& client, const Key& key, std::size_t limit) {
  Explanation e;
  e.key = key;
  // Empty node fields are what the daemon fills from its node: compare as it would.
  auto status = client.status();
  if (!status) return std::move(status).error();
  fill_node_fields(e.key, node_fields_from(status->node));
  auto digest = e.key.digest();
  if (digest) e.key_digest = *digest;
  else e.key_error = digest.error().message;

  // Nearest first by model hash (same block), else region, else anything stored.
  std::vector<ArtifactInfo> pool;
  for (auto filters : {std::map<std::string, std::string>{{"model_hash", e.key.model_hash}},
                       std::map<std::string, std::string>{{"region", e.key.region}},
                       std::map<std::string, std::string>{}}) {
    auto page = first_page(client, std::move(filters));
    if (!page) return std::move(page).error();
    pool = std::move(*page);
    if (!pool.empty()) break;
  }
  e.candidates = pool.size();
  e.nearest = nearest_keys(e.key, pool, limit);
  e.stored = e.key_digest && std::any_of(pool.begin(), pool.end(), [&](const ArtifactInfo& a) {
               return a.key_digest == *e.key_digest;
             });

  SourceQuery sq;
  sq.model_hash_prefix = e.key.model_hash.size() == 64 ? e.key.model_hash : std::string();
  if (!sq.model_hash_prefix.empty()) {
    auto sources = client.list_sources(sq);
    if (!sources) return std::move(sources).error();
    e.source_registered = !sources->sources.empty();
  }
  if (e.stored) {
    e.advice = "";
  } else if (!e.key_digest) {
    e.advice = "the key is not complete or not valid: " + e.key_error;
  } else if (!e.source_registered) {
    e.advice = "no source is registered for model hash " + e.key.model_hash +
               ": export the block as the model calls it, then kilnctl source add FILE (its model hash must be "
               "this one; python3 ops/workers/kiln_worker hash FILE prints it), and build the key";
  } else if (!e.nearest.empty()) {
    std::string fields;
    for (const auto& f : e.nearest.front().differing) fields += (fields.empty() ? "" : ", ") + f;
    e.advice = "not stored; the nearest stored key differs in " + fields +
               "; a build from the registered source makes it (kilnctl build, or get with on_miss build)";
  } else {
    e.advice = "not stored and nothing near it is; a build from the registered source makes it (kilnctl build)";
  }
  return e;
}

std::string to_json(const Explanation& e) {
  nlohmann::json j;
  j["key"] = nlohmann::json::parse(e.key.to_json(), nullptr, false);
  j["key_digest"] = e.key_digest ? nlohmann::json(e.key_digest->hex()) : nlohmann::json(nullptr);
  if (!e.key_error.empty()) j["key_error"] = e.key_error;
  j["stored"] = e.stored;
  j["candidates"] = e.candidates;
  j["source_registered"] = e.source_registered;
  j["advice"] = e.advice;
  j["nearest"] = nlohmann::json::array();
  for (const auto& n : e.nearest) {
    j["nearest"].push_back({{"key_digest", n.artifact.key_digest.hex()},
                            {"differing", n.differing},
                            {"key", nlohmann::json::parse(n.artifact.key.to_json(), nullptr, false)}});
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kiln::client
