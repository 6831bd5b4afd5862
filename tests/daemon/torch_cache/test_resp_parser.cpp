// The RESP request parser: complete, partial, pipelined, inline, malformed, oversized.
#include <doctest/doctest.h>

#include <string>

#include "kiln/torch_cache/resp_parser.hpp"

using namespace kiln::torch_cache;
using State = ParseResult::State;

TEST_CASE("an array of bulk strings is one request, and says how many bytes it used") {
  RequestParser p;
  std::string buf = "*2\r\n$3\r\nGET\r\n$5\r\nhello\r\n";
  auto r = p.parse(buf);
  REQUIRE(r.state == State::complete);
  CHECK(r.consumed == buf.size());
  REQUIRE(r.args.size() == 2);
  CHECK(r.args[0] == "GET");
  CHECK(r.args[1] == "hello");
}

TEST_CASE("bulk strings are binary: CR, LF and NUL inside a value are bytes") {
  RequestParser p;
  std::string value("a\r\nb\0c", 6);
  std::string buf = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$6\r\n" + value + "\r\n";
  auto r = p.parse(buf);
  REQUIRE(r.state == State::complete);
  CHECK(r.args[2] == value);
}

TEST_CASE("every prefix of a request is incomplete and asks for more, never past the request") {
  RequestParser p;
  std::string buf = "*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$10\r\n0123456789\r\n";
  for (std::size_t n = 0; n < buf.size(); ++n) {
    auto r = p.parse(std::string_view(buf).substr(0, n));
    CHECK(r.state == State::incomplete);
    CHECK(r.need > n);
    CHECK(r.need <= buf.size());
  }
  CHECK(p.parse(buf).state == State::complete);
}

TEST_CASE("pipelined requests are taken one at a time, in order") {
  RequestParser p;
  std::string buf = "*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1\r\na\r\nPING\r\n";
  auto a = p.parse(buf);
  REQUIRE(a.state == State::complete);
  CHECK(a.args[0] == "PING");
  auto b = p.parse(std::string_view(buf).substr(a.consumed));
  REQUIRE(b.state == State::complete);
  CHECK(b.args[1] == "a");
  auto c = p.parse(std::string_view(buf).substr(a.consumed + b.consumed));
  REQUIRE(c.state == State::complete);
  CHECK(c.args.size() == 1);
  CHECK(c.consumed == 6);
}

TEST_CASE("inline commands are split on spaces; a bare line is an empty request") {
  RequestParser p;
  auto r = p.parse("SET  k   v\r\n");
  REQUIRE(r.state == State::complete);
  CHECK(r.args == std::vector<std::string_view>{"SET", "k", "v"});
  auto e = p.parse("\r\n");
  REQUIRE(e.state == State::complete);
  CHECK(e.args.empty());
  CHECK(e.consumed == 2);
  CHECK(p.parse("PING").state == State::incomplete);
}

TEST_CASE("sizes past the limits are refused before anything is allocated") {
  ParserLimits lim;
  lim.max_bulk_bytes = 100;
  lim.max_array_len = 4;
  lim.max_inline_bytes = 16;
  RequestParser p(lim);
  CHECK(p.parse("*5\r\n").state == State::invalid);
  CHECK(p.parse("*1\r\n$101\r\n").state == State::invalid);
  CHECK(p.parse("*1\r\n$100\r\n").state == State::incomplete);
  CHECK(p.parse("*1\r\n$99999999999999999999999\r\n").state == State::invalid);
  CHECK(p.parse(std::string(17, 'A')).state == State::invalid);
  CHECK(p.parse(std::string(20, 'A') + "\r\n").state == State::invalid);
  CHECK(p.parse("*1\r\n$" + std::string(40, '1')).state == State::invalid);  // a header line with no end
}

TEST_CASE("malformed requests are invalid with a reason") {
  RequestParser p;
  for (std::string bad : {"*-1\r\n", "*x\r\n", "*1\r\n:1\r\n", "*1\r\n$-1\r\n", "*1\r\n$3\r\nabcd\r\n",
                          "*1\n", "*1\r\n$1\r\na\n\n", "\"quoted\" inline\r\n", "*+1\r\n"}) {
    CAPTURE(bad);
    auto r = p.parse(bad);
    CHECK(r.state == State::invalid);
    CHECK(!r.error.empty());
  }
}

TEST_CASE("an empty array is a request with no arguments") {
  RequestParser p;
  auto r = p.parse("*0\r\n");
  REQUIRE(r.state == State::complete);
  CHECK(r.args.empty());
  CHECK(r.consumed == 4);
}
