// kiln/builds/worker_protocol.hpp — the daemon's side of schema/worker-protocol.md:
// request encoding and strict parsing of what a worker answered.
//
// A worker's answer is trusted only as far as it checks out: exactly one JSON object line
// on stdout with "protocol": 1, a clean exit for "ok": true, and for builds an artifact
// file that exists, is non-empty, has the size and SHA-256 the worker reported and lies
// where the daemon asked. Anything else is an Error (Errc::build_failed) whose message says
// what the worker did wrong — never a crash of the caller.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/builds/gpu_probe.hpp"
#include "kiln/builds/worker_process.hpp"
#include "kiln/digest.hpp"
#include "kiln/key.hpp"
#include "kiln/result.hpp"

namespace kiln::build {

inline constexpr int kWorkerProtocolVersion = 1;

struct BuildJobPaths {
  std::filesystem::path source;    // the torch.export archive (read-only for the worker)
  std::filesystem::path output;    // where the worker must leave the artifact
  std::filesystem::path workdir;   // scratch folder of this build, removed afterwards
};

std::string encode_toolchain_request();
std::string encode_hash_request(const std::filesystem::path& source);
std::string encode_build_request(const Key& key, const Digest& key_digest, const BuildJobPaths& paths);

struct ToolchainReport {
  NodeFields fields;             // torch_*, cuda_version, triton_version (host fields if reported)
  std::vector<GpuInfo> gpus;     // as torch sees them (for display; the driver probe decides)
};

struct BuiltArtifact {
  std::filesystem::path path;
  std::uint64_t size = 0;
  Digest sha256;
  double compile_seconds = 0;
  double worker_seconds = 0;
  std::string summary;           // one line for the build log: compile time, check result, phases
  std::vector<std::pair<std::string, double>> phases;  // where the time went (worker's names, seconds)
};

struct SourceReport {
  std::string model_hash;        // 64 hex
  std::string dtype;
  std::string inputs_json;       // the source's input signature in the key's JSON form
};

// Each takes the finished process; errors are Errc::build_failed with a message naming
// what went wrong ("worker crashed: killed by signal 11 ...", "worker wrote no result",
// "worker's result is not JSON: ...", the worker's own error line, ...).
Result<ToolchainReport> parse_toolchain_result(const WorkerExit& exit);
Result<SourceReport> parse_hash_result(const WorkerExit& exit);
Result<BuiltArtifact> parse_build_result(const WorkerExit& exit, const BuildJobPaths& paths);

// The last non-empty line of the worker's stderr (for error messages), at most 300 chars.
std::string last_log_line(std::string_view log);

}  // namespace kiln::build
