// A kilnd that builds through the test worker (tests/support/test_worker.cpp): the
// [builds] table of its config, and keys for the sources that command the worker.
// Library kiln_test_builds (tests/CMakeLists.txt), which also builds the test worker.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kiln/key.hpp"

namespace kiln::test {

// The kiln_test_worker built here.
std::filesystem::path test_worker_path();

struct BuildsToml {
  int slots = 1;                              // build slots gpu0, gpu1, ..., all of one GPU:
  std::string gpu_arch = "sm_test";           //   its gpu_arch
  std::string gpu_name = "Test GPU";          //   and gpu_name
  std::optional<int> failure_ttl_s = 600;     // nullopt: kilnd's default
  std::optional<int> build_timeout_s = {};    // nullopt: kilnd's default
  std::optional<int> source_check_timeout_s = {};  // nullopt: kilnd's default
  std::optional<int> probe_timeout_s = {};    // nullopt: kilnd's default
  // worker_env: the test worker's own switches (KILN_TEST_WORKER_TOOLCHAIN, ..._GATE), which
  // tests set in kilnd's environment, and these.
  std::vector<std::string> worker_env = {};
  std::vector<std::string> extra = {};        // more lines of [builds] ("sandbox = false", ...)
};

// "[builds]" with worker = [the test worker], worker_env, probe_gpus = false, and the build slots; the
// text ends in a newline, so more tables may follow.
std::string builds_toml(const BuildsToml& options = {});

// An AOTI key for the source registered under `model_hash`, one bfloat16 input of `shape`,
// the node fields left empty for kilnd to fill.
Key source_key(const std::string& model_hash, const std::string& region = "Block",
               const std::vector<std::int64_t>& shape = {1, 4608, 3072});

// Builds as kilnd reports them: one per line "build <digest> started on <slot> (<kind>
// <region>)" of kilnd's log (build_runner.cpp, logged as its worker is started), in start
// order. Tests count builds here, never through files the worker writes: a sandboxed
// worker writes nothing outside its build's folder.
struct BuildStart {
  std::string digest, slot, kind, region;
  std::string time;   // the line's timestamp as kilnd writes it (sorts as text); "" if none
};
std::vector<BuildStart> build_starts(const std::string& log);

// The test workers running now under `work_dir` (kilnd's [builds] work_dir; a store's
// "builds" folder by default): what each left in its build's folder,
// jobs/<build>/test-worker.started ("<region> <pid> <output>"), and its hang_child child
// (child.pid; 0 until written). Folder order; a build not that far yet is not listed.
struct RunningTestWorker {
  std::string region;
  pid_t pid = 0;
  std::filesystem::path output;
  pid_t child = 0;
};
std::vector<RunningTestWorker> running_test_workers(const std::filesystem::path& work_dir);

}  // namespace kiln::test
