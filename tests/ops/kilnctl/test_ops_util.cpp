// The ages, sizes and filters operators type for evict and export.
#include <doctest/doctest.h>

#include "kilnctl/commands/ops_util.hpp"

using namespace kiln;
using namespace kiln::ctl;

TEST_CASE("AgesTakeTheUnitsOperatorsType") {
  CHECK(*parse_age_seconds("90") == 90);
  CHECK(*parse_age_seconds("90s") == 90);
  CHECK(*parse_age_seconds("30m") == 1800);
  CHECK(*parse_age_seconds("12h") == 43200);
  CHECK(*parse_age_seconds("7d") == 604800);
  CHECK(*parse_age_seconds("2w") == 1209600);
  CHECK(*parse_age_seconds("1.5h") == 5400);
  for (const char* bad : {"", "d", "-1d", "3 fortnights", "12x", "nan"}) {
    CAPTURE(bad);
    auto r = parse_age_seconds(bad);
    REQUIRE(!r);
    CHECK(r.error().code == Errc::invalid_argument);
    CHECK(r.error().message.find("use e.g. 90s, 30m, 12h, 7d") != std::string::npos);
  }
}

TEST_CASE("FiltersAreFieldEqualsValue") {
  auto f = parse_filters({"region=FluxSingleStreamBlock", "dtype=bfloat16", "compile_options={\"a\":1}"});
  REQUIRE(f);
  CHECK(f->at("region") == "FluxSingleStreamBlock");
  CHECK(f->at("compile_options") == "{\"a\":1}");
  CHECK(!parse_filters({"region"}));
  CHECK(!parse_filters({"=x"}));
  CHECK(parse_filters({"region="})->at("region").empty());
}
