// kiln/torch_cache/torch_key.hpp — torch.compile's cache keys as kiln keys
// (schema/torch-cache.md).
//
// torch names an entry `pt2:<cache id>::<key>:c1` (torch/_inductor/remote_cache.py). kiln
// stores it as an artifact of kind torch_cache whose key is made from those bytes alone:
// the same torch key gives the same kiln key digest on every node, whoever asks. torch's
// own key already covers the toolchain, GPU and options it depends on, so kiln adds none
// (the node fields hold "-").
//
// Thread safety: plain functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "kiln/digest.hpp"
#include "kiln/key.hpp"
#include "kiln/result.hpp"

namespace kiln::torch_cache {

// Longest key accepted (torch's are under 200 bytes; Redis allows far more).
inline constexpr std::size_t kMaxKeyBytes = 16u << 10;

// How a SET meets an entry that is already stored.
enum class Overwrite {
  // Content-addressed by torch (FX graph, AOTAutograd: the key hashes the graph and
  // everything it depends on): the stored entry stays, a second SET is acknowledged and
  // dropped, so a hit never changes under a reader.
  never,
  // Rewritten by torch as it learns (Dynamo PGO profiles, autotune best configs, and
  // anything kiln does not recognise): the last writer wins.
  last_writer_wins,
};

struct TorchKey {
  std::string text;      // the key as the client sent it
  std::string cache_id;  // "fx-graph-v1", "dynamo-pgo", ...; "" when not torch's form
  Overwrite overwrite = Overwrite::last_writer_wins;
  // Whose entry this is (schema/torch-cache.md, "Who reads whose entries"): "" for the
  // shared entries (written by trusted writers, or pulled signed from the fleet), which
  // every reader may load; otherwise one writer's own, e.g. "uid:1000", which only that
  // writer loads. Part of the key: each writer's entries are separate artifacts.
  std::string writer;
  Digest digest;         // kiln_key().digest(), computed without building the Key (a GET's hot path)
  // The kiln key: kind torch_cache, see schema/torch-cache.md.
  Key kiln_key() const;
};

// The writer's own entry of the same torch key; `writer` "" gives the shared one.
TorchKey with_writer(const TorchKey& key, std::string writer);

// The cache id of a key of torch's form `pt2:<cache id>::...`, or "" for any other key.
std::string_view cache_id_of(std::string_view redis_key);
// Overwrite::never for the FX graph ("fx-graph-*") and AOTAutograd ("autograd-*") caches.
Overwrite overwrite_of(std::string_view cache_id);

// The kiln key of a Redis key, in the shared namespace (writer ""). invalid_argument when
// it is empty or longer than kMaxKeyBytes. Any bytes are accepted: a key that is not
// printable UTF-8 is recorded in hex.
Result<TorchKey> map_torch_key(std::string_view redis_key);

}  // namespace kiln::torch_cache
