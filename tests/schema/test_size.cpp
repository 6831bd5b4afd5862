// kiln::parse_size: the one reading of sizes shared by kilnd.toml, kilnd's flags and kilnctl.
#include <doctest/doctest.h>

#include "kiln/size.hpp"

using kiln::parse_size;

TEST_CASE("SizesFollowOneRuleEverywhere: binary prefixes and iB units are 1024s, KB/MB/GB/TB are 1000s") {
  CHECK(*parse_size("0") == 0);
  CHECK(*parse_size("4096") == 4096);
  CHECK(*parse_size("1048576") == 1048576);
  CHECK(*parse_size("512K") == 512 * 1024);
  CHECK(*parse_size("10M") == 10ull << 20);
  CHECK(*parse_size("10MiB") == 10ull << 20);
  CHECK(*parse_size("10mib") == 10ull << 20);
  CHECK(*parse_size("1.5MiB") == 1572864);
  CHECK(*parse_size("1.5GiB") == 3ull << 29);
  CHECK(*parse_size("2GiB") == 2ull << 30);
  CHECK(*parse_size("2T") == 2ull << 40);
  CHECK(*parse_size("100MB") == 100000000);
  CHECK(*parse_size("10mb") == 10000000);
  CHECK(*parse_size("10 GB") == 10000000000);
  CHECK(*parse_size("1KB") == 1000);
  CHECK(*parse_size("7B") == 7);
}

TEST_CASE("SizesThatAreNotSizesAreRefusedWithTheUnitsAccepted") {
  for (const char* bad : {"", "lots", "-5G", "-1", "10Q", "GiB", "12 parsecs", "1e30GiB", "nan", "inf"}) {
    CAPTURE(bad);
    auto r = parse_size(bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == kiln::Errc::invalid_argument);
    CHECK(r.error().message.find("KB, MB, GB, TB (powers of 1000)") != std::string::npos);
  }
}
