// kilnd's Prometheus text: histograms with cumulative buckets and `le` bounds in plain
// decimals, the build-duration histogram per key kind and outcome.
#include <doctest/doctest.h>

#include <string>

#include "metrics.hpp"

using kiln::daemon::Metrics;
namespace proto = kiln::protocol;

namespace {
bool has(const std::string& page, const std::string& line) { return page.find("\n" + line + "\n") != std::string::npos; }
}  // namespace

TEST_CASE("build durations render as a histogram per kind and outcome, bounds in plain decimals") {
  Metrics m;
  proto::BuildSeconds ok{"aoti", "succeeded"};
  ok.add(0.2);
  ok.add(42);
  ok.add(5000);
  proto::BuildSeconds failed{"megacache", "failed"};
  failed.add(3);
  const std::vector<proto::BuildSeconds> builds{ok, failed};
  const std::string page = m.render({}, &builds);
  CHECK(has(page, "# TYPE kiln_build_duration_seconds histogram"));
  CHECK(has(page, "kiln_build_duration_seconds_bucket{kind=\"aoti\",outcome=\"succeeded\",le=\"0.5\"} 1"));
  CHECK(has(page, "kiln_build_duration_seconds_bucket{kind=\"aoti\",outcome=\"succeeded\",le=\"30\"} 1"));
  CHECK(has(page, "kiln_build_duration_seconds_bucket{kind=\"aoti\",outcome=\"succeeded\",le=\"60\"} 2"));
  CHECK(has(page, "kiln_build_duration_seconds_bucket{kind=\"aoti\",outcome=\"succeeded\",le=\"3600\"} 2"));
  CHECK(has(page, "kiln_build_duration_seconds_bucket{kind=\"aoti\",outcome=\"succeeded\",le=\"+Inf\"} 3"));
  CHECK(has(page, "kiln_build_duration_seconds_sum{kind=\"aoti\",outcome=\"succeeded\"} 5042.2"));
  CHECK(has(page, "kiln_build_duration_seconds_count{kind=\"aoti\",outcome=\"succeeded\"} 3"));
  CHECK(has(page, "kiln_build_duration_seconds_bucket{kind=\"megacache\",outcome=\"failed\",le=\"2.5\"} 0"));
  CHECK(has(page, "kiln_build_duration_seconds_bucket{kind=\"megacache\",outcome=\"failed\",le=\"5\"} 1"));
  CHECK(has(page, "kiln_build_duration_seconds_count{kind=\"megacache\",outcome=\"failed\"} 1"));
  CHECK(page.find("e-0") == std::string::npos);
  CHECK(page.find("e+0") == std::string::npos);
}

TEST_CASE("without builds there is no build histogram; request durations keep their shape") {
  Metrics m;
  m.record_request(proto::MsgType::get, kiln::Errc::ok, 0.0003);
  const std::string page = m.render({});
  CHECK(page.find("kiln_build_duration_seconds") == std::string::npos);
  CHECK(has(page, "kiln_request_duration_seconds_bucket{op=\"get\",le=\"0.00025\"} 0"));
  CHECK(has(page, "kiln_request_duration_seconds_bucket{op=\"get\",le=\"0.0005\"} 1"));
  CHECK(has(page, "kiln_request_duration_seconds_bucket{op=\"get\",le=\"+Inf\"} 1"));
  CHECK(has(page, "kiln_request_duration_seconds_sum{op=\"get\"} 0.0003"));
  CHECK(has(page, "kiln_request_duration_seconds_count{op=\"get\"} 1"));
}
