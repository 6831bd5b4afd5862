// kiln/torch_cache/session.hpp — what one Redis connection may do and what each command
// asks for. No I/O: the connection (connection.hpp) parses a request, hands its
// arguments to handle(), and carries out the Step it gets back.
//
// The rules that keep a torch.compile user's process alive (DESIGN.md, "Facts"): torch
// catches only redis-py's ConnectionError, so HELLO, GET and SET never get an error reply.
// Where Redis would answer them with one (a missing role, a bad option, a protocol version
// kiln does not speak, no AUTH yet), the Step is `close`: redis-py then raises
// ConnectionError, which torch treats as "no cache". A failed AUTH closes too (redis-py
// sends it while connecting for a GET). Other commands get Redis's errors.
//
// Thread safety: one Session per connection, used from that connection only.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kiln/torch_cache/resp_writer.hpp"

namespace kiln::torch_cache {

struct SessionOptions {
  bool can_read = false;   // GET (the peer holds kiln's read role)
  bool can_write = false;  // SET (build role: filed under the writer, schema/torch-cache.md)
  // When not empty, GET and SET need AUTH <password> (or AUTH default <password>, or
  // HELLO ... AUTH default <password>) first.
  std::string password;
};

enum class SetCondition { always, if_absent /* NX */, if_present /* XX */ };

struct Step {
  enum class Kind {
    reply,  // send `reply`
    get,    // look up `key`; answer with the value or the null of proto()
    set,    // store `value` under `key` when `condition` holds; answer +OK, or null if not
    close,  // close the connection without a reply; `why` says why (for the log)
  };
  Kind kind = Kind::reply;
  std::string reply;
  std::string_view key, value;  // views into the request's buffer
  SetCondition condition = SetCondition::always;
  bool close_after_reply = false;  // QUIT
  std::string why;
};

class Session {
 public:
  explicit Session(SessionOptions options) : options_(std::move(options)) {}
  // One request. `args` is not empty; args[0] is the command name (any case).
  Step handle(std::span<const std::string_view> args);
  Proto proto() const { return proto_; }
  bool authenticated() const { return options_.password.empty() || authenticated_; }

 private:
  Step hello(std::span<const std::string_view> args);
  Step auth(std::span<const std::string_view> args);
  Step get(std::span<const std::string_view> args);
  Step set(std::span<const std::string_view> args);
  Step client(std::span<const std::string_view> args);

  SessionOptions options_;
  Proto proto_ = Proto::resp2;
  bool authenticated_ = false;
};

}  // namespace kiln::torch_cache
