"""The `aoti` build: an AOTInductor package with its weights kept out of the .so.

Weights are left out (aot_inductor.package_constants_in_so = False) so that one package
serves every block of its class and every fine-tune: a loader attaches them as
user-managed constants. The package is checked before it is handed over: loaded through
the C++ loader, given random weights, run, and compared with eager.
"""
import os
import time

import call_structure
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
        # torch 2.11's loader unpacks into mkdtemp("/tmp/XXXXXX"), whatever TMPDIR says
        # (seen on an H200; torch 2.15's honours TMPDIR), and kilnd's sandbox lets the
        # worker write its own folders only.
        if "temporary directory" in str(ex) and not os.access("/tmp", os.W_OK):
            raise WorkerError(f"torch {torch.__version__}'s AOTInductor loader unpacks the package into /tmp, "
                              "whatever TMPDIR says, and the worker sandbox lets it write its own folders only: "
                              "on this node set [builds] sandbox = false (SECURITY.md) or use a newer torch "
                              f"({ex})") from ex
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
    with torch.no_grad():
        outs = signature.flatten(loader.run(call_structure.flat_order_of(inputs, order)))
        refs = signature.eager_outputs(ep, weights, inputs, call)
    if device == "cuda":
        torch.cuda.synchronize()
    timings["check_run_s"] = time.monotonic() - t
    check = signature.compare(outs, refs, key.get("dtype"))
    del loader

    if renamed:
        record_constant_names(package, renamed)
    os.replace(package, output)
    return {
        "artifact": {"path": output, "size": os.path.getsize(output), "sha256": signature.file_digest(output)},
        "compile_seconds": round(compile_s, 3),
        "check": check,
        "constants": len(fqns),
        "timings": {k: round(v, 4) for k, v in timings.items()},
        "phases": {k[:-2]: round(v, 3) for k, v in timings.items() if k.endswith("_s")},
    }


def record_constant_names(package, renamed):
    """Adds `<root>/kiln/constant_names.json` ({package constant: source attribute}) to the
    package: AOTInductor's loader reads only its own entries, and kiln's loaders map each
    `_tensor_constant<n>` to the block's attribute with it (schema/worker-protocol.md)."""
    import json
    import zipfile

    with zipfile.ZipFile(package, "a") as z:
        root = z.namelist()[0].split("/")[0]
        # Stored, not deflated: kiln's C++ loader reads members without a decompressor.
        z.writestr(f"{root}/kiln/constant_names.json", json.dumps(renamed, sort_keys=True),
                   compress_type=zipfile.ZIP_STORED)


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
