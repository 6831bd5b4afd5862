// kiln/client/json.hpp — JSON renderings of libkiln's results, for kilnctl --json and the
// C API. Objects use the wire protocol's field names (schema/protocol.md): keys as
// their JSON form, digests as 64 lowercase hex characters. Reentrant.
#pragma once

#include <string>

#include "kiln/client/artifact.hpp"
#include "kiln/client/client.hpp"

namespace kiln::client {

// {"key":{...},"key_digest":"..","blob_digest":"..","size":..,"stored_size":..,
//  "created_at":..,"last_access":..,"hits":..,"build_seconds":..,"pinned":..}
std::string to_json(const ArtifactInfo& info);
// {"items":[info...],"next_offset":N} (next_offset absent on the last page)
std::string to_json(const ListPage& page);
// {"store":{...},"daemon":{...}}
std::string to_json(const Stats& stats);
// {"server":..,"version":..,"pid":..,"uptime_s":..,"socket":..,"store":..,"node":{..},
//  "roles":[..],"capabilities":[..],"metrics":..,"draining":..,
//  "gpus":[{"index","name","arch","memory_bytes","uuid"}..],"gpu_note":.. (when no GPU),
//  "build_slots":[{"name","gpu_arch","gpu_name","running","queued"}..],
//  "can_build":bool,"builds_unavailable":.. (why not, when not),"builds_probing":true (while it probes),
//  "torch_cache":{"socket":..,"listen":..} (when served)}
std::string to_json(const DaemonStatus& status);
// {"model_hash":..,"blob_digest":..,"size":..,"stored_size":..,"created_at":..,"name":..}
std::string to_json(const SourceInfo& source);
// {"items":[source...],"next_offset":N} (next_offset absent on the last page)
std::string to_json(const SourcePage& page);

}  // namespace kiln::client
