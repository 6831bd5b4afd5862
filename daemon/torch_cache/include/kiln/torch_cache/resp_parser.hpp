// kiln/torch_cache/resp_parser.hpp — requests of the Redis protocol (RESP2/RESP3), parsed
// from bytes already read. No I/O: the connection reads, this says what the bytes hold.
//
// A request is an array of bulk strings (`*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n`, what every
// client library sends) or an inline command (`PING\r\n`, what a person types). Several
// requests may sit in one buffer (pipelining): parse() takes the first and says how many
// bytes it used. Every size is bounded before anything is allocated: a peer cannot make
// kilnd hold more than max_bulk_bytes for one argument or max_array_len arguments.
//
// Thread safety: a RequestParser is a value with no shared state.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::torch_cache {

struct ParserLimits {
  std::size_t max_bulk_bytes = 512u << 20;   // one argument (a value of SET)
  std::size_t max_array_len = 1024;          // arguments of one request
  std::size_t max_inline_bytes = 64u << 10;  // one inline command line, or one header line
};

struct ParseResult {
  enum class State {
    incomplete,  // more bytes needed; `need` says at least how many the buffer must hold
    complete,    // `args` is the request; it used `consumed` bytes of the buffer
    invalid,     // malformed or past a limit; `error` says why; the connection must close
  };
  State state = State::incomplete;
  // Views into the buffer given to parse(): valid while it is unchanged.
  std::vector<std::string_view> args;
  std::size_t consumed = 0;
  std::size_t need = 0;
  std::string error;
};

class RequestParser {
 public:
  explicit RequestParser(ParserLimits limits = {}) : limits_(limits) {}
  // Parses the first request in `buffer`. An empty inline line (a bare "\r\n") is
  // skipped as Redis does: it is consumed and yields a request with no arguments.
  ParseResult parse(std::string_view buffer) const;
  const ParserLimits& limits() const { return limits_; }

 private:
  ParserLimits limits_;
};

}  // namespace kiln::torch_cache
