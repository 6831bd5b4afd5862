"""Worker-level GPU check: runs kiln's build workers alone (no daemon) on the FLUX-shaped
blocks and measures compile time, load time, correctness and step time.

  python3 tests/gpu/worker_check.py --work DIR --out DIR

Writes worker_check.json (every number) and worker_logs.txt (every worker's stderr).
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(ROOT, "ops", "workers", "kiln_worker")
sys.path.insert(0, HERE)


def run_worker(request, logs, label, timeout=900):
    t = time.monotonic()
    p = subprocess.run([sys.executable, WORKER], input=json.dumps(request), capture_output=True,
                       text=True, timeout=timeout)
    wall = time.monotonic() - t
    logs.write(f"===== {label} (exit {p.returncode}, {wall:.1f} s)\n{p.stderr}\n")
    logs.flush()
    lines = [l for l in p.stdout.splitlines() if l.strip()]
    if len(lines) != 1:
        raise SystemExit(f"{label}: worker stdout should be one line, got {p.stdout!r}")
    result = json.loads(lines[0])
    result["wall_seconds"] = round(wall, 3)
    return result


def export_sources(work):
    import torch
    import flux_blocks as fb

    out = {}
    for block, seed in (("single", 0), ("double", 0), ("single", 1)):
        m = fb.make_block(block, seed=seed)
        args = fb.example_inputs(block)
        t = time.monotonic()
        ep = torch.export.export(m, args)
        path = os.path.join(work, f"{block}-seed{seed}.pt2")
        torch.export.save(ep, path)
        out[f"{block}-seed{seed}"] = {"path": path, "export_s": round(time.monotonic() - t, 2),
                                      "bytes": os.path.getsize(path)}
        del m, ep
    return out


def fresh_process_load(package, source, logs):
    """Times a hit's Python-side path in a fresh process: load package, attach weights, run."""
    code = r'''
import json, sys, time
t0 = time.monotonic()
import torch
t_import = time.monotonic() - t0
sys.path.insert(0, sys.argv[3])
import signature
t = time.monotonic()
loader = torch._C._aoti.AOTIModelPackageLoader(sys.argv[1], "model", False, 1, -1)
t_load = time.monotonic() - t
ep = signature.load_source(sys.argv[2])
w = signature.perturbed_weights(ep)
t = time.monotonic()
loader.load_constants({f: w[f] for f in loader.get_constant_fqns()}, False, False, True)
t_attach = time.monotonic() - t
spec = signature.key_inputs(ep)
x = signature.random_inputs(spec)
with torch.no_grad():
    t = time.monotonic(); out = loader.run(list(x)); torch.cuda.synchronize(); t_first = time.monotonic() - t
    for _ in range(5): loader.run(list(x))
    torch.cuda.synchronize()
    t = time.monotonic()
    for _ in range(50): loader.run(list(x))
    torch.cuda.synchronize(); step = (time.monotonic() - t) / 50
    mod = ep.module()
    own = {**dict(mod.named_parameters()), **dict(mod.named_buffers())}
    for k, v in w.items():
        if k in own: own[k].copy_(v)
    for _ in range(5): mod(*x)
    torch.cuda.synchronize(); t = time.monotonic()
    for _ in range(50): mod(*x)
    torch.cuda.synchronize(); eager = (time.monotonic() - t) / 50
    ref = signature.flatten(mod(*x))
cmp = signature.compare(signature.flatten(out), ref, "bfloat16")
print(json.dumps({"import_torch_s": t_import, "package_load_s": t_load, "attach_weights_s": t_attach,
                  "first_run_s": t_first, "step_ms": step * 1e3, "eager_step_ms": eager * 1e3, "check": cmp}))
'''
    p = subprocess.run([sys.executable, "-c", code, package, source, WORKER], capture_output=True, text=True,
                       env=preload_env(), timeout=600)
    logs.write(f"===== fresh load {package} (exit {p.returncode})\n{p.stderr}\n")
    return json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {"error": p.stderr[-2000:]}


def fresh_process_megacache(artifact, source, logs, own_module):
    """Warm start in a fresh process: load the cache artifacts, torch.compile, first call."""
    code = r'''
import json, sys, time
import torch
from torch._dynamo.utils import counters
sys.path.insert(0, sys.argv[3]); sys.path.insert(0, sys.argv[4])
import signature
data = open(sys.argv[1], "rb").read()
t = time.monotonic()
torch.compiler.load_cache_artifacts(data)
t_load = time.monotonic() - t
ep = signature.load_source(sys.argv[2])
if sys.argv[5] == "own":
    import flux_blocks as fb
    mod = fb.make_block("single" if "single" in sys.argv[2] else "double", seed=7)
else:
    mod = ep.module()
x = signature.random_inputs(signature.key_inputs(ep))
c = torch.compile(mod)
with torch.no_grad():
    t = time.monotonic(); out = c(*x); torch.cuda.synchronize(); t_first = time.monotonic() - t
    for _ in range(5): c(*x)
    torch.cuda.synchronize(); t = time.monotonic()
    for _ in range(50): c(*x)
    torch.cuda.synchronize(); step = (time.monotonic() - t) / 50
    ref = signature.flatten(mod(*x))
cmp = signature.compare([o.clone() for o in signature.flatten(out)], ref, "bfloat16")
print(json.dumps({"load_cache_s": t_load, "first_call_s": t_first, "step_ms": step * 1e3, "check": cmp,
                  "counters": {k: dict(v) for k, v in counters.items() if k in ("inductor", "aot_autograd")}}))
'''
    p = subprocess.run([sys.executable, "-c", code, artifact, source, WORKER, HERE, own_module],
                       capture_output=True, text=True, env=preload_env(), timeout=600)
    logs.write(f"===== fresh megacache {artifact} {own_module} (exit {p.returncode})\n{p.stderr}\n")
    return json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {"error": p.stderr[-2000:]}


def preload_env():
    env = dict(os.environ)
    sys.path.insert(0, WORKER)
    import launcher
    env["LD_PRELOAD"] = launcher.find_libstdcxx()
    return env


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--blocks", default="single,double")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    report = {"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    logs = open(os.path.join(a.out, "worker_logs.txt"), "w")

    def save():
        with open(os.path.join(a.out, "worker_check.json"), "w") as f:
            json.dump(report, f, indent=1, sort_keys=True)

    report["toolchain"] = run_worker({"protocol": 1, "op": "toolchain"}, logs, "toolchain")
    save()
    report["sources"] = export_sources(a.work)
    save()
    hashes = {}
    for name, src in report["sources"].items():
        hashes[name] = run_worker({"protocol": 1, "op": "hash", "source": src["path"]}, logs, f"hash {name}")
    report["hash"] = {k: {kk: v[kk] for kk in ("model_hash", "inputs", "dtype", "wall_seconds") if kk in v}
                      for k, v in hashes.items()}
    report["hash_ignores_weights"] = hashes["single-seed0"].get("model_hash") == hashes["single-seed1"].get("model_hash")
    save()
    tc = report["toolchain"]["toolchain"]
    gpu = report["toolchain"]["gpus"][0]
    report["builds"] = {}
    for block in a.blocks.split(","):
        name = f"{block}-seed0"
        h = hashes[name]
        for kind in ("aoti", "megacache"):
            key = dict(tc, kind=kind, model_hash=h["model_hash"], region=f"Flux{block.title()}StreamBlock",
                       gpu_arch=gpu["arch"], gpu_name=gpu["name"], dtype=h["dtype"], inputs=h["inputs"],
                       compile_options={}, format_version=1)
            wd = os.path.join(a.work, f"build-{block}-{kind}")
            os.makedirs(wd, exist_ok=True)
            out = os.path.join(wd, "artifact")
            r = run_worker({"protocol": 1, "op": "build", "key": key, "source": report["sources"][name]["path"],
                            "output": out, "workdir": wd}, logs, f"build {block} {kind}")
            report["builds"][f"{block}-{kind}"] = r
            save()
            if not r.get("ok"):
                continue
            src = report["sources"][name]["path"]
            if kind == "aoti":
                r["fresh_load"] = fresh_process_load(out, src, logs)
            else:
                r["fresh_warm_start"] = fresh_process_megacache(out, src, logs, "exported")
                r["fresh_warm_start_own_module"] = fresh_process_megacache(out, src, logs, "own")
            save()
    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    save()


if __name__ == "__main__":
    main()
