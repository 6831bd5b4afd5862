// The one reader of options in kiln's TOML files (schema/toml/src/options.cpp).
#include "kiln/toml/options.hpp"

#include <doctest/doctest.h>

using namespace kiln;
using namespace kiln::toml_options;
using namespace std::chrono_literals;

namespace {

// The error message of reading `text`'s [s] with `read`, or "" when it succeeded.
template <class F>
std::string error_of(std::string_view text, F read, Style style = {}) {
  auto root = parse(text, "t.toml");
  REQUIRE_MESSAGE(root.has_value(), (root ? "" : root.error().message));
  const Document doc("t.toml", style);
  auto s = doc.table(*root).table("s");
  REQUIRE(s.has_value());
  REQUIRE(s->has_value());
  Status st = read(**s);
  if (st) return "";
  CHECK(st.error().code == Errc::invalid_argument);
  return st.error().message;
}

}  // namespace

TEST_CASE("AbsentKeysLeaveTheDefaultsAndPresentOnesAreStored") {
  auto root = parse(R"(
[s]
name = "x"
on = true
n = 7
ratio = 2.5
bytes = "2GiB"
timeout_s = 60
wait_s = 1.5
argv = ["a", "b"]
dir = ""
)", "t.toml");
  REQUIRE(root);
  const Document doc("t.toml");
  auto s = doc.table(*root).table("s");
  REQUIRE(s);
  REQUIRE(*s);
  const Table& t = **s;
  CHECK(t.only({"name", "on", "n", "ratio", "bytes", "timeout_s", "wait_s", "argv", "dir"}));
  std::string name = "default", missing = "default";
  bool on = false;
  unsigned n = 0;
  double ratio = 0;
  std::uint64_t bytes = 0;
  std::chrono::milliseconds timeout{0}, wait{0};
  std::vector<std::string> argv;
  std::filesystem::path dir = "/kept";
  CHECK(t.string("name", name));
  CHECK(t.string("absent", missing));
  CHECK(t.boolean("on", on));
  CHECK(t.integer("n", n, 1, 10));
  CHECK(t.number("ratio", ratio, 0, 10));
  CHECK(t.size("bytes", bytes));
  CHECK(t.duration("timeout_s", timeout, std::chrono::seconds(1), std::chrono::seconds(3600)));
  CHECK(t.seconds("wait_s", wait));
  CHECK(t.strings("argv", argv, {.expected = "an array of strings"}));
  CHECK(t.path("dir", dir));
  CHECK(name == "x");
  CHECK(missing == "default");
  CHECK(on);
  CHECK(n == 7);
  CHECK(ratio == 2.5);
  CHECK(bytes == 2ull << 30);
  CHECK(timeout == 60s);
  CHECK(wait == 1500ms);
  CHECK(argv == std::vector<std::string>{"a", "b"});
  CHECK(dir == "/kept");  // an empty path keeps the default
  auto absent = doc.table(*root).table("nothing");
  REQUIRE(absent);
  CHECK_FALSE(*absent);
}

TEST_CASE("WrongTypesAndRangesNameTheSectionKeyAndWhatWasExpected") {
  unsigned n = 0;
  std::uint64_t bytes = 0;
  std::string str;
  bool b = false;
  std::chrono::seconds ttl{0};
  CHECK(error_of("[s]\nn = 3.0\n", [&](const Table& t) { return t.integer("n", n, 1, 10); }) ==
        "t.toml: s.n: expected an integer from 1 to 10");
  CHECK(error_of("[s]\nn = 11\n", [&](const Table& t) { return t.integer("n", n, 1, 10); }) ==
        "t.toml: s.n: expected an integer from 1 to 10");
  CHECK(error_of("[s]\nq = \"12 parsecs\"\n", [&](const Table& t) { return t.size("q", bytes); }).find("t.toml: s.q: ") == 0);
  CHECK(error_of("[s]\nq = -1\n", [&](const Table& t) { return t.size("q", bytes); }) == "t.toml: s.q: must not be negative");
  CHECK(error_of("[s]\nx = 1\n", [&](const Table& t) { return t.string("x", str); }) == "t.toml: s.x: expected a string");
  CHECK(error_of("[s]\nx = \"\"\n", [&](const Table& t) { return t.string("x", str, Empty::refused); }) ==
        "t.toml: s.x: must not be empty");
  CHECK(error_of("[s]\nx = 1\n", [&](const Table& t) { return t.boolean("x", b); }) == "t.toml: s.x: expected true or false");
  CHECK(error_of("[s]\nttl_s = -1\n", [&](const Table& t) { return t.duration("ttl_s", ttl, 0s, 60s); }) ==
        "t.toml: s.ttl_s: expected an integer from 0 to 60");
  CHECK(error_of("[s]\nsub = 1\n", [&](const Table& t) { return t.table("sub").has_value() ? Status{} : t.table("sub").error(); }) ==
        "t.toml: s.sub: expected a table [s.sub]");
  CHECK(n == 0);
  CHECK(bytes == 0);
}

TEST_CASE("UnknownKeysAreNamedWithTheKnownOnes") {
  CHECK(error_of("[s]\na = 1\nbb = 2\n", [](const Table& t) { return t.only({"a", "b"}); }) ==
        "t.toml: s.bb: unknown option (known here: a, b)");
  // A manifest speaks of fields and says where.
  CHECK(error_of("[s]\na = 1\nbb = 2\n", [](const Table& t) { return t.only({"a", "b"}); },
                 Style{.noun = "field", .positions = true}) == "t.toml:3:6: s.bb: unknown field (known here: a, b)");
}

TEST_CASE("StringListsFollowTheirRules") {
  std::vector<std::string> v{"default"};
  const ListRules plain{.expected = "an array of strings"};
  CHECK(error_of("[s]\nl = \"x\"\n", [&](const Table& t) { return t.strings("l", v, plain); }) ==
        "t.toml: s.l: expected an array of strings");
  CHECK(error_of("[s]\nl = [\"x\", 2]\n", [&](const Table& t) { return t.strings("l", v, plain); }) ==
        "t.toml: s.l[1]: expected a string");
  CHECK(v == std::vector<std::string>{"default"});
  const ListRules ids{.expected = "names or ids", .numbers = true};
  CHECK(error_of("[s]\nl = [\"alice\", 1001]\n", [&](const Table& t) { return t.strings("l", v, ids); }).empty());
  CHECK(v == std::vector<std::string>{"alice", "1001"});
  const ListRules one{.expected = "a string or an array of strings", .one_string = true, .non_empty = true};
  CHECK(error_of("[s]\nl = \"bf16\"\n", [&](const Table& t) { return t.strings("l", v, one); }).empty());
  CHECK(v == std::vector<std::string>{"bf16"});
  CHECK(error_of("[s]\nl = []\n", [&](const Table& t) { return t.strings("l", v, one); }).find("s.l: must not be an empty list") !=
        std::string::npos);
  CHECK(error_of("[s]\nl = [\"a\", \"\"]\n", [&](const Table& t) { return t.strings("l", v, one); }) ==
        "t.toml: s.l[1]: must not be empty");
}

TEST_CASE("SyntaxErrorsSayWhere") {
  auto r = parse("[s\n", "t.toml");
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::invalid_argument);
  CHECK(r.error().message.find("t.toml:1:") == 0);
  auto missing = read_text("/nonexistent/kiln/t.toml");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code == Errc::io_error);
}
