// kiln/builds/options.hpp — the [builds] section of kilnd.toml.
//
//   [builds]
//   enabled = true              # false: kilnd builds nothing (build ops answer unsupported)
//   worker = ["python3", "/usr/share/kiln/workers/kiln_worker"]   # default: see below
//   work_dir = "/var/lib/kiln/builds"   # default: <store>/builds
//   probe_gpus = true           # ask the CUDA driver for GPUs (one build slot per GPU)
//   builds_per_gpu = 2          # builds at once per slot
//   shared_compiler_cache = true  # one Inductor/Triton cache for the node's builds
//                               # (work_dir/compiler-cache); false: fresh ones per build
//   build_timeout_s = 1800      # a worker past this is killed with its process group
//   probe_timeout_s = 180       # the worker's toolchain probe at start
//   source_check_timeout_s = 600  # a source's hash op when it is registered (PUT_SOURCE)
//   failure_ttl_s = 600         # a failed key fails fast this long (0 = never remembered)
//   max_log_bytes = 1048576     # stderr kept per build (its last bytes)
//   keep_failed_work = false    # keep a failed build's scratch folder under work_dir/jobs
//   cancel_unwanted = true      # stop a build once nobody waits for it (every waiter left or
//                               # timed out, no prewarm wants it): dropped when queued, its
//                               # worker killed when running; not a failure. false: every
//                               # build runs to its end and its artifact is stored
//   sandbox = true              # confine each worker: writes only to its build's folder, no
//                               # network sockets, no io_uring, no_new_privs (Landlock and
//                               # seccomp; what the kernel lacks is skipped and reported).
//                               # false: workers run with kilnd's own rights
//   worker_user = ""            # run workers as this user (not root; kilnd must be root to
//                               # switch). "" = kilnd's own user
//   [[builds.slots]]            # explicit slots replace the probed GPUs
//   name = "cpu0"; gpu_arch = "cpu"; gpu_name = "x86_64"; visible_device = ""
//
// The default worker is `python3 <kilnd's folder>/../share/kiln/workers/kiln_worker`: the
// installed workers beside an installed kilnd (/usr/sbin/kilnd -> /usr/share/kiln/...), and
// in a build tree a link to the source's ops/workers placed at the same relative path. An
// installed kilnd never falls back to a source tree; a missing worker is reported by
// kilnd's start-up log and `kilnctl status` (builds unavailable, with the path).
#pragma once

#include <filesystem>
#include <optional>
#include <string_view>

#include "kiln/builds/scheduler.hpp"
#include "kiln/result.hpp"

namespace kiln::build {

struct BuildsConfig {
  bool enabled = true;
  SchedulerOptions scheduler;
};

// Where the default worker lives for this process (see above); not checked for existence.
std::filesystem::path default_worker_dir();

// Defaults for a store at `store_root` (work_dir = <store_root>/builds).
BuildsConfig default_builds_config(const std::filesystem::path& store_root);

// Applies the [builds] table of a TOML document (absent: no change). Errors
// (invalid_argument) name the origin, the option and what is wrong (worker_user: no such
// user, or root); `config` is then unchanged.
Status apply_builds_toml(BuildsConfig& config, std::string_view toml, std::string_view origin);
// Same, from a file; io_error when it cannot be read.
Status apply_builds_toml_file(BuildsConfig& config, const std::filesystem::path& file);

}  // namespace kiln::build
