"""Turns run.sh's results into the table committed as tests/gpu/RESULTS.md.

  python3 tests/gpu/report.py --work DIR --out DIR
"""
import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import time


def load(path):
    try:
        with open(path) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return None


KILN_LINE = re.compile(r"\[kiln\] build \S+ on (\S+): worker (.*?) in ([0-9.]+) s \((.*?)\); source ready in ([0-9.]+) s"
                       r"(?: \(while the worker started\))?; stored in ([0-9.]+) s; total ([0-9.]+) s")


def build_record(work, name):
    logs = load(os.path.join(work, f"logs-{name}.json")) or {}
    rec = logs.get("record") or {}
    m = KILN_LINE.search(rec.get("log", ""))
    out = {"ok": rec.get("ok"), "error": rec.get("error")}
    if m:
        out.update(slot=m.group(1), worker_exit=m.group(2), worker_s=float(m.group(3)), summary=m.group(4),
                   source_s=float(m.group(5)), store_s=float(m.group(6)), total_s=float(m.group(7)))
        c = re.search(r"compile ([0-9.]+) s", m.group(4))
        if c:
            out["compile_s"] = float(c.group(1))
    w = re.search(r"ready for the request after ([0-9.]+) s; request read after ([0-9.]+) s", rec.get("log", ""))
    if w:
        # Time the worker sat ready but without its request: kiln's, though inside the worker's wall.
        out["worker_waited_s"] = max(0.0, float(w.group(2)) - float(w.group(1)))
    return out


def machine():
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
    except OSError:
        gpu = "?"
    try:
        import torch
        import triton
        tc = f"torch {torch.__version__} ({torch.version.git_version[:12]}), CUDA {torch.version.cuda}, Triton {triton.__version__}"
    except ImportError:
        tc = "?"
    return gpu, tc, os.cpu_count()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    w = a.work
    prep = load(os.path.join(w, "prepare.json")) or json.load(open(os.path.join(w, "prepare.json")))
    res = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "prepare": prep, "artifacts": {}}
    gpu, tc, cpus = machine()
    res["machine"] = {"gpu": gpu, "toolchain": tc, "cpus": cpus}
    try:
        res["builds_started"] = int(open(os.path.join(w, "builds-started.txt")).read().strip() or 0)
    except (OSError, ValueError):
        res["builds_started"] = None
    try:
        res["kilnd_start_ms"] = int(open(os.path.join(w, "kilnd-start-ms.txt")).read().strip())
    except (OSError, ValueError):
        res["kilnd_start_ms"] = None
    for name in ("single-aoti", "double-aoti", "single-megacache", "double-megacache"):
        race = load(os.path.join(w, f"race-{name}.json")) or {}
        rs = race.get("results", [])
        ok = [r for r in rs if "seconds" in r]
        rec = build_record(w, name)
        entry = {"clients": race.get("clients"), "clients_ok": len(ok),
                 "errors": [r.get("error") for r in rs if "error" in r][:3],
                 "distinct_blobs": len({r["blob"] for r in ok}),
                 "miss_s_min": min((r["seconds"] for r in ok), default=None),
                 "miss_s_max": max((r["seconds"] for r in ok), default=None),
                 "build": rec, "artifact_bytes": ok[0]["size"] if ok else None}
        if entry["miss_s_min"] is not None and "worker_s" in rec:
            entry["kiln_overhead_s"] = entry["miss_s_min"] - rec["worker_s"] + rec.get("worker_waited_s", 0.0)
        block = name.split("-")[0]
        if name.endswith("aoti"):
            loads = [load(p) for p in sorted(glob.glob(os.path.join(w, f"load-{block}-*.json")))]
            loads = [l for l in loads if l]
            entry["hits"] = loads
            if loads:
                entry["hit_to_runnable_ms_median"] = statistics.median(l["request_to_runnable_ms"] for l in loads)
                entry["first_step_ms_median"] = statistics.median(l["first_run_ms"] for l in loads)
                entry["step_ms"] = statistics.median(l["step_ms"] for l in loads)
                entry["rel_err"] = max(l["rel_err_vs_eager"] for l in loads)
        else:
            mc = load(os.path.join(w, f"megacache-{block}.json"))
            cold = load(os.path.join(w, f"megacache-cold-{block}.json"))
            fetch = load(os.path.join(w, f"fetch-{block}.json"))
            entry["client"] = mc
            entry["client_cold"] = cold
            entry["fetch"] = fetch
            if mc:
                entry["step_ms"] = mc["step_ms"]
                entry["rel_err"] = mc["rel_err_vs_eager"]
        res["artifacts"][name] = entry
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
    md = render(res)
    with open(os.path.join(a.out, "RESULTS.md"), "w") as f:
        f.write(md)
    print(md)


def fmt(v, spec="{:.2f}", none="—"):
    return none if v is None else spec.format(v)


def render(res):
    p = res["prepare"]
    lines = [
        "# kiln GPU proof: results",
        "",
        f"Run {res['date']} by `tests/gpu/run.sh` on {res['machine']['gpu']} ({res['machine']['cpus']} CPUs), "
        f"{res['machine']['toolchain']}.",
        "",
        "Blocks: FLUX-shaped, hidden 3072, 24 heads of 128, MLP ratio 4, 4096 image + 512 text tokens, batch 1, "
        "bf16, random weights (tests/gpu/flux_blocks.py). Sources are exported with seed-0 weights; every client "
        "uses seed-3 weights, so each check also shows that the artifacts are weight-free.",
        "",
        f"Builds started by kilnd for the 4 artifacts, 16 concurrent clients each: **{res['builds_started']}**.",
        "",
        "| artifact | clients served (distinct blobs) | miss: request → artifact | worker (compile) | kiln's share of the miss | hit: request → runnable block | step (compiled) | step (eager) | rel. error vs eager |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, e in res["artifacts"].items():
        b = e["build"]
        block = name.split("-")[0]
        eager = p.get(block, {}).get("eager_step_ms")
        if name.endswith("aoti"):
            hit = (fmt(e.get("hit_to_runnable_ms_median"), "{:.1f} ms")
                   + fmt(e.get("first_step_ms_median"), " + first step {:.0f} ms (C++, median of 3 processes)"))
        else:
            mc = e.get("client") or {}
            fetch = e.get("fetch") or {}
            hit = (f"{fetch.get('seconds', 0) * 1e3:.1f} ms fetch + {mc.get('load_cache_artifacts_s', 0) * 1e3:.0f} ms load "
                   f"+ {mc.get('first_call_s', 0):.2f} s warm torch.compile (cold: "
                   f"{(e.get('client_cold') or {}).get('first_call_s', float('nan')):.2f} s)") if mc else "—"
        lines.append(
            f"| {name} | {e['clients_ok']}/{e['clients']} ({e['distinct_blobs']}) | {fmt(e['miss_s_min'], '{:.1f} s')} "
            f"| {fmt(b.get('worker_s'), '{:.1f} s')} ({fmt(b.get('compile_s'), '{:.1f} s')}) "
            f"| {fmt(e.get('kiln_overhead_s'), '{:.3f} s')} | {hit} | {fmt(e.get('step_ms'), '{:.2f} ms')} "
            f"| {fmt(eager, '{:.2f} ms')} | {fmt(e.get('rel_err'), '{:.1e}')} |")
    lines += [
        "",
        "- *miss*: the fastest of the 16 clients, from its request to holding the artifact (one build serves all).",
        "- *worker*: the build worker process's wall time (Python start, torch import, loading the source, the compile, "
        "the check against eager); *compile* is the compile alone.",
        "- *kiln's share*: the miss minus the worker's wall time, plus any time the worker sat ready without its "
        "request (kilnd copies the source out of the store while the worker imports torch and writes the request "
        "when the copy is done): queueing, the source copy where not hidden, spawning, verifying and storing the "
        "artifact, answering 16 clients. Target: under 1 s.",
        "- *hit → runnable*: in a C++ process with CUDA up and its weights on the GPU: `kiln::torch::load_block` = "
        "get (descriptor over the socket) + `AOTIModelPackageLoader` on `/proc/self/fd/N` + weights attached as "
        "user-managed constants; the first step after it also loads the kernels (cubins). Target for the "
        "single-stream block: under 300 ms.",
        "- *megacache*: a fresh Python process gets the artifact (fetch), `torch.compiler.load_cache_artifacts`, then "
        "`torch.compile(ep.module())` of the registered source with its own weights; its first call is the warm "
        "compile (Inductor and AOTAutograd cache hits), against the same process without the artifact (cold).",
        "- Steps: median of 100 after 10 warm-up steps; eager is the same block in eager PyTorch (prepare.py).",
        "",
        "Raw numbers: results.json beside this file when produced by run.sh.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
