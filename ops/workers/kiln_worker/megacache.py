"""The `megacache` build: torch.compile's portable cache artifacts for the block.

The block (the source's exported module) is compiled with torch.compile and run once on
inputs of the key's signature; torch.compiler.save_cache_artifacts() then holds every
compiled artifact that run produced (Inductor, AOTAutograd, autotuning). A process that
loads them with torch.compiler.load_cache_artifacts() and compiles the same module starts
warm. Checked before handing over: new random weights are copied into the module, the
compiled module is run again (weights are graph inputs, no recompile) and compared with
eager.

torch keys the entries by device, index included: they are built on cuda:0 (kilnd's
CUDA_VISIBLE_DEVICES gives the worker one GPU) and warm a consumer whose block runs on
cuda:0 of its own process (schema/key.md, "The device index never enters a key").
"""
import os
import time

import call_structure
import signature
from report import WorkerError, log


def compile_kwargs(opts):
    cfg = signature.inductor_configs(opts)
    kwargs = {"options": cfg} if cfg else {}
    if "dynamic" in opts:
        kwargs["dynamic"] = bool(opts["dynamic"])
    return kwargs


def build(request):
    import torch

    key = request["key"]
    output = request["output"]
    timings = {}

    t = time.monotonic()
    signature.check_node(key)
    opts = signature.compile_options(key)
    ep = signature.load_source(request["source"], model_hash=key.get("model_hash"))
    signature.check_key(ep, key)
    _, call, _ = signature.call_signature(ep)
    timings["load_source_s"] = time.monotonic() - t

    mod = ep.module()
    kwargs = compile_kwargs(opts)
    log(f"megacache: torch.compile with {kwargs}")
    compiled = torch.compile(mod, **kwargs)
    inputs = signature.random_inputs(key["inputs"])
    args, kwargs = call_structure.build_arguments(call, inputs)  # the call as exported
    t = time.monotonic()
    with torch.no_grad():
        compiled(*args, **kwargs)
    torch.cuda.synchronize()
    compile_s = time.monotonic() - t
    log(f"megacache: compiled and ran in {compile_s:.1f} s")

    saved = torch.compiler.save_cache_artifacts()
    if saved is None or not saved[0]:
        raise WorkerError("torch.compile produced no cache artifacts to save")
    data, info = saved
    artifacts = getattr(info, "artifacts", {}) or {}
    counts = {str(k): len(v) for k, v in artifacts.items()}
    log(f"megacache: {len(data)} bytes, artifacts {counts}")

    weights = signature.perturbed_weights(ep)
    own = {**dict(mod.named_parameters()), **dict(mod.named_buffers())}
    with torch.no_grad():
        for name, w in weights.items():
            if name in own:
                own[name].copy_(w)
        outs = [o.clone() for o in signature.flatten(compiled(*args, **kwargs))]
        refs = signature.flatten(mod(*args, **kwargs))
    torch.cuda.synchronize()
    check = signature.compare(outs, refs, key.get("dtype"))

    tmp = output + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, output)
    return {
        "artifact": {"path": output, "size": len(data), "sha256": signature.file_digest(output)},
        "compile_seconds": round(compile_s, 3),
        "check": check,
        "cache_artifacts": counts,
        "timings": {k: round(v, 4) for k, v in timings.items()},
    }
