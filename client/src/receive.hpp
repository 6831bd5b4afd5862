// Receiving the bytes a reply hands over (GET_SOURCE): the descriptor that came with the
// reply frame, or the CHUNK stream that follows it, filled into a sealed memfd of our own
// so callers see one shape. Internal.
#pragma once

#include <cstdint>
#include <string>

#include "fd.hpp"
#include "kiln/protocol/messages.hpp"
#include "session.hpp"

namespace kiln::client::detail {

// `first` is the OK frame of request `id`, already decoded as announcing `delivery` and
// `size` bytes of `what` (for messages: "source <hash>"). Descriptor: checks it is there
// and holds exactly `size` bytes (corrupt if not). Stream: reads CHUNK frames to END,
// refusing more or fewer than `size` bytes (protocol_error; the connection is dropped).
// An ERROR frame in the stream is returned as its error.
Result<UniqueFd> receive_bytes(Session& session, std::uint32_t id, Received& first, protocol::Delivery delivery,
                               std::uint64_t size, const std::string& what);

}  // namespace kiln::client::detail
