// kiln/daemon/submitted_key.hpp — what a build service answers for one key of a
// PREWARM_SUBMIT (or BUILD without wait) before any build: "invalid" (it has no digest),
// "present" (stored, and not forced), or "queued" (to build). The node's scheduler and the
// fleet's service in front of it answer alike through this.
#pragma once

#include <ctime>
#include <optional>

#include "kiln/key.hpp"
#include "kiln/protocol/messages.hpp"
#include "kiln/storage/store.hpp"

namespace kiln::daemon {

struct SubmittedKey {
  protocol::PrewarmResult result;                // state "invalid", "present" or "queued"
  std::optional<protocol::BuildState> state;     // valid keys: queued_at now; "done" when present
  std::optional<storage::ArtifactInfo> stored;   // present: what the store holds
};

// A store that cannot answer counts as "not stored": the build path finds out.
inline SubmittedKey submitted_key(const Key& key, bool force, storage::Store& store) {
  SubmittedKey s;
  auto d = key.digest();
  if (!d) {
    s.result.state = "invalid";
    s.result.error = d.error().message;
    return s;
  }
  s.result.key_digest = *d;
  protocol::BuildState& bs = s.state.emplace();
  bs.key_digest = *d;
  bs.queued_at = static_cast<std::int64_t>(std::time(nullptr));
  if (!force) {
    if (auto st = store.stat(*d); st && *st) s.stored = std::move(**st);
  }
  s.result.state = bs.state = s.stored ? "present" : "queued";
  if (s.stored) {
    bs.state = "done";
    bs.finished_at = bs.queued_at;
  }
  return s;
}

}  // namespace kiln::daemon
