// Helpers for the end-to-end tests of kilnctl's operations commands: run the kilnctl
// binary, start a kilnd whose builds run the test worker, write small files.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "client_fixture.hpp"
#include "random_bytes.hpp"
#include "support/kilnd_process.hpp"

namespace kiln::ops_test {

struct Run {
  int code = -1;
  std::string out, err;
};

// Runs the kilnctl binary with `args`, feeding `input` on its stdin and adding `env`
// ("NAME=value") to its environment; collects stdout, stderr and the exit code.
Run run_kilnctl(const std::vector<std::string>& args, const std::string& input = "",
                const std::vector<std::string>& env = {});
// The same with --socket `socket` added when it is not empty; stdin is empty.
Run kilnctl(std::vector<std::string> args, const std::filesystem::path& socket = {});

// kilnd config enabling builds with the test worker on `slots` fake GPUs matching the
// test node (tests/client/support/kilnd_process.cpp).
std::string builds_toml(int slots, int failure_ttl_s = 600);

// Builds of `region` started by the kilnd whose folder is `dir` and those in its
// subfolders, as their logs (kilnd.log, kept across restarts) say: the sandboxed test
// worker writes nothing outside its build's folder (tests/support/kilnd_builds.hpp).
std::size_t builds_started(const std::filesystem::path& dir, const std::string& region);

// A libkiln client of `d` (tests/support/client_fixture.hpp).
inline client::Client connect(const test::KilndProcess& d) { return test::connect_client(d.socket()); }
inline std::span<const std::byte> as_bytes(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

void write_file(const std::filesystem::path& p, const std::string& bytes);
std::string read_file(const std::filesystem::path& p);
// Deterministic bytes (tests/support/random_bytes.hpp).
using kiln::test::random_bytes;
// Lines of `text` that start with `prefix`.
std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix);

}  // namespace kiln::ops_test
