// Redis commands: what each asks for (see session.hpp).
#include "kiln/torch_cache/session.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

#include <openssl/crypto.h>

namespace kiln::torch_cache {

namespace {

// What kiln tells a client it speaks: the Redis version whose commands it answers as
// Redis does (redis-py reads only `proto`).
constexpr std::string_view kRedisVersion = "7.2.0";

std::string upper(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::toupper(c); });
  return out;
}

bool is(std::string_view arg, std::string_view upper_name) {
  if (arg.size() != upper_name.size()) return false;
  for (std::size_t i = 0; i < arg.size(); ++i)
    if (std::toupper(static_cast<unsigned char>(arg[i])) != upper_name[i]) return false;
  return true;
}

bool positive_integer(std::string_view s) {
  long long v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size() && v > 0;
}

// Compared in constant time, so the reply's timing does not tell how much was right.
bool same_secret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Step reply(std::string text) {
  Step s;
  s.reply = std::move(text);
  return s;
}
Step ok() {
  std::string r;
  append_simple(r, "OK");
  return reply(std::move(r));
}
Step error(std::string_view text) {
  std::string r;
  append_error(r, text);
  return reply(std::move(r));
}
Step close(std::string why) {
  Step s;
  s.kind = Step::Kind::close;
  s.why = std::move(why);
  return s;
}
Step wrong_args(std::string_view cmd) {
  return error("ERR wrong number of arguments for '" + std::string(cmd) + "' command");
}

}  // namespace

Step Session::handle(std::span<const std::string_view> args) {
  const std::string_view cmd = args[0];
  if (is(cmd, "GET")) return get(args);
  if (is(cmd, "SET")) return set(args);
  if (is(cmd, "HELLO")) return hello(args);
  if (is(cmd, "AUTH")) return auth(args);
  if (is(cmd, "PING")) {
    if (args.size() > 2) return wrong_args("ping");
    std::string r;
    if (args.size() == 2) append_bulk(r, args[1]);
    else append_simple(r, "PONG");
    return reply(std::move(r));
  }
  if (is(cmd, "QUIT")) {
    auto s = ok();
    s.close_after_reply = true;
    return s;
  }
  if (is(cmd, "CLIENT")) return client(args);
  if (!authenticated()) return error("NOAUTH Authentication required.");
  if (is(cmd, "SELECT")) {
    if (args.size() != 2) return wrong_args("select");
    if (args[1] != "0") return error("ERR DB index is out of range (kiln serves database 0 only)");
    return ok();
  }
  if (is(cmd, "ECHO")) {
    if (args.size() != 2) return wrong_args("echo");
    std::string r;
    append_bulk(r, args[1]);
    return reply(std::move(r));
  }
  if (is(cmd, "COMMAND")) {  // redis-cli asks at start; it copes with an empty list
    std::string r;
    append_array_header(r, 0);
    return reply(std::move(r));
  }
  std::string shown(cmd.substr(0, 64));
  for (char& c : shown)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return error("ERR unknown command '" + shown +
               "': kiln answers HELLO, AUTH, CLIENT, PING, ECHO, SELECT 0, GET, SET, QUIT");
}

Step Session::hello(std::span<const std::string_view> args) {
  Proto want = proto_;
  std::size_t i = 1;
  if (args.size() > 1) {
    if (args[1] == "2") want = Proto::resp2;
    else if (args[1] == "3") want = Proto::resp3;
    else return close("HELLO " + std::string(args[1].substr(0, 16)) + ": kiln speaks protocol 2 and 3");
    i = 2;
  }
  for (; i < args.size(); ++i) {
    if (is(args[i], "AUTH") && i + 2 < args.size()) {
      if (!is(args[i + 1], "DEFAULT") || options_.password.empty() || !same_secret(args[i + 2], options_.password))
        return close("HELLO AUTH: wrong user or password");
      authenticated_ = true;
      i += 2;
    } else if (is(args[i], "SETNAME") && i + 1 < args.size()) {
      i += 1;
    } else {
      return close("HELLO: malformed options");
    }
  }
  proto_ = want;
  std::string r;
  append_map_header(r, proto_, 7);
  append_bulk(r, "server");
  append_bulk(r, "redis");
  append_bulk(r, "version");
  append_bulk(r, kRedisVersion);
  append_bulk(r, "proto");
  append_integer(r, static_cast<int>(proto_));
  append_bulk(r, "id");
  append_integer(r, 1);
  append_bulk(r, "mode");
  append_bulk(r, "standalone");
  append_bulk(r, "role");
  append_bulk(r, "master");
  append_bulk(r, "modules");
  append_array_header(r, 0);
  return reply(std::move(r));
}

Step Session::auth(std::span<const std::string_view> args) {
  // A failed AUTH closes rather than answering WRONGPASS: redis-py sends AUTH while
  // connecting for GET/SET and would raise that as a ResponseError, which torch does not
  // catch. Closed, the client sees ConnectionError and torch goes on without the cache.
  if (args.size() != 2 && args.size() != 3) return close("AUTH with " + std::to_string(args.size() - 1) + " arguments");
  if (options_.password.empty()) return close("AUTH, but [torch_cache] password is not set");
  bool user_ok = args.size() == 2 || is(args[1], "DEFAULT");
  if (!user_ok || !same_secret(args.back(), options_.password)) return close("AUTH: wrong user or password");
  authenticated_ = true;
  return ok();
}

Step Session::client(std::span<const std::string_view> args) {
  if (args.size() < 2) return wrong_args("client");
  if (is(args[1], "GETNAME")) {
    std::string r;
    append_null(r, proto_);
    return reply(std::move(r));
  }
  if (is(args[1], "ID")) {
    std::string r;
    append_integer(r, 1);
    return reply(std::move(r));
  }
  return ok();  // SETNAME, SETINFO, NO-EVICT, ...: nothing to keep
}

Step Session::get(std::span<const std::string_view> args) {
  if (args.size() != 2) return close("GET with " + std::to_string(args.size() - 1) + " arguments");
  if (!authenticated()) return close("GET before AUTH");
  if (!options_.can_read) return close("GET refused: the peer has no read role");
  Step s;
  s.kind = Step::Kind::get;
  s.key = args[1];
  return s;
}

Step Session::set(std::span<const std::string_view> args) {
  if (args.size() < 3) return close("SET with " + std::to_string(args.size() - 1) + " arguments");
  if (!authenticated()) return close("SET before AUTH");
  if (!options_.can_write) return close("SET refused: the peer has no build role");
  Step s;
  s.kind = Step::Kind::set;
  s.key = args[1];
  s.value = args[2];
  bool expiry = false;
  for (std::size_t i = 3; i < args.size(); ++i) {
    std::string opt = upper(args[i]);
    if (opt == "NX" || opt == "XX") {
      if (s.condition != SetCondition::always) return close("SET with both NX and XX");
      s.condition = opt == "NX" ? SetCondition::if_absent : SetCondition::if_present;
    } else if (opt == "EX" || opt == "PX" || opt == "EXAT" || opt == "PXAT") {
      // Accepted and not kept: kiln's entries leave by LRU eviction and `kilnctl evict`,
      // not by expiry (schema/torch-cache.md).
      if (expiry || i + 1 >= args.size() || !positive_integer(args[i + 1])) return close("SET with a bad " + opt);
      expiry = true;
      ++i;
    } else if (opt == "KEEPTTL") {
      if (expiry) return close("SET with KEEPTTL and an expiry");
      expiry = true;
    } else {
      return close("SET option " + opt.substr(0, 16) + " is not supported");
    }
  }
  return s;
}

}  // namespace kiln::torch_cache
