// Between the wire protocol's message structs and libkiln's public types.
#pragma once

#include "kiln/client/client.hpp"
#include "kiln/protocol/messages.hpp"

namespace kiln::client::detail {

protocol::KeyRef to_ref(const Lookup& what);
ArtifactInfo from_meta(protocol::ArtifactMeta&& meta);
Stats from_stats(protocol::StatsReply&& reply);
DaemonStatus from_status(protocol::StatusReply&& reply);

}  // namespace kiln::client::detail
