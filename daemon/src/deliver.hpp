// Handing a verified copy (a sealed memfd) to a client after its OK reply: the one
// delivery code path of GET hits and GET_SOURCE (schema/protocol.md, GET "Hit, fd" and
// "Hit, stream"). Internal to kiln_daemon; runs on the connection's loop.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "artifact_copy.hpp"
#include "connection.hpp"

namespace kiln::daemon {

// OK with flag FD and a fresh read-only description of `copy` attached; `body` is the
// encoded reply. Counts the bytes served. Fails (not replied) only when no descriptor
// could be opened. Keeps a few descriptions of the copy ready for the next hit.
asio::awaitable<Outcome> deliver_fd(Connection& c, const Request& r, const std::shared_ptr<const ArtifactCopy>& copy,
                                    std::string_view body, const std::string& note);

// OK with flag MORE, then the copy's bytes as CHUNK frames (each at most the client's and
// the server's max frame), the last flagged END; an ERROR frame ends the stream early
// (cancel, read failure). Always replied.
asio::awaitable<Outcome> deliver_stream(Connection& c, const Request& r, const ArtifactCopy& copy,
                                        std::string_view body, const std::string& note);

}  // namespace kiln::daemon
