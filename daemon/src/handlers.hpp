// Request handlers: what each message of schema/protocol.md does. Internal.
#pragma once

#include <boost/asio/awaitable.hpp>

#include "connection.hpp"
#include "upload.hpp"

namespace kiln::daemon {

// HELLO: version negotiation. Returns the reply body, or an error (the caller closes).
Result<std::string> handle_hello(Connection& c, const Request& r, std::uint32_t& client_max_frame);

// GET answered from the hot set when it is a descriptor hit there, or an inline hit of
// bytes kept in memory (GET "auto"); true if it was
// answered (and logged), false to take the normal path.
asio::awaitable<bool> try_hot_get(Connection& c, const Request& r);

// Every request type except HELLO, PUT and PUT_SOURCE (and chunks).
asio::awaitable<Outcome> handle_request(Connection& c, const Request& r);

// PUT / PUT_SOURCE header: decodes, checks the key; the caller opens the store stream.
Result<Upload> prepare_upload(Connection& c, const Request& r);
// After END: what the request promised (size, SHA-256) against what arrived.
Status check_upload(Upload& upload);
// After check_upload: commits to the store and replies.
asio::awaitable<Outcome> commit_upload(Connection& c, std::uint32_t id, const std::shared_ptr<Upload>& upload);

// A key ref's digest, node fields filled from this node first ("this node").
Result<Digest> resolve_key(ServerState& s, Key& key);

}  // namespace kiln::daemon
