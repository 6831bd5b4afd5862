// Human-readable output shared by kilnctl's commands.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "kiln/client/artifact.hpp"
#include "kiln/client/client.hpp"

namespace kiln::ctl {

// "2.5 MiB", "4.0 KiB", "0 B"
std::string format_bytes(std::uint64_t bytes);
// "1 artifact", "0 artifacts", "2 entries": `n` and the noun in the right number (`plural`
// defaults to `singular` + "s").
std::string count_of(std::uint64_t n, const std::string& singular, const std::string& plural = {});
// "2026-11-21 06:20:53 UTC"; "-" for 0
std::string format_time(std::int64_t unix_seconds);
// All of `in` (stdin for "-" arguments).
std::string read_stream(std::istream& in);
// Every field of `info`, one "name  value" line each, key fields included (build_seconds
// "-" for an artifact that was not built by a node: put or imported without one).
void print_info(std::ostream& out, const client::ArtifactInfo& info);
// `kilnctl status`'s GPU and build slot lines as (name, value): ("gpu 0", "NVIDIA H200,
// sm_90, 139.8 GiB") per GPU, or ("gpus", "none found: <probe note>"); then ("slot gpu0",
// "NVIDIA H200, sm_90: 1 running, 2 queued") per build slot; last ("can build", "yes ..." or
// "no: <why>").
std::vector<std::pair<std::string, std::string>> gpu_status_lines(const client::DaemonStatus& status);

}  // namespace kiln::ctl
