// Request handlers: what each message of schema/protocol.md does. Internal.
#pragma once

#include <boost/asio/awaitable.hpp>

#include "connection.hpp"
#include "upload.hpp"

namespace kiln::daemon {

// HELLO: version negotiation. Returns the reply body, or an error (the caller closes).
Result<std::string> handle_hello(Connection& c, const Request& r, std::uint32_t& client_max_frame);

// Every request type except HELLO, PUT and PUT_SOURCE (and chunks).
asio::awaitable<Outcome> handle_request(Connection& c, const Request& r);

// PUT / PUT_SOURCE header: decodes, checks the key; the caller opens the store stream.
Result<Upload> prepare_upload(Connection& c, const Request& r);
// After END: checks size and digest, commits, replies.
asio::awaitable<Outcome> commit_upload(Connection& c, std::uint32_t id, Upload upload);

// A key ref's digest, node fields filled from this node first ("this node").
Result<Digest> resolve_key(ServerState& s, Key& key);

}  // namespace kiln::daemon
