// Probing the node at scheduler start. See node_probe.hpp.
#include "node_probe.hpp"

#include <filesystem>
#include <string_view>

#include <spdlog/spdlog.h>

#include "compiler_cache.hpp"
#include "kiln/builds/worker_protocol.hpp"

namespace kiln::build {

namespace {

void prefer(std::string& field, const std::string& configured) {
  if (!configured.empty()) field = configured;
}

std::string slot_refusal(const GpuProbe& gpus) {
  const std::string why = gpus.note.empty() ? "no build slot is configured" : "no GPU was found (" + gpus.note + ")";
  return why + "; it serves stored artifacts only (configure [builds] slots in kilnd.toml to build CPU-target artifacts)";
}

}  // namespace

std::string toolchain_refusal(const std::string& probe_error) {
  // Python's words for a torch that is not installed: the common case on a node whose
  // worker's python is not the serving environment's.
  if (probe_error.find("No module named 'torch'") != std::string::npos)
    return "its build worker has no torch (probe: " + probe_error +
           "); install torch for the worker's python, or set [builds] worker in kilnd.toml";
  // Messages that already say what is wrong and what to do (the worker's own, written for
  // this line: ops/workers/kiln_worker/toolchain.py).
  if (probe_error.starts_with("the build worker is not installed")) return probe_error;
  if (probe_error.find("AOTInductor package loader cannot unpack") != std::string::npos) {
    constexpr std::string_view failed = "the build worker failed: ";
    return probe_error.starts_with(failed) ? probe_error.substr(failed.size()) : probe_error;
  }
  return "its build worker did not report a toolchain (probe: " + probe_error + ")";
}

std::string worker_gpu_refusal(std::size_t kilnd_gpus, const ToolchainReport& worker, bool sandboxed) {
  if (kilnd_gpus == 0 || !worker.gpus.empty()) return {};
  const std::string& cuda = worker.fields.cuda_version;
  if (cuda.empty() || cuda == "none") return {};  // a CPU build of torch sees no GPU by design
  return "its build worker's torch (CUDA " + cuda + ") sees no GPU while kilnd found " + std::to_string(kilnd_gpus) +
         (sandboxed ? "; the worker sandbox may be what stops CUDA (check with [builds] sandbox = false, "
                      "schema/worker-protocol.md, \"Sandbox\")"
                    : "; check the worker's CUDA_VISIBLE_DEVICES and driver access");
}

ProbedNode probe_node(const SchedulerOptions& options, const NodeFields& host, const std::atomic<bool>* cancel) {
  ProbedNode p;
  if (options.probe_gpus) {
    p.gpus = probe_gpus();
  } else {
    p.gpus.note = "GPU probe disabled in the configuration";
  }
  if (!options.slots.empty()) {
    p.slots = options.slots;
  } else {
    for (const GpuInfo& g : p.gpus.gpus) {
      SlotConfig s;
      s.name = "gpu" + std::to_string(g.index);
      s.gpu_arch = g.arch;
      s.gpu_name = g.name;
      s.visible_device = g.uuid.empty() ? std::to_string(g.index) : g.uuid;
      s.memory_bytes = g.memory_bytes;
      p.slots.push_back(std::move(s));
    }
  }

  WorkerLimits limits;
  limits.timeout = options.probe_timeout;
  limits.max_log = 64 * 1024;
  // A worker given as an interpreter and a path (the default: python3 <folder>) that is not
  // there says so plainly, instead of whatever the interpreter prints about it.
  const auto& argv = options.worker.argv;
  std::error_code ec;
  Result<ToolchainReport> tc = make_error(Errc::not_found, "");
  if (argv.size() == 2 && std::filesystem::path(argv[1]).is_absolute() && !std::filesystem::exists(argv[1], ec)) {
    tc = make_error(Errc::not_found, "the build worker is not installed at " + argv[1] +
                                         " (install kiln's workers there, or set [builds] worker in kilnd.toml)");
  } else {
    // With the builds' compiler caches: the CPU ISA it finds is the one they compile for.
    WorkerCommand worker = options.worker;
    if (auto st = use_node_compiler_cache(options, worker); !st) {
      tc = std::move(st).error();
    } else {
      WorkerExit exit = run_worker(worker, encode_toolchain_request(), limits, cancel);
      tc = parse_toolchain_result(exit);
    }
  }
  std::string gpu_refusal;
  if (tc) {
    p.node = tc->fields;
    if (options.slots.empty()) gpu_refusal = worker_gpu_refusal(p.gpus.gpus.size(), *tc, options.worker.sandbox.enabled);
  } else {
    p.toolchain_error = tc.error().message;
  }
  if (!p.slots.empty()) {
    p.node.gpu_arch = p.slots.front().gpu_arch;
    p.node.gpu_name = p.slots.front().gpu_name;
  }
  // Configured fields win over what the probes found (`host` holds only what kilnd.toml's
  // [node] sets; kilnd's own detection fills the fields still empty afterwards).
  prefer(p.node.gpu_arch, host.gpu_arch);
  prefer(p.node.gpu_name, host.gpu_name);
  prefer(p.node.torch_version, host.torch_version);
  prefer(p.node.torch_git, host.torch_git);
  prefer(p.node.cuda_version, host.cuda_version);
  prefer(p.node.triton_version, host.triton_version);
  prefer(p.node.platform, host.platform);
  prefer(p.node.machine, host.machine);
  prefer(p.node.cpu_isa, host.cpu_isa);

  if (p.slots.empty()) p.refusal = slot_refusal(p.gpus);
  else if (!p.toolchain_error.empty()) p.refusal = toolchain_refusal(p.toolchain_error);
  else p.refusal = gpu_refusal;

  std::string slots;
  for (const auto& s : p.slots) slots += (slots.empty() ? "" : ", ") + s.name + " (" + s.gpu_arch + " " + s.gpu_name + ")";
  // An unknown toolchain is said so, not printed as empty versions.
  const std::string toolchain = p.toolchain_error.empty()
                                    ? "torch " + p.node.torch_version + " (" + p.node.torch_git + "), CUDA " +
                                          p.node.cuda_version + ", Triton " + p.node.triton_version
                                    : "unknown";
  spdlog::info("builds: {} GPU(s){}; toolchain {}; build slots: {}", p.gpus.gpus.size(),
               p.gpus.note.empty() ? "" : " (" + p.gpus.note + ")", toolchain, slots.empty() ? "none" : slots);
  if (!p.refusal.empty()) spdlog::warn("builds: refused: this node cannot build: {}", p.refusal);
  return p;
}

}  // namespace kiln::build
