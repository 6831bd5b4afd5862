// Fetching a key's newest build record (LOGS), shared by `logs` and `inspect`.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "kiln/client/client.hpp"
#include "kiln/protocol/messages.hpp"

namespace kiln::ctl {

// The key digest of `what`: the digest itself, or the daemon's digest of the key (a STAT
// fills node fields; a key not stored is not_found, since only a stored key has a digest
// we can be sure of).
Result<Digest> resolve_digest(client::Client& client, const client::Lookup& what);
// nullopt when no build of that key is recorded.
Result<std::optional<protocol::BuildLog>> fetch_build_log(client::Client& client, const Digest& key_digest);
nlohmann::json build_log_json(const protocol::BuildLog& log);

}  // namespace kiln::ctl
