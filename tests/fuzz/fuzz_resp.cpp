// libFuzzer target for kilnd's Redis-protocol front (daemon/torch_cache): every byte a
// torch.compile process, or anything else that reaches the torch cache socket, sends is
// untrusted. The input's first byte picks the session's roles and password; the rest is
// the byte stream of one connection. Invariants, beyond "no crash, leak or UB":
//   - the parser is a pure function of the bytes: a request it completes is reported
//     incomplete (never invalid, never different) for every shorter prefix of it;
//   - a complete request consumed something and lies inside the buffer; an invalid one
//     says why; an incomplete one asks for more than the buffer holds;
//   - HELLO, GET and SET never get an error reply (torch's compile dies on one; DESIGN.md
//     "Facts"): the Session answers them, asks the store, or closes;
//   - GET needs the read role and SET the write role; without them nothing is asked of
//     the store;
//   - every key the session would look up or store maps to a kiln key, or is refused with
//     a message.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "kiln/torch_cache/resp_parser.hpp"
#include "kiln/torch_cache/session.hpp"
#include "kiln/torch_cache/torch_key.hpp"

using namespace kiln::torch_cache;

namespace {

bool same(const ParseResult& a, const ParseResult& b) {
  if (a.state != b.state || a.consumed != b.consumed || a.args.size() != b.args.size()) return false;
  for (std::size_t i = 0; i < a.args.size(); ++i)
    if (a.args[i] != b.args[i]) return false;
  return true;
}

bool named(std::string_view arg, std::string_view name) {
  if (arg.size() != name.size()) return false;
  for (std::size_t i = 0; i < arg.size(); ++i)
    if ((arg[i] | 0x20) != name[i]) return false;  // name is lower case letters
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  SessionOptions options;
  options.can_read = mode & 1;
  options.can_write = mode & 2;
  if (mode & 4) options.password = "secret";
  Session session(options);
  // Small limits, so the fuzzer reaches them with short inputs.
  const RequestParser parser(ParserLimits{.max_bulk_bytes = 64, .max_array_len = 8, .max_inline_bytes = 128});

  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  for (int requests = 0; !rest.empty() && requests < 64; ++requests) {
    const ParseResult r = parser.parse(rest);
    if (r.state == ParseResult::State::invalid) {
      if (r.error.empty()) std::abort();
      return 0;  // the connection closes
    }
    if (r.state == ParseResult::State::incomplete) {
      if (r.need <= rest.size()) std::abort();
      return 0;
    }
    if (r.consumed == 0 || r.consumed > rest.size()) std::abort();
    for (auto a : r.args)
      if (a.data() < rest.data() || a.data() + a.size() > rest.data() + r.consumed) std::abort();
    // Streaming: the same request arriving in two reads parses the same.
    if (r.consumed > 1) {
      const std::size_t cut = 1 + (static_cast<std::size_t>(mode) * 7919u) % (r.consumed - 1);
      const ParseResult partial = parser.parse(rest.substr(0, cut));
      if (partial.state != ParseResult::State::incomplete) std::abort();
      if (!same(parser.parse(rest.substr(0, r.consumed)), r)) std::abort();
    }
    if (!r.args.empty()) {
      const Step step = session.handle(r.args);
      const std::string_view cmd = r.args[0];
      const bool guarded = named(cmd, "hello") || named(cmd, "get") || named(cmd, "set");
      if (guarded && step.kind == Step::Kind::reply && !step.reply.empty() && step.reply[0] == '-') std::abort();
      if (step.kind == Step::Kind::get && (!options.can_read || !session.authenticated())) std::abort();
      if (step.kind == Step::Kind::set && (!options.can_write || !session.authenticated())) std::abort();
      if (step.kind == Step::Kind::get || step.kind == Step::Kind::set) {
        auto key = map_torch_key(step.key);
        if (!key && key.error().message.empty()) std::abort();
        if (key && !(*key->kiln_key().digest() == key->digest)) std::abort();
      }
      if (step.kind == Step::Kind::close) {
        if (step.why.empty()) std::abort();
        return 0;
      }
      if (step.close_after_reply) return 0;
    }
    rest.remove_prefix(r.consumed);
  }
  return 0;
}
