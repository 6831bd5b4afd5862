// Handlers for LIST_SOURCES and GET_SOURCE (schema/protocol.md). Internal.
#pragma once

#include <boost/asio/awaitable.hpp>

#include "connection.hpp"

namespace kiln::daemon {

// LIST_SOURCES and GET_SOURCE; anything else is a protocol_error.
asio::awaitable<Outcome> handle_source_request(Connection& c, const Request& r);

}  // namespace kiln::daemon
