// Redis commands as a torch.compile client meets them: HELLO 2/3, roles, AUTH, SET options.
// The rule under test: HELLO, GET and SET never get an error reply; they close instead.
#include <doctest/doctest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "kiln/torch_cache/session.hpp"

using namespace kiln::torch_cache;
using Kind = Step::Kind;

namespace {

Step run(Session& s, std::initializer_list<std::string_view> args) {
  std::vector<std::string_view> v(args);
  return s.handle(v);
}

Session reader_writer() { return Session({true, true, ""}); }

}  // namespace

TEST_CASE("HELLO 3 answers a RESP3 map with proto 3 and switches the null to _") {
  auto s = reader_writer();
  auto h = run(s, {"hello", "3"});
  REQUIRE(h.kind == Kind::reply);
  CHECK(h.reply.rfind("%7\r\n", 0) == 0);
  CHECK(h.reply.find("$5\r\nproto\r\n:3\r\n") != std::string::npos);
  CHECK(s.proto() == Proto::resp3);
  auto c = run(s, {"CLIENT", "GETNAME"});
  CHECK(c.reply == "_\r\n");
}

TEST_CASE("HELLO 2 answers a flat array with proto 2; without HELLO the protocol is 2") {
  auto s = reader_writer();
  CHECK(s.proto() == Proto::resp2);
  auto h = run(s, {"HELLO", "2"});
  CHECK(h.reply.rfind("*14\r\n", 0) == 0);
  CHECK(h.reply.find("$5\r\nproto\r\n:2\r\n") != std::string::npos);
  CHECK(run(s, {"CLIENT", "GETNAME"}).reply == "$-1\r\n");
}

TEST_CASE("HELLO with a version kiln does not speak, or malformed, closes instead of an error") {
  for (auto args : {std::vector<std::string_view>{"HELLO", "4"}, {"HELLO", "3", "AUTH", "default"},
                    {"HELLO", "3", "BOGUS"}}) {
    auto s = reader_writer();
    CHECK(s.handle(args).kind == Kind::close);
  }
}

TEST_CASE("GET and SET without the role close; with it they ask the backend") {
  Session none({false, false, ""});
  CHECK(run(none, {"GET", "k"}).kind == Kind::close);
  CHECK(run(none, {"SET", "k", "v"}).kind == Kind::close);
  Session reader({true, false, ""});
  auto g = run(reader, {"GET", "k"});
  CHECK(g.kind == Kind::get);
  CHECK(g.key == "k");
  CHECK(run(reader, {"SET", "k", "v"}).kind == Kind::close);
  CHECK(run(reader, {"PING"}).reply == "+PONG\r\n");
}

TEST_CASE("SET takes EX/PX/NX/XX as redis-py sends them; a bad option closes") {
  auto s = reader_writer();
  auto a = run(s, {"SET", "k", "v", "EX", "60"});
  CHECK(a.kind == Kind::set);
  CHECK(a.value == "v");
  CHECK(a.condition == SetCondition::always);
  CHECK(run(s, {"SET", "k", "v", "PX", "1000", "NX"}).condition == SetCondition::if_absent);
  CHECK(run(s, {"set", "k", "v", "xx"}).condition == SetCondition::if_present);
  CHECK(run(s, {"SET", "k", "v", "KEEPTTL"}).kind == Kind::set);
  for (auto bad : {std::vector<std::string_view>{"SET", "k"}, {"SET", "k", "v", "EX"}, {"SET", "k", "v", "EX", "0"},
                   {"SET", "k", "v", "EX", "ten"}, {"SET", "k", "v", "NX", "XX"}, {"SET", "k", "v", "GET"},
                   {"SET", "k", "v", "EX", "1", "PX", "1"}, {"GET"}, {"GET", "a", "b"}}) {
    CHECK(s.handle(bad).kind == Kind::close);
  }
}

TEST_CASE("with a password, GET and SET close until AUTH; a wrong AUTH closes too") {
  Session s({true, true, "s3cret"});
  CHECK(run(s, {"GET", "k"}).kind == Kind::close);
  CHECK(run(s, {"SELECT", "0"}).reply.rfind("-NOAUTH", 0) == 0);
  CHECK(run(s, {"AUTH", "wrong"}).kind == Kind::close);
  CHECK(run(s, {"AUTH", "someone", "s3cret"}).kind == Kind::close);
  CHECK(run(s, {"AUTH", "default", "s3cret"}).reply == "+OK\r\n");
  CHECK(run(s, {"GET", "k"}).kind == Kind::get);
  Session h({true, true, "s3cret"});
  CHECK(run(h, {"HELLO", "3", "AUTH", "default", "nope"}).kind == Kind::close);
  Session h2({true, true, "s3cret"});
  CHECK(run(h2, {"HELLO", "3", "AUTH", "default", "s3cret", "SETNAME", "x"}).kind == Kind::reply);
  CHECK(run(h2, {"SET", "k", "v"}).kind == Kind::set);
  Session open({true, true, ""});
  CHECK(run(open, {"AUTH", "x"}).kind == Kind::close);
}

TEST_CASE("CLIENT, SELECT 0, QUIT and unknown commands") {
  auto s = reader_writer();
  CHECK(run(s, {"CLIENT", "SETINFO", "LIB-NAME", "redis-py"}).reply == "+OK\r\n");
  CHECK(run(s, {"CLIENT", "SETNAME", "x"}).reply == "+OK\r\n");
  CHECK(run(s, {"SELECT", "0"}).reply == "+OK\r\n");
  CHECK(run(s, {"SELECT", "1"}).reply.rfind("-ERR", 0) == 0);
  CHECK(run(s, {"PING", "hi"}).reply == "$2\r\nhi\r\n");
  auto q = run(s, {"QUIT"});
  CHECK(q.reply == "+OK\r\n");
  CHECK(q.close_after_reply);
  auto u = run(s, {"FLUSHALL"});
  CHECK(u.kind == Kind::reply);
  CHECK(u.reply.rfind("-ERR unknown command 'FLUSHALL'", 0) == 0);
  auto odd = run(s, {std::string_view("\r\nX", 3)});  // a name with CR LF stays one reply line
  CHECK(odd.reply.find("\r\n") == odd.reply.size() - 2);
}
