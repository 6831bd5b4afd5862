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

TEST_CASE("SizesAreBinaryWhateverTheSpelling") {
  CHECK(*parse_size_bytes("0") == 0);
  CHECK(*parse_size_bytes("1048576") == 1048576);
  CHECK(*parse_size_bytes("512K") == 512 * 1024);
  CHECK(*parse_size_bytes("10M") == 10ull << 20);
  CHECK(*parse_size_bytes("10MB") == 10ull << 20);
  CHECK(*parse_size_bytes("10MiB") == 10ull << 20);
  CHECK(*parse_size_bytes("10mib") == 10ull << 20);
  CHECK(*parse_size_bytes("1.5GiB") == 3ull << 29);
  CHECK(*parse_size_bytes("2T") == 2ull << 40);
  for (const char* bad : {"", "lots", "-5G", "10Q", "GiB"}) {
    CAPTURE(bad);
    CHECK(!parse_size_bytes(bad));
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
