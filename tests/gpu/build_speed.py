"""Where an AOTInductor build's time goes on the GPU, and what a node-wide compiler cache,
precompiled headers, compile threads and side-by-side builds change (issue "Misses that
reach compiled speed").

  python3 tests/gpu/build_speed.py OUT_DIR [VARIANT ...]

Builds FLUX.1-dev's transformer (diffusers, real widths, 1 double + 1 single block, random
weights), captures one call's inputs of each block class, exports each class's first block
with torch.export (as kiln.torch does: strict=False, the block's own args and kwargs), and
then compiles them with `aoti_compile_and_package` exactly as kiln's worker does
(package_constants_in_so=False) in a fresh process per variant, so each pays what a
worker pays: `import torch`, Inductor's compile pool, empty or warm caches. Each child
reports torch's phase timers (the worker's `compile_phases`) and every C++ compile it ran
(precompiled header, wrapper, kernels), timed. A torch.compile of the same block in a fresh
process is the anchor. Writes OUT_DIR/build_speed.json and prints a table; stops starting
variants when KILN_BUILD_SPEED_S (default 540) seconds have passed.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(ROOT, "ops", "workers", "kiln_worker")
START = time.monotonic()
BUDGET_S = float(os.environ.get("KILN_BUILD_SPEED_S", "540"))

# name: (what, source, cache: "fresh" | name of an earlier variant whose cache it reuses, extra inductor configs, env)
VARIANTS = {
    "tiny-cold": ("a Linear(64, 64): the fixed cost of one build", "tiny64", "fresh", {}, {}),
    "tiny-warm": ("a Linear(128, 128) on tiny-cold's caches: the fixed cost left by a node cache", "tiny128",
                  "tiny-cold", {}, {}),
    "double-cold": ("FluxTransformerBlock, empty caches (today's worker)", "double", "fresh", {}, {}),
    "single-cold": ("FluxSingleTransformerBlock, empty caches (today's worker)", "single", "fresh", {}, {}),
    "single-after-double": ("FluxSingleTransformerBlock on double-cold's caches", "single", "double-cold", {}, {}),
    "double-1024": ("FluxTransformerBlock at 1024 image tokens on double-cold's caches (a new resolution)",
                    "double1024", "double-cold", {}, {}),
    "tc-single-cold": ("torch.compile of FluxSingleTransformerBlock, first call, empty caches (the anchor)",
                       "single", "fresh", {"torch_compile": True}, {}),
    "single-nopch": ("FluxSingleTransformerBlock, empty caches, no precompiled header", "single", "fresh",
                     {"aot_inductor.precompile_headers": False}, {}),
    "single-threads4": ("FluxSingleTransformerBlock, empty caches, 4 compile threads", "single", "fresh", {},
                        {"TORCHINDUCTOR_COMPILE_THREADS": "4"}),
    "pair-side-by-side": ("both block classes at once, empty caches each (kilnd's builds_per_gpu)", "pair", "fresh",
                          {}, {}),
    # today's worker (the ISA-probe fix), profiled: where the C++ phase's time goes now
    "single-now": ("FluxSingleTransformerBlock, empty caches, the worker's ISA-probe fix, profiled", "single", "fresh",
                   {"_isa_fix": True, "_profile": True}, {}),
    "double-now": ("FluxTransformerBlock on single-now's caches (a node's second class), profiled", "double",
                   "single-now", {"_isa_fix": True, "_profile": True}, {}),
    "double-now-O0": ("FluxTransformerBlock on single-now's caches, wrapper at -O0", "double", "single-now",
                      {"_isa_fix": True, "aot_inductor.compile_wrapper_opt_level": "O0"}, {}),
}

CHILD = r'''
import json, os, sys, time
t0 = time.monotonic()
import torch
import_s = time.monotonic() - t0
sys.path.insert(0, sys.argv[1])
import aoti
src, pkg, cfg = sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
if cfg.pop("_isa_fix", False):
    import isa_probe
    isa_probe.faster_isa_probes()
profile = cfg.pop("_profile", False)
cpp = []
import subprocess
procs = []
_run = subprocess.run
def timed_run(cmd, *a, **k):
    t = time.monotonic()
    try:
        return _run(cmd, *a, **k)
    finally:
        c = cmd if isinstance(cmd, str) else " ".join(map(str, cmd))
        procs.append([c[:160], round(time.monotonic() - t, 2)])
subprocess.run = timed_run
from torch._inductor import cpp_builder
_build = cpp_builder.CppBuilder.build
def timed_build(self, *a, **k):
    t = time.monotonic()
    try:
        return _build(self, *a, **k)
    finally:
        cpp.append([os.path.basename(str(self.get_target_file_path())), round(time.monotonic() - t, 2)])
cpp_builder.CppBuilder.build = timed_build
t = time.monotonic()
ep = torch.export.load(src)
load_s = time.monotonic() - t
metrics = aoti._inductor_metrics(); metrics.clear()
tc = cfg.pop("torch_compile", False)
t = time.monotonic()
if profile:
    import cProfile, pstats, io
    prof = cProfile.Profile()
    prof.enable()
with torch.no_grad():
    if tc:
        args, kwargs = torch.load(src + ".inputs", weights_only=False)
        torch.compile(ep.module())(*args, **kwargs)
        torch.cuda.synchronize()
    else:
        cfg["aot_inductor.package_constants_in_so"] = False
        torch._inductor.aoti_compile_and_package(ep, package_path=pkg, inductor_configs=cfg)
compile_s = time.monotonic() - t
top = []
if profile:
    prof.disable()
    st = pstats.Stats(prof)
    for (f, line, fn), (cc, nc, tt, ct, callers) in sorted(st.stats.items(), key=lambda kv: -kv[1][3])[:60]:
        if ct >= 0.3:
            top.append([f"{os.path.basename(f)}:{line}:{fn}", round(ct, 2), nc])
from torch._dynamo.utils import counters
print(json.dumps({"import_torch_s": round(import_s, 2), "load_source_s": round(load_s, 2),
                  "compile_s": round(compile_s, 2),
                  "phases": {k[:-2]: round(v, 2) for k, v in aoti.compile_phases(metrics, compile_s).items()},
                  "cpp_compiles": cpp, "subprocess_runs": procs[:80], "profile_top": top, "kernels": int(counters["inductor"].get("generated_kernel_count", 0)),
                  "compile_threads": torch._inductor.config.compile_threads,
                  "package_bytes": os.path.getsize(pkg) if os.path.exists(pkg) else 0}))
'''


def prepare(work):
    """Exports FLUX's two block classes (and tiny Linears) to WORK/<name>.pt2 with their inputs."""
    import torch
    sys.path.insert(0, HERE)
    import families_gpu_configs as cfgs

    out = {}
    model = cfgs.build_model("flux", 0, work)
    fam = cfgs.FAMILIES["flux"]
    for tokens in (4096, 1024):
        captured = {}

        def grab(name):
            def hook(mod, args, kwargs):
                if name not in captured:
                    captured[name] = (mod, tuple(a.detach().clone() if torch.is_tensor(a) else a for a in args),
                                      {k: (v.detach().clone() if torch.is_tensor(v) else v) for k, v in kwargs.items()})
            return hook

        hooks = [model.transformer_blocks[0].register_forward_pre_hook(grab("double"), with_kwargs=True),
                 model.single_transformer_blocks[0].register_forward_pre_hook(grab("single"), with_kwargs=True)]
        inputs = fam.inputs(model, 0)
        if tokens != 4096:  # 512x512: 32x32 packed latents
            inputs["hidden_states"] = inputs["hidden_states"][:, :tokens]
            inputs["img_ids"] = cfgs._flux_ids(32, 32).to(inputs["img_ids"].dtype)
        with torch.no_grad():
            model(**inputs)
        for h in hooks:
            h.remove()
        for name, (mod, args, kwargs) in captured.items():
            label = name if tokens == 4096 else name + str(tokens)
            if label == "single1024":
                continue
            t = time.monotonic()
            ep = torch.export.export(mod, args, kwargs, strict=False)
            path = os.path.join(work, label + ".pt2")
            torch.export.save(ep, path)
            torch.save((args, kwargs), path + ".inputs")
            out[label] = {"path": path, "export_s": round(time.monotonic() - t, 2), "bytes": os.path.getsize(path)}
    for n in (64, 128):
        lin = torch.nn.Linear(n, n, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(8, n, device="cuda", dtype=torch.bfloat16)
        ep = torch.export.export(lin, (x,))
        path = os.path.join(work, f"tiny{n}.pt2")
        torch.export.save(ep, path)
        torch.save(((x,), {}), path + ".inputs")
        out[f"tiny{n}"] = {"path": path}
    return out


def compile_child(source, cache, cfg, env_extra, work, label):
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"),
               TRITON_CACHE_DIR=os.path.join(cache, "triton"), **env_extra)
    pkg = os.path.join(work, label + ".package.pt2")
    return subprocess.Popen([sys.executable, "-c", CHILD, WORKER, source, pkg, json.dumps(cfg)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(p, label, logs):
    out, err = p.communicate(timeout=900)
    logs.write(f"===== {label} (exit {p.returncode})\n{err[-20000:]}\n")
    lines = [l for l in out.splitlines() if l.startswith("{")]
    return json.loads(lines[-1]) if p.returncode == 0 and lines else {"error": err[-1500:]}


def main():
    out_dir = sys.argv[1]
    wanted = sys.argv[2:] or list(VARIANTS)
    os.makedirs(out_dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="kiln-build-speed-")
    t = time.monotonic()
    sources = prepare(work)
    results = {"gpu": _gpu(), "torch": _torch_version(), "cpus": os.cpu_count(), "prepare_s": round(time.monotonic() - t, 1),
               "sources": sources, "variants": {}}
    caches = {}
    with open(os.path.join(out_dir, "build_speed_logs.txt"), "w") as logs:
        for label in wanted:
            if time.monotonic() - START > BUDGET_S:
                results["variants"][label] = {"skipped": "out of time"}
                continue
            what, src, cache_from, cfg, env_extra = VARIANTS[label]
            cache = os.path.join(work, "cache-" + label)
            if cache_from != "fresh":
                shutil.copytree(caches[cache_from], cache)
            caches[label] = cache
            t = time.monotonic()
            if src == "pair":
                procs = [(n, compile_child(sources[n]["path"], cache + "-" + n, dict(cfg), env_extra, work, label + n))
                         for n in ("double", "single")]
                row = {n: finish(p, f"{label} {n}", logs) for n, p in procs}
            else:
                row = finish(compile_child(sources[src]["path"], cache, dict(cfg), env_extra, work, label), label, logs)
            row.update(what=what, wall_s=round(time.monotonic() - t, 2))
            results["variants"][label] = row
            print(f"{label:22s} {row['wall_s']:7.1f} s  {json.dumps({k: v for k, v in row.items() if k != 'what'})[:600]}",
                  flush=True)
            with open(os.path.join(out_dir, "build_speed.json"), "w") as f:
                json.dump(results, f, indent=1)
    shutil.rmtree(work, ignore_errors=True)


def _gpu():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True).stdout.strip()
    except OSError:
        return "?"


def _torch_version():
    import torch
    return torch.__version__


if __name__ == "__main__":
    main()
