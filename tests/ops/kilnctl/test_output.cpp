// kilnctl's shared human output: the GPU and build slot lines of `kilnctl status` (the
// GPU probe finds nothing on CPU machines, so GPUs are given here as kilnd reports them).
#include <doctest/doctest.h>

#include "kilnctl/byte_progress.hpp"
#include "kilnctl/output.hpp"

using namespace kiln;
using kiln::ctl::gpu_status_lines;

TEST_CASE("StatusPrintsOneLinePerGpuWithNameArchAndMemory") {
  client::DaemonStatus s;
  s.gpus = {{0, "NVIDIA H200", "sm_90", 150'120'000'000ull, "GPU-a"}, {1, "NVIDIA H200", "sm_90", 1ull << 30, "GPU-b"}};
  s.build_slots = {{"gpu0", "sm_90", "NVIDIA H200", 1, 2}, {"gpu1", "sm_90", "NVIDIA H200", 0, 0}};
  auto lines = gpu_status_lines(s);
  REQUIRE(lines.size() == 5);
  CHECK(lines[0].first == "gpu 0");
  CHECK(lines[0].second == "NVIDIA H200, sm_90, 139.8 GiB");
  CHECK(lines[1].first == "gpu 1");
  CHECK(lines[1].second == "NVIDIA H200, sm_90, 1.0 GiB");
  CHECK(lines[2].first == "slot gpu0");
  CHECK(lines[2].second == "NVIDIA H200, sm_90: 1 running, 2 queued");
  CHECK(lines[3].second == "NVIDIA H200, sm_90: 0 running, 0 queued");
  CHECK(lines[4].first == "can build");
  CHECK(lines[4].second == "yes (a miss is built on this node)");
}

TEST_CASE("StatusWithoutGpusSaysNoneFoundAndWhy") {
  client::DaemonStatus s;
  s.gpu_note = "libcuda.so.1 not loadable (no NVIDIA driver?): libcuda.so.1: cannot open shared object file";
  auto lines = gpu_status_lines(s);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].first == "gpus");
  CHECK(lines[0].second == "none found: " + s.gpu_note);
  s.builds_unavailable = "no build slot: none is configured";
  CHECK(gpu_status_lines(s)[1].second == "no: no build slot: none is configured");
  client::DaemonStatus older;  // a kilnd that does not report GPUs at all
  CHECK(gpu_status_lines(older)[0].second == "none found: (no reason given)");
}

TEST_CASE("ByteProgressTextShowsDoneTotalPercentAndRateThenAClosingLine") {
  using kiln::ctl::byte_progress_text;
  CHECK(byte_progress_text("getting|got", 96ull << 20, 256ull << 20, 2.0) ==
        "getting  96.0 MiB / 256.0 MiB    37%   48.0 MiB/s");
  CHECK(byte_progress_text("getting|got", 256ull << 20, 256ull << 20, 0.5) == "got 256.0 MiB in 0.5 s (512.0 MiB/s)");
  CHECK(byte_progress_text("storing|stored", 0, 1ull << 30, 0.0).find("storing  0 B / 1.0 GiB     0%   -") == 0);
}

TEST_CASE("VerifyProgressTextCountsBlobs") {
  CHECK(kiln::ctl::verify_progress_text(120, 4000) == "verifying  120 / 4000 blobs     3%");
  CHECK(kiln::ctl::verify_progress_text(0, 0) == "verifying  0 / 0 blobs     0%");
}
