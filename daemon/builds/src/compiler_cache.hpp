// The node's compiler caches, shared by every build worker and the toolchain probe.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>

#include "kiln/builds/scheduler.hpp"

namespace kiln::build {

// The folder kilnd names to a worker in KILN_WORKER_PYCACHE: where it keeps the bytecode of
// the Python it imports when its torch has none beside its sources (ops/workers/kiln_worker
// bytecode.py). An installation without .pyc files (uv's default, images built with
// PYTHONDONTWRITEBYTECODE) that a worker cannot write into (the sandbox, worker_user, a
// read-only image) has every worker compile torch, Inductor and torch.export from source:
// 13-16 s per process on the H200 node's uv-installed torch 2.11, against a few seconds once
// the bytecode is cached (tests/gpu/RESULTS-build-speed.md, 8). Bytecode is checked against
// its source's mtime and size at each import, so one folder serves the node's builds, hash
// checks and probe; with `shared_compiler_cache` off, a build's is its own (in `job_dir`), and a
// run without one gets none. io_error when the folder cannot be made or given away.
inline Status use_node_bytecode_cache(const SchedulerOptions& options, WorkerCommand& cmd,
                                      const std::filesystem::path& job_dir = {}) {
  namespace fs = std::filesystem;
  if (!options.shared_compiler_cache) {
    if (!job_dir.empty()) cmd.env["KILN_WORKER_PYCACHE"] = (job_dir / "python-cache").string();
    return {};
  }
  const fs::path dir = options.work_dir / "compiler-cache" / "python";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return make_error(Errc::io_error, "cannot create the bytecode cache " + dir.string() + ": " + ec.message());
  if (const auto& user = cmd.sandbox.user) {
    for (const fs::path& p : {dir.parent_path(), dir})
      if (::chown(p.c_str(), user->uid, user->gid) != 0)
        return error_from_errno(errno, "cannot give the bytecode cache " + p.string() + " to worker_user " + user->name);
  }
  cmd.env["KILN_WORKER_PYCACHE"] = dir.string();
  cmd.sandbox.writable.push_back(dir);
  return {};
}

// Points `cmd` at work_dir/compiler-cache/{inductor,triton,python} (created, writable in the
// worker's sandbox, owned by worker_user when there is one) and gives it its share of the
// node's cores as Inductor compile threads. With `shared_compiler_cache` off, a build's
// caches are fresh folders in its own `job_dir` (the probe, with no job_dir, keeps
// Inductor's default: a folder in its private TMPDIR).
//
// Inductor's and Triton's caches are content-addressed (an entry is named by the hash of
// what it compiles, the compiler, torch's and Triton's versions and the options), so what
// one build compiled (the wrapper's precompiled header, a kernel, a Triton launcher, the
// CPU-ISA probe libraries) is right for every later one: a second block class, resolution
// or fine-tune skips it (tests/gpu/RESULTS-build-speed.md). The toolchain probe uses them
// too, so the CPU ISA it reports for the node's keys is the one builds then compile for.
// Inductor's default is every core per process, and builds side by side would each start
// that many compile processes. io_error when the folders cannot be made or given away.
inline Status use_node_compiler_cache(const SchedulerOptions& options, WorkerCommand& cmd,
                                      const std::filesystem::path& job_dir = {}) {
  namespace fs = std::filesystem;
  const unsigned builds = static_cast<unsigned>(std::max<std::size_t>(1, options.slots.size())) *
                          std::max(1u, options.builds_per_slot);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  cmd.env["TORCHINDUCTOR_COMPILE_THREADS"] = std::to_string(std::clamp(cores / builds, 1u, 32u));
  if (auto st = use_node_bytecode_cache(options, cmd, job_dir); !st) return st;
  if (!options.shared_compiler_cache) {
    if (!job_dir.empty()) {
      cmd.env["TORCHINDUCTOR_CACHE_DIR"] = (job_dir / "inductor-cache").string();
      cmd.env["TRITON_CACHE_DIR"] = (job_dir / "triton-cache").string();
    }
    return {};
  }
  const fs::path root = options.work_dir / "compiler-cache";
  for (const char* sub : {"inductor", "triton"}) {
    std::error_code ec;
    fs::create_directories(root / sub, ec);
    if (ec) return make_error(Errc::io_error, "cannot create the compiler cache " + (root / sub).string() + ": " + ec.message());
  }
  cmd.env["TORCHINDUCTOR_CACHE_DIR"] = (root / "inductor").string();
  cmd.env["TRITON_CACHE_DIR"] = (root / "triton").string();
  cmd.sandbox.writable.push_back(root);
  if (const auto& user = cmd.sandbox.user) {
    for (const fs::path& p : {root, root / "inductor", root / "triton"})
      if (::chown(p.c_str(), user->uid, user->gid) != 0)
        return error_from_errno(errno, "cannot give the compiler cache " + p.string() + " to worker_user " + user->name);
  }
  return {};
}

}  // namespace kiln::build
