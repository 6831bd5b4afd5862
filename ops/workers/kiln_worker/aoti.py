"""The `aoti` build: an AOTInductor package with its weights kept out of the .so.

Weights are left out (aot_inductor.package_constants_in_so = False) so that one package
serves every block of its class and every fine-tune: a loader attaches them as
user-managed constants. The package is checked before it is handed over: loaded through
the C++ loader, given random weights, run, and compared with eager.
"""
import os
import time

import call_structure
import inductor_headers
import isa_probe
import signature
from report import WorkerError, log


def build(request):
    import torch

    key = request["key"]
    output = request["output"]
    workdir = request.get("workdir") or os.path.dirname(output)
    timings = {}

    t = time.monotonic()
    signature.check_node(key)
    opts = signature.compile_options(key)
    device = signature.build_device(key)
    ep = signature.load_source(request["source"], device=device, model_hash=key.get("model_hash"))
    signature.check_key(ep, key)
    _, call, order = signature.call_signature(ep)
    timings["load_source_s"] = time.monotonic() - t

    cfg = signature.inductor_configs(opts)
    cfg["aot_inductor.package_constants_in_so"] = False
    if isa_probe.faster_isa_probes():
        log("aoti: Inductor's CPU-ISA probes load without importing torch (this torch imports it in each)")
    headers = inductor_headers.share_precompiled_headers()
    if headers:
        log(f"aoti: precompiled headers in {headers}")
    package = os.path.join(workdir, "package.pt2")
    log(f"aoti: compiling with inductor configs {cfg}")
    metrics = _inductor_metrics()
    metrics.clear()  # this build's own: the worker may have compiled before in this process
    t = time.monotonic()
    with torch.no_grad():
        package = torch._inductor.aoti_compile_and_package(ep, package_path=package, inductor_configs=cfg)
    compile_s = time.monotonic() - t
    timings.update(compile_phases(metrics, compile_s))
    log(f"aoti: compiled in {compile_s:.1f} s -> {package} ({os.path.getsize(package)} bytes)")

    t = time.monotonic()
    # Device index -1: the package's own device (cuda:0 under the slot's CUDA_VISIBLE_DEVICES, or the CPU).
    try:
        loader = torch._C._aoti.AOTIModelPackageLoader(package, "model", False, 1, -1)
    except RuntimeError as ex:
        # kilnd's toolchain probe refuses builds where this happens (toolchain.py); a
        # worker run outside kilnd can still meet it
        if "temporary directory" in str(ex):
            import toolchain
            raise WorkerError(toolchain.unpack_refusal(torch.__version__, ex)) from ex
        raise
    timings["package_load_s"] = time.monotonic() - t
    weights = signature.perturbed_weights(ep, device=device)
    fqns = list(loader.get_constant_fqns())
    weights, renamed = signature.package_constant_names(ep, weights, fqns)
    missing = [f for f in fqns if f not in weights]
    if missing:
        raise WorkerError(f"package wants constants the source does not have: {missing[:5]}")
    folded = signature.folded_weights(ep, weights, fqns)
    if folded:
        raise WorkerError(f"AOTInductor folded the weights {folded[:5]} into the package at compile time: it would "
                          "compute with the builder's values of them, not the caller's; not storing it")
    t = time.monotonic()
    loader.load_constants({f: weights[f] for f in fqns}, False, False, True)
    timings["attach_weights_s"] = time.monotonic() - t

    inputs = signature.random_inputs(key["inputs"], device=device, strides=signature.input_strides(ep, order))
    # The package takes the tensor leaves in torch.export's flat order; the key lists them
    # in kiln's canonical order (schema/key.md, "call").
    t = time.monotonic()
    flat = call_structure.flat_order_of(inputs, order)
    with torch.no_grad():
        outs = signature.flatten(loader.run(flat))
        refs = signature.eager_outputs(ep, weights, inputs, call)
    if device == "cuda":
        torch.cuda.synchronize()
    timings["check_run_s"] = time.monotonic() - t
    check = signature.compare(outs, refs, key.get("dtype"))
    t = time.monotonic()
    check["step_s"] = step_seconds(loader.run, flat, device)
    timings["step_timing_s"] = time.monotonic() - t
    log(f"check: step {check['step_s'] * 1e3:.3f} ms (median of the package's runs on the check's inputs)")
    del loader

    if renamed:
        record_constant_names(package, renamed)
    record_check(package, check, opts)
    os.replace(package, output)
    return {
        "artifact": {"path": output, "size": os.path.getsize(output), "sha256": signature.file_digest(output)},
        "compile_seconds": round(compile_s, 3),
        "check": check,
        "constants": len(fqns),
        "timings": {k: round(v, 4) for k, v in timings.items()},
        "phases": {k[:-2]: round(v, 3) for k, v in timings.items() if k.endswith("_s")},
    }


# The step timing of the check: at least STEP_MIN_RUNS runs, more until STEP_BUDGET_S has
# passed or STEP_MAX_RUNS ran. A median of a few is what kiln.torch compares variants by
# (as a hint: it times both packages side by side in its own process before switching).
STEP_MIN_RUNS, STEP_MAX_RUNS, STEP_BUDGET_S = 5, 50, 0.5


def step_seconds(run, inputs, device):
    """The median wall time of run(inputs) (one package call on the check's inputs), the
    GPU synchronised after each; after one untimed warm-up run."""
    import statistics

    import torch

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    with torch.no_grad():
        run(inputs)
        sync()
        times, began = [], time.monotonic()
        while len(times) < STEP_MIN_RUNS or (len(times) < STEP_MAX_RUNS and time.monotonic() - began < STEP_BUDGET_S):
            t = time.perf_counter()
            run(inputs)
            sync()
            times.append(time.perf_counter() - t)
    return round(statistics.median(times), 7)


def record_check(package, check, opts):
    """Adds `<root>/kiln/check.json` to the package: the check's error, its tolerance, the
    step time and the compile options it was built with (schema/worker-protocol.md,
    "The package's kiln/ entries"). It travels with the artifact (store, registry, signed
    with it), so a process that loads a variant can weigh it against its default."""
    import json

    record = {"rel_err": check["rel_err"], "max_abs_err": check["max_abs_err"], "tolerance": check["tolerance"],
              "step_s": check["step_s"], "compile_options": opts}
    _add_member(package, "kiln/check.json", json.dumps(record, sort_keys=True))


def _add_member(package, name, text):
    import zipfile

    with zipfile.ZipFile(package, "a") as z:
        root = z.namelist()[0].split("/")[0]
        # Stored, not deflated: kiln's C++ loader reads members without a decompressor.
        z.writestr(f"{root}/{name}", text, compress_type=zipfile.ZIP_STORED)


def record_constant_names(package, renamed):
    """Adds `<root>/kiln/constant_names.json` ({package constant: source attribute}) to the
    package: AOTInductor's loader reads only its own entries, and kiln's loaders map each
    `_tensor_constant<n>` to the block's attribute with it (schema/worker-protocol.md)."""
    import json

    _add_member(package, "kiln/constant_names.json", json.dumps(renamed, sort_keys=True))


def _inductor_metrics():
    """torch's own per-phase compile times ({name: [seconds, ...]}, process-wide)."""
    try:
        from torch._dynamo.utils import compilation_time_metrics
    except ImportError:
        return {}
    return compilation_time_metrics


# Where an AOTInductor build's time goes, from torch's phase timers (names as torch 2.6-2.15
# record them): the graph's lowering to kernels and wrapper code, the kernels' compiles
# (Triton on a GPU; none on a CPU, whose kernels are C++), autotuning, and the C++ compile of
# the wrapper (and, on a CPU, of the kernels). What the timers do not cover of the whole
# call is the front end: AOT tracing, graph passes and packaging.
_PHASES = (
    ("inductor_lowering_s", ("GraphLowering.run", "GraphLowering.codegen")),
    ("kernel_compile_s", ("async_compile.wait",)),
    ("autotune_s", ("autotune", "benchmark_all_configs", "select_algorithm")),
    ("cpp_compile_s", ("AotCodeCompiler.compile",)),
)


def compile_phases(metrics, compile_s):
    """{phase_s: seconds} of one aoti_compile_and_package call of `compile_s` seconds."""
    out = {phase: sum(sum(v) for k, v in metrics.items() if any(n in k for n in names)) for phase, names in _PHASES}
    inner = sum(metrics.get("fx_codegen_and_compile", [])) or sum(out.values())
    out["frontend_s"] = max(0.0, compile_s - inner)
    return out
