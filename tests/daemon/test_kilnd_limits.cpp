// kilnd's own socket against greedy and stalling peers: memory a flood of large (deeply
// nested) frames took is given back once it is over, and every connection kilnd closes on
// its own leaves a log line naming the peer's uid and the reason.
#include <doctest/doctest.h>

#include <unistd.h>

#include <thread>

#include "support/kilnd_process.hpp"
#include "support/raw_client.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::test;
using namespace std::chrono_literals;
namespace proto = kiln::protocol;
using proto::MsgType;

namespace {

// Waits until kilnd's resident memory is at most `limit_kib`; the last reading.
long wait_rss_at_most(pid_t pid, long limit_kib, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  long rss = process_memory_kib(pid, "VmRSS");
  while (rss > limit_kib && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(50ms);  // polling a figure that has no event to wait on
    rss = process_memory_kib(pid, "VmRSS");
  }
  return rss;
}

// A fresh client is served (HELLO, then STATS).
bool serves(const KilndProcess& d) {
  RawClient c(d.socket());
  c.hello();
  return c.call(MsgType::stats, "{}").header.type == MsgType::ok;
}

}  // namespace

TEST_CASE("a flood of 4 MiB deeply nested bodies from 32 clients at once leaves no memory behind") {
  TempDir dir;
  KilndProcess d(dir.path(), "[limits]\nidle_timeout_s = 60\n");
  REQUIRE(serves(d));  // the baseline includes a served request
  const long baseline = process_memory_kib(d.pid(), "VmRSS");
  REQUIRE(baseline > 0);
  const std::string deep((4u << 20) - 1024, '[');
  long peak = 0;
  for (int round = 0; round < 3; ++round) {
    std::vector<std::thread> flood;
    for (int i = 0; i < 32; ++i)
      flood.emplace_back([&] {
        RawClient c(d.socket());
        c.hello();
        for (int j = 0; j < 2; ++j) {
          auto r = c.call(MsgType::get, deep);
          CHECK(r.header.type == MsgType::error);
        }
      });
    for (auto& t : flood) t.join();
    peak = std::max(peak, process_memory_kib(d.pid(), "VmHWM"));
  }
  // Within 16 MiB of where it started, soon after the flood.
  const long after = wait_rss_at_most(d.pid(), baseline + 16 * 1024, 10s);
  MESSAGE("kilnd RSS " << baseline << " KiB before, peak " << peak << " KiB, " << after << " KiB after");
  CHECK(after <= baseline + 16 * 1024);
  CHECK(serves(d));
}

TEST_CASE("connections kilnd closes on its own are logged with the peer's uid and the reason") {
  TempDir dir;
  KilndProcess d(dir.path(), "[limits]\nframe_timeout_s = 1\nidle_timeout_s = 2\n");
  const std::string uid = "uid=" + std::to_string(::getuid());
  {  // half a frame, then nothing
    RawClient c(d.socket());
    c.hello();
    const char part[5] = {1, 2, 3, 4, 5};
    REQUIRE(c.send_bytes(part, sizeof part));
    CHECK(c.wait_closed(10s));
  }
  CHECK(d.wait_for_log("frame not complete within limits.frame_timeout_s (1 s) of its first byte", 5s));
  {  // no HELLO first
    RawClient c(d.socket());
    REQUIRE(c.send_frame(MsgType::stats, 1, "{}"));
    CHECK(c.wait_closed(10s));
  }
  CHECK(d.wait_for_log("protocol violation: STATS before HELLO", 5s));
  {  // nothing at all
    RawClient c(d.socket());
    c.hello();
    CHECK(c.wait_closed(10s));
  }
  CHECK(d.wait_for_log("idle for limits.idle_timeout_s (2 s)", 5s));
  const auto log = d.log();
  for (const char* why : {"frame not complete", "before HELLO", "idle for"}) {
    auto at = log.find(why);
    REQUIRE(at != std::string::npos);
    auto line_start = log.rfind('\n', at);
    CHECK(log.substr(line_start + 1, at - line_start).find(uid) != std::string::npos);
  }
}
