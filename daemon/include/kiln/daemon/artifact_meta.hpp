// The store's record of an artifact as the wire protocol carries it. Shared by kilnd's
// handlers and the build service, which both answer with artifact metadata.
#pragma once

#include "kiln/protocol/messages.hpp"
#include "kiln/storage/store.hpp"

namespace kiln::daemon {

inline protocol::ArtifactMeta to_meta(const storage::ArtifactInfo& i) {
  protocol::ArtifactMeta m;
  m.key = i.key;
  m.key_digest = i.key_digest;
  m.blob_digest = i.blob_digest;
  m.size = i.size;
  m.stored_size = i.stored_size;
  m.created_at = i.created_at;
  m.last_access = i.last_access;
  m.hits = i.hits;
  m.build_seconds = i.build_seconds;
  m.pinned = i.pinned;
  m.origin = i.origin;
  return m;
}

}  // namespace kiln::daemon
