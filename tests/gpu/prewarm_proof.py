"""Issue "Prewarm a fleet for a diffusers model", on the GPU: the manifest written from a
FLUX process on node A prewarms an empty node B, and a fresh FLUX process on node B hits
from its first call. tests/gpu/prewarm_run.sh builds kilnd, kilnctl and libkiln.so, starts
the two kilnds (real worker, empty stores) and runs `run`; the CPU version of the same
proof is tests/python/test_torch_manifest.py.

    python3 tests/gpu/prewarm_proof.py run OUT --socket-a A --socket-b B --kilnctl KILNCTL [--work DIR]
    python3 tests/gpu/prewarm_proof.py dry OUT [--work DIR]     # the CPU dry run (below)
    python3 tests/gpu/prewarm_proof.py report OUT/prewarm.json OUT/RESULTS-prewarm.md
    python3 tests/gpu/prewarm_proof.py step NAME CONFIG_JSON      # one step (what run starts)

The model: diffusers' FluxTransformer2DModel at FLUX.1-dev's widths, 2 double + 4 single
blocks, random bf16 weights from seed 0 on cuda, called at 1024x1024 (4096 image + 512
text tokens), built and fed by tests/gpu/families_gpu_configs.py's "flux" (build_model,
FAMILIES["flux"].inputs) exactly as tests/gpu/families_gpu.py does. Each step is a fresh
Python process of its own (its JSON under WORK/steps/, its log under WORK/logs/):
  a  node A: kiln.torch.compile_repeated_blocks(model, socket=A, on_miss="wait"), one call
     (it misses: exports, registers, asks kilnd A to build every block class and waits),
     kiln.torch.wait, kiln.torch.manifest(model, OUT/manifest/flux.toml); then one call
     compiled (its output kept: node A's packages against node B's) and, after
     kiln.torch.restore, the eager output of the same weights (A's error).
  b  node B (its own socket and empty store): `kilnctl prewarm OUT/manifest/flux.toml
     --progress plain` (blocks until every key is built); wall time, kilnd B's build
     records per key, `kilnctl --json ls` and `status`; then `kilnctl --json prewarm` again
     (every key "present", nothing built).
  c  a fresh process on node B, the same model and inputs, kiln.torch's defaults
     (on_miss="eager", prefetch on) and an empty KILN_CACHE_DIR of its own (no input
     layouts from node A's process): the first call timed, kiln.torch.status() after it
     (every entry "hit", compiled block calls == the model's blocks, no eager call), the
     exports it ran (kiln.torch's exporter wrapped and counted: none), kilnd B's build
     records and stats before and after (no build asked), step ms (families_gpu.time_steps),
     then restore and the eager output of the same weights: relative L2 error <= 0.02.
`run` writes OUT/prewarm.json (all of it) and OUT/RESULTS-prewarm.md (date, GPU, versions,
commit, the table, the verdict from the numbers, the manifest inlined).

Environment: KILN_LIBRARY (libkiln.so; PYTHONPATH holds client/python and diffusers),
KILN_PREWARM_DEADLINE_UNIX (steps are killed, and later ones left out, past it; the report
is still written), KILN_PREWARM_COMMIT (what kiln is; default `git describe` of this tree),
KILN_PREWARM_HIT_WAIT_S (kiln.torch's HIT_WAIT_S in step c; default: kiln's own on a GPU,
120 s in the dry run, where loading a CPU package takes longer than kiln's 5 s),
KILN_PREWARM_NOTE (a line for the report).

`dry` is the same proof on the CPU (KILN_FAMILIES_TINY=1: families_gpu_configs' narrow
widths, 1 double + 1 single block, tiny inputs, on cpu), with two kilnds it starts itself
through tests/python/kilnd_proc.py (worker="real": the real worker building AOTInductor
packages for the CPU), from this tree's build/: KILN_TEST_KILND, KILN_TEST_PYTHON,
KILN_REAL_WORKER, KILN_LIBRARY and KILN_PREWARM_KILNCTL default to build/daemon/kilnd,
/opt/kiln/test-venv/bin/python, ops/workers/kiln_worker, build/client/libkiln.so and
build/ops/kilnctl/kilnctl. Run it with the test venv's python (~2 min on 2 cores):
    /opt/kiln/test-venv/bin/python tests/gpu/prewarm_proof.py dry /tmp/prewarm-dry
"""
import time

T0 = time.monotonic()  # before import torch: a step's TTR clock

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

SEED = 0
FAMILY = "flux"
TOLERANCE = 2e-2  # bf16: families_gpu's and the worker's check
STEPS = ("a", "b", "c")
STEP_NAMES = {"a": "node A: miss, builds, manifest", "b": "node B: kilnctl prewarm",
              "c": "node B: fresh process, first call"}


def log(*a):
    print(f"[prewarm_proof {time.monotonic() - T0:7.1f}s]", *a, flush=True)


def deadline_left():
    dl = float(os.environ.get("KILN_PREWARM_DEADLINE_UNIX", "0") or 0)
    return dl - time.time() if dl else 1e9


def budget(margin, floor=30.0, cap=3600.0):
    """Seconds a wait may take: what is left of the deadline less `margin`, within [floor, cap]."""
    return max(floor, min(cap, deadline_left() - margin))


# ------------------------------------------------------------------------------------
# the steps (each a fresh process)


def environment(r):
    import torch

    import diffusers
    import families_gpu_configs as cfg

    fam = cfg.FAMILIES[FAMILY]
    r.update({"torch": torch.__version__, "diffusers": diffusers.__version__, "python": sys.version.split()[0],
              "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
              "device": cfg.DEVICE, "tiny": cfg.TINY, "checkpoint": fam.checkpoint,
              "depth": "1 double + 1 single (tiny)" if cfg.TINY else fam.depth, "real_depth": fam.real_depth,
              "size": "tiny (KILN_FAMILIES_TINY)" if cfg.TINY else fam.size,
              "imports_s": time.monotonic() - T0})


def build(r):
    """The flux model and its inputs, as families_gpu.py builds them; (model, step)."""
    import families_gpu as fg
    import families_gpu_configs as cfg

    model = cfg.build_model(FAMILY, SEED, None)
    fg._sync()
    r["model_built_s"] = time.monotonic() - T0
    r.update(cfg.describe(model))
    x = cfg.FAMILIES[FAMILY].inputs(model, SEED)
    return model, (lambda: model(**x, return_dict=False)[0])


def call_counts(entries):
    return (sum(e["calls"]["compiled"] for e in entries), sum(e["calls"]["eager"] for e in entries))


def kilnd_records(socket, digests=None):
    """kilnd's BUILD_STATUS records (of `digests` when given), and its stats."""
    import kiln

    with kiln.Client(socket) as c:
        builds = c.build_status()
        stats = c.stats()
    if digests is not None:
        builds = [b for b in builds if b.get("key_digest") in digests]
    return builds, stats


def flat_numbers(d, prefix=""):
    """{"store.hits": n, ...}: the numbers of kilnd's nested stats."""
    out = {}
    for k, v in (d or {}).items():
        if isinstance(v, dict):
            out.update(flat_numbers(v, f"{prefix}{k}."))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[prefix + k] = v
    return out


def builds_by_key(records):
    """{key digest: builds run to the end (done or failed)}, as tests/python/kilnd_proc.py counts."""
    out = {}
    for b in records:
        if b.get("state") in ("done", "failed"):
            out[b["key_digest"]] = out.get(b["key_digest"], 0) + 1
    return out


def step_a(c, r):
    import torch

    import families_gpu as fg
    import families_gpu_configs as cfg
    import kiln.torch as kt

    environment(r)
    model, step = build(r)
    t = time.monotonic()
    blocks = kt.compile_repeated_blocks(model, block_classes=cfg.FAMILIES[FAMILY].block_classes, socket=c["socket_a"],
                                        on_miss="wait")
    r["compile_call_s"] = time.monotonic() - t
    r["blocks"] = len(blocks)
    r["block_classes"] = sorted({type(b).__name__ for b in blocks})
    with torch.no_grad():
        t = time.monotonic()
        step()  # misses: export, register, build on node A (side by side), load; this call runs eager
        fg._sync()
        r["first_call_s"] = time.monotonic() - t
        r["status_after_first"] = kt.status(model)
        t = time.monotonic()
        r["waited"] = kt.wait(model, timeout=budget(60))
        r["wait_s"] = time.monotonic() - t
        t = time.monotonic()
        r["manifest_written"] = kt.manifest(model, c["manifest"])
        r["manifest_s"] = time.monotonic() - t
        r["status"] = kt.status(model)
        r["states"] = fg.status_summary(r["status"])
        r["key_digests"] = sorted(e["key_digest"] for e in r["status"] if e.get("key_digest"))
        # node A's packages, once: the output node B's is compared with
        c0, e0 = call_counts(r["status"])
        t = time.monotonic()
        out = step()
        fg._sync()
        r["second_call_s"] = time.monotonic() - t
        c1, e1 = call_counts(kt.status(model))
        r["second_call_block_calls"] = {"compiled": c1 - c0, "eager": e1 - e0}
        out = out.float().cpu()
        kt.restore(model)
        ref = step().float().cpu()
    r["rel_err"] = fg.rel_err(out, ref)
    r["output_finite"] = bool(torch.isfinite(out).all())
    torch.save({"compiled": out, "eager": ref}, os.path.join(c["work"], "node-a-out.pt"))
    r["builds"], _ = kilnd_records(c["socket_a"], set(r["key_digests"]))
    if torch.cuda.is_available():
        r["peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2**30


def kilnctl(c, *args, timeout=120):
    t = time.monotonic()
    p = subprocess.run([c["kilnctl"], "--socket", c["socket_b"], *args], capture_output=True, text=True,
                       timeout=timeout)
    return p, time.monotonic() - t


def json_or_text(text):
    try:
        return json.loads(text)
    except ValueError:
        return text[-4000:]


def step_b(c, r):
    import tomllib

    import kiln

    with open(c["manifest"], "rb") as f:
        doc = tomllib.load(f)
    r["manifest_builds"] = len(doc.get("build", []))
    r["manifest_sources"] = len(doc.get("source", []))
    p = subprocess.run([c["kilnctl"], "--json", "prewarm", c["manifest"], "--dry-run"], capture_output=True, text=True,
                       timeout=60)
    r["dry_run_keys"] = len(json_or_text(p.stdout).get("keys", [])) if p.returncode == 0 else p.stderr[-2000:]
    with kiln.Client(c["socket_b"]) as cl:
        r["stored_before"] = len(cl.ls())
    before, _ = kilnd_records(c["socket_b"])
    r["build_records_before"] = len(before)
    # the blocking form: kilnctl submits every key at once and returns when all are stored
    p, wall = kilnctl(c, "prewarm", c["manifest"], "--progress", "plain", timeout=budget(45, floor=60))
    r["prewarm_wall_s"] = wall
    r["prewarm_rc"] = p.returncode
    r["prewarm_stdout"] = p.stdout[-8000:]
    r["prewarm_stderr"] = p.stderr[-4000:]
    after, _ = kilnd_records(c["socket_b"])
    r["builds"] = after
    r["builds_by_key"] = builds_by_key(after)
    p, _ = kilnctl(c, "--json", "ls")
    r["ls"] = json_or_text(p.stdout)
    p, _ = kilnctl(c, "--json", "status")
    r["kilnd_status"] = json_or_text(p.stdout)
    # a second run finds every key stored: nothing built, at once
    p, wall = kilnctl(c, "--json", "prewarm", c["manifest"], timeout=300)
    r["again_wall_s"] = wall
    r["again_rc"] = p.returncode
    r["again"] = json_or_text(p.stdout)
    r["builds_after_again"] = len(kilnd_records(c["socket_b"])[0])


def step_c(c, r):
    import torch

    import families_gpu as fg
    import families_gpu_configs as cfg
    import kiln.torch as kt
    from kiln.torch import _runtime

    environment(r)
    if c.get("hit_wait_s"):
        _runtime.HIT_WAIT_S = float(c["hit_wait_s"])
    r["hit_wait_s"] = _runtime.HIT_WAIT_S
    exports = []
    exporter = _runtime.EXPORTER

    def counted_exporter(*args, **kwargs):  # any export this process runs (a miss's) is counted
        exports.append(round(time.monotonic() - T0, 3))
        return exporter(*args, **kwargs)

    _runtime.EXPORTER = counted_exporter
    builds_before, stats_before = kilnd_records(c["socket_b"])
    model, step = build(r)
    t = time.monotonic()
    blocks = kt.compile_repeated_blocks(model, block_classes=cfg.FAMILIES[FAMILY].block_classes,
                                        socket=c["socket_b"])  # kiln.torch's defaults: on_miss="eager", prefetch
    r["compile_call_s"] = time.monotonic() - t
    r["blocks"] = len(blocks)
    with torch.no_grad():
        t = time.monotonic()
        out = step()
        fg._sync()
        r["first_call_s"] = time.monotonic() - t
        r["ttr_s"] = time.monotonic() - T0
        first = kt.status(model)
        r["status_after_first"] = first
        r["first_call_block_calls"] = dict(zip(("compiled", "eager"), call_counts(first)))
        r["first_states"] = fg.status_summary(first)
        r["exports_after_first"] = len(exports)
        r["first_output_finite"] = bool(torch.isfinite(out.float()).all())
        r["step_ms"], r["host_step_ms"], r["step_ms_all"] = fg.time_steps(step)
        out = step().float().cpu()
        r["status"] = kt.status(model)
        r["states"] = fg.status_summary(r["status"])
        r["block_calls"] = dict(zip(("compiled", "eager"), call_counts(r["status"])))
        kt.restore(model)
        ref = step().float().cpu()
    r["exports"] = exports
    r["rel_err"] = fg.rel_err(out, ref)
    r["output_finite"] = bool(torch.isfinite(out).all())
    a_out = os.path.join(c["work"], "node-a-out.pt")
    if os.path.exists(a_out):
        a = torch.load(a_out)
        r["rel_err_vs_node_a_compiled"] = fg.rel_err(out, a["compiled"])
        r["eager_vs_node_a_eager"] = fg.rel_err(ref, a["eager"])  # 0: the same weights and inputs
    builds_after, stats_after = kilnd_records(c["socket_b"])
    r["build_records_before"], r["build_records_after"] = len(builds_before), len(builds_after)
    before, after = flat_numbers(stats_before), flat_numbers(stats_after)
    r["stats_delta"] = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    if torch.cuda.is_available():
        r["peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2**30


def child(name, config_path):
    with open(config_path) as f:
        c = json.load(f)
    r = {"step": name, "pid": os.getpid(), "started_unix": time.time()}
    try:
        {"a": step_a, "b": step_b, "c": step_c}[name](c, r)
    except BaseException as ex:  # the step records why it failed, verbatim
        import traceback

        r["error"] = f"{type(ex).__name__}: {ex}"
        r["traceback"] = traceback.format_exc()[-4000:]
    r["wall_s"] = time.monotonic() - T0
    path = os.path.join(c["work"], "steps", f"{name}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(r, f, indent=1, default=str)
    os.replace(path + ".tmp", path)
    print(json.dumps({k: r.get(k) for k in ("step", "first_call_s", "prewarm_wall_s", "rel_err", "error")},
                     default=str), flush=True)
    return 1 if "error" in r else 0


# ------------------------------------------------------------------------------------
# the driver


def wait_settled(socket, limit_s=300):
    """Seconds until kilnd on `socket` answers STATUS and its build service has ended its
    start-up probes (builds wait for them), or None."""
    import kiln

    t = time.monotonic()
    while time.monotonic() - t < min(limit_s, max(5.0, deadline_left())):
        try:
            with kiln.Client(socket) as c:
                if not c.status().get("builds_probing"):
                    return time.monotonic() - t
        except kiln.Unavailable:
            pass
        time.sleep(0.5)
    return None


def commit():
    if os.environ.get("KILN_PREWARM_COMMIT"):
        return os.environ["KILN_PREWARM_COMMIT"]
    try:
        return subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True, text=True,
                              timeout=10).stdout.strip() or "?"
    except Exception:
        return "?"


def run(out, socket_a, socket_b, kilnctl_path, work, hit_wait_s=None):
    out, work = os.path.abspath(out), os.path.abspath(work)
    for d in (out, os.path.join(out, "manifest"), os.path.join(work, "steps"), os.path.join(work, "logs")):
        os.makedirs(d, exist_ok=True)
    c = {"out": out, "work": work, "socket_a": socket_a, "socket_b": socket_b, "kilnctl": kilnctl_path,
         "manifest": os.path.join(out, "manifest", "flux.toml"),
         "hit_wait_s": hit_wait_s or os.environ.get("KILN_PREWARM_HIT_WAIT_S")}
    shutil.rmtree(os.path.join(out, "manifest"), ignore_errors=True)  # an earlier run's
    os.makedirs(os.path.join(out, "manifest"))
    config = os.path.join(work, "config.json")
    with open(config, "w") as f:
        json.dump(c, f, indent=1)
    result = {"date": time.strftime("%Y-%m-%d"), "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "commit": commit(), "note": os.environ.get("KILN_PREWARM_NOTE", ""), "config": c, "steps": {}}
    # the page cache warm (a fresh machine reads torch and diffusers from disk) before any timed step
    t = time.monotonic()
    subprocess.run([sys.executable, "-c", "import torch, diffusers"], timeout=300)
    result["warm_import_s"] = time.monotonic() - t
    env = dict(os.environ, KILN_CACHE_DIR=os.path.join(work, "kiln-cache-a"))
    for name in STEPS:
        socket = socket_a if name == "a" else socket_b
        ready = wait_settled(socket)
        result[f"kilnd_{'a' if name == 'a' else 'b'}_settled_wait_s"] = ready
        log(f"step {name} ({STEP_NAMES[name]}): kilnd settled after {ready} s")
        if name == "c":  # a fresh node's process: no input layouts from node A's
            env = dict(os.environ, KILN_CACHE_DIR=os.path.join(work, "kiln-cache-b"))
        left = min(deadline_left(), 7200) - 20
        if left < 20 or (name != "a" and not os.path.exists(c["manifest"])):
            why = "no time left" if left < 20 else "step a wrote no manifest"
            result["steps"][name] = {"step": name, "skipped": why}
            log(f"step {name} left out: {why}")
            continue
        path = os.path.join(work, "steps", f"{name}.json")
        if os.path.exists(path):
            os.remove(path)
        logf = os.path.join(work, "logs", f"step-{name}.log")
        t = time.monotonic()
        with open(logf, "w") as f:
            try:
                rc = subprocess.run([sys.executable, os.path.abspath(__file__), "step", name, config], env=env,
                                    stdout=f, stderr=subprocess.STDOUT, timeout=left).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        if os.path.exists(path):
            with open(path) as f:
                step = json.load(f)
        else:
            step = {"step": name, "error": f"exit {rc}: no result",
                    "log_tail": open(logf, errors="replace").read()[-4000:]}
        step["process_s"] = time.monotonic() - t
        step["returncode"] = rc
        result["steps"][name] = step
        log(f"step {name}: exit {rc} in {step['process_s']:.1f} s",
            {k: step.get(k) for k in ("first_call_s", "prewarm_wall_s", "rel_err", "error") if k in step})
    result["manifest_text"] = open(c["manifest"]).read() if os.path.exists(c["manifest"]) else None
    src = os.path.join(out, "manifest", "sources")
    result["manifest_sources"] = ({n: os.path.getsize(os.path.join(src, n)) for n in sorted(os.listdir(src))}
                                  if os.path.isdir(src) else {})
    result["verdict"] = verdict(result)
    with open(os.path.join(out, "prewarm.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)
    report(os.path.join(out, "prewarm.json"), os.path.join(out, "RESULTS-prewarm.md"))
    log("verdict:", "PASS" if result["verdict"]["pass"] else "FAIL",
        [k for k, v in result["verdict"]["checks"].items() if not v["ok"]])
    return 0 if result["verdict"]["pass"] else 1


def verdict(result):
    """Each check from the numbers: {name: {"ok", "value"}}; pass when all are ok."""
    a, b, cc = (result["steps"].get(n, {}) for n in STEPS)
    keys_a = set(a.get("key_digests") or [])
    checks = {}

    def check(name, ok, value):
        checks[name] = {"ok": bool(ok), "value": value}

    blocks = cc.get("blocks")
    check("A: every block class built and hit", a.get("states") and set(a["states"]) == {"hit"}, a.get("states"))
    check("A: manifest written (a key and a source per block class)",
          a.get("manifest_written") and a["manifest_written"]["keys"] == len(a.get("block_classes") or [None])
          and a["manifest_written"]["sources"] == a["manifest_written"]["keys"], a.get("manifest_written"))
    check("A: error vs eager <= tolerance", a.get("rel_err") is not None and a["rel_err"] <= TOLERANCE, a.get("rel_err"))
    check("B: kilnctl prewarm exit 0", b.get("prewarm_rc") == 0, b.get("prewarm_rc"))
    per_key = b.get("builds_by_key") or {}
    check("B: one build per key, the keys node A asked for", per_key and set(per_key) == keys_a
          and all(n == 1 for n in per_key.values()), {"B": per_key, "A": sorted(keys_a)})
    again = b.get("again") if isinstance(b.get("again"), dict) else {}
    counts = {k: again.get(k) for k in ("total", "built", "present", "failed")}
    check("B: a second prewarm finds every key present, builds nothing", b.get("again_rc") == 0
          and counts["built"] == 0 and counts["present"] == counts["total"] == len(keys_a)
          and b.get("builds_after_again") == len(b.get("builds") or []),
          {"rc": b.get("again_rc"), **counts, "build records": b.get("builds_after_again")})
    st = cc.get("status_after_first") or []
    check("C: first call all hit", st and all(e["state"] == "hit" for e in st), cc.get("first_states"))
    check("C: first call's block calls all compiled (== blocks), none eager",
          blocks and cc.get("first_call_block_calls") == {"compiled": blocks, "eager": 0},
          {"blocks": blocks, **(cc.get("first_call_block_calls") or {})})
    check("C: no export", "exports" in cc and not cc["exports"], cc.get("exports"))
    check("C: no build asked of node B", "build_records_after" in cc
          and cc["build_records_after"] == cc["build_records_before"],
          [cc.get("build_records_before"), cc.get("build_records_after")])
    check("C: key digests = node A's", st and {e.get("key_digest") for e in st} == keys_a,
          sorted(e.get("key_digest") or "" for e in st))
    check("C: error vs eager <= tolerance", cc.get("rel_err") is not None and cc["rel_err"] <= TOLERANCE, cc.get("rel_err"))
    return {"pass": all(v["ok"] for v in checks.values()), "checks": checks}


# ------------------------------------------------------------------------------------
# the report


def _f(v, fmt="{:.2f}"):
    return "—" if v is None else fmt.format(v)


def _e(v):
    return "—" if v is None else f"{v:.3e}"


def build_rows(builds, regions):
    """One row per build record: region, state, seconds where kilnd gives them."""
    rows = []
    for rec in builds or []:
        d = rec.get("key_digest") or ""
        q, st, fin = (rec.get(k) for k in ("queued_at", "started_at", "finished_at"))  # unix seconds
        rows.append(f"| {regions.get(d, '?')} | `{d[:16]}` | {rec.get('state')} | "
                    f"{_f(fin - st if st and fin else None, '{:.0f}')} | {_f(st - q if q and st else None, '{:.0f}')} |")
    return rows


def report(json_path, md_path):
    with open(json_path) as f:
        res = json.load(f)
    a, b, c = (res["steps"].get(n, {}) for n in STEPS)
    env = a if a.get("torch") else c
    v = res.get("verdict") or verdict(res)
    regions = {e.get("key_digest"): e["region"] for e in (a.get("status") or []) + (c.get("status") or [])}
    lines = []
    w = lines.append
    dry = env.get("tiny")
    w("# Prewarm a fleet for a diffusers model: FLUX on " + ("the CPU (dry run)" if dry else "the GPU"))
    w("")
    w(f"{res.get('date')}, {'device' if dry else 'GPU'} as torch reports it: {env.get('gpu', '?')}; torch "
      f"{env.get('torch')}, diffusers {env.get('diffusers')}, Python {env.get('python')}; kiln at {res.get('commit')}. "
      "One device call: `tests/gpu/prewarm_run.sh OUT` (`tests/gpu/prewarm_proof.py`); the CPU version is "
      "`tests/python/test_torch_manifest.py`." if not dry else
      f"{res.get('date')}: the CPU dry run (`tests/gpu/prewarm_proof.py dry OUT`), torch {env.get('torch')}, "
      f"diffusers {env.get('diffusers')}; kiln at {res.get('commit')}.")
    w("")
    widths = "narrow widths (KILN_FAMILIES_TINY)" if dry else f"{env.get('checkpoint')}'s widths"
    w(f"Model: diffusers `FluxTransformer2DModel` at {widths}, {env.get('depth')} blocks "
      f"(real: {env.get('real_depth')}), random bf16 weights (seed {SEED}), {a.get('params', 0):,} "
      f"parameters, on {env.get('device')}; one call at {env.get('size')} (`tests/gpu/families_gpu_configs.py`'s "
      "\"flux\"). Node A and node B: two kilnds on this machine, each with its own socket, an empty store (and the "
      "compiler caches kilnd keeps under it) and the real worker" + ("" if dry else " (`builds_per_gpu = 4`)") +
      ". Each step is a fresh Python process. Error = "
      f"relative L2 of the output against the same process's eager output (same weights, same inputs); tolerance "
      f"{TOLERANCE}.")
    if res.get("note"):
        w("")
        w(res["note"])
    w("")
    w("| step | what | result | seconds |")
    w("|---|---|---|---|")
    ma = a.get("manifest_written") or {}
    w(f"| 1 node A | `compile_repeated_blocks(model, on_miss=\"wait\")`, one call: {a.get('blocks')} blocks of "
      f"{len(a.get('block_classes') or [])} classes miss, are exported and built on node A, the call waits | "
      f"{a.get('states')} | first call {_f(a.get('first_call_s'))} (model built at {_f(a.get('model_built_s'))}) |")
    w(f"| | `kiln.torch.wait`, `kiln.torch.manifest(model, manifest/flux.toml)` | {ma.get('keys')} keys, "
      f"{ma.get('sources')} sources | wait {_f(a.get('wait_s'))}, manifest {_f(a.get('manifest_s'))} |")
    w(f"| | one call on node A's packages, then eager | error {_e(a.get('rel_err'))}; block calls "
      f"{a.get('second_call_block_calls')} | {_f(a.get('second_call_s'), '{:.3f}')} |")
    pw = b.get("builds_by_key") or {}
    w(f"| 2 node B | `kilnctl prewarm manifest/flux.toml --progress plain` on an empty store | exit "
      f"{b.get('prewarm_rc')}; {len(pw)} keys built, builds per key {sorted(pw.values())} | "
      f"**{_f(b.get('prewarm_wall_s'))}** wall |")
    again = b.get("again") if isinstance(b.get("again"), dict) else {}
    w(f"| | `kilnctl --json prewarm` again | exit {b.get('again_rc')}; {({k: again.get(k) for k in ('total', 'built', 'present', 'failed')})} | "
      f"{_f(b.get('again_wall_s'))} |")
    fc = c.get("first_call_block_calls") or {}
    w(f"| 3 node B | a fresh process, kiln.torch's defaults: the first call | {c.get('first_states')}; block calls "
      f"compiled {fc.get('compiled')} of {c.get('blocks')}, eager {fc.get('eager')}; exports "
      f"{len(c['exports']) if 'exports' in c else '—'}; node B's build records {c.get('build_records_before')} → "
      f"{c.get('build_records_after')} | **first call {_f(c.get('first_call_s'), '{:.3f}')}**, TTR "
      f"{_f(c.get('ttr_s'))} |")
    w(f"| | steps (median of 3 × 5 synced, after 3 warm-ups) | error {_e(c.get('rel_err'))} (vs node A's packages' "
      f"output {_e(c.get('rel_err_vs_node_a_compiled'))}; eager vs node A's eager {_e(c.get('eager_vs_node_a_eager'))}) "
      f"| step {_f(c.get('step_ms'))} ms |")
    for n, s in (("a", a), ("b", b), ("c", c)):
        if s.get("skipped") or s.get("error"):
            w(f"| step {n} | **{'left out' if s.get('skipped') else 'failed'}** | "
              f"`{(s.get('skipped') or s.get('error'))[:400]}` | |")
    w("")
    w(f"**Verdict: {'PASS' if v['pass'] else 'FAIL'}** — " + "; ".join(
        f"{name}: {'ok' if chk['ok'] else 'NOT MET'}" for name, chk in v["checks"].items()) + ".")
    w("")
    w("| check | value | |")
    w("|---|---|---|")
    for name, chk in v["checks"].items():
        w(f"| {name} | `{json.dumps(chk['value'], default=str)[:300]}` | {'ok' if chk['ok'] else '**not met**'} |")
    w("")
    w("## Builds")
    w("")
    w("| node | region | key | state | build s | queued s |")
    w("|---|---|---|---|---|---|")
    for node, recs in (("A", a.get("builds")), ("B", b.get("builds"))):
        for row in build_rows(recs, regions):
            w(f"| {node} " + row)
    w("")
    if b.get("prewarm_stdout"):
        w("`kilnctl prewarm` on node B:")
        w("")
        w("```")
        w(b["prewarm_stdout"].rstrip())
        w("```")
        w("")
    w("## The manifest node A's process wrote")
    w("")
    srcs = res.get("manifest_sources") or {}
    w("Beside it, `sources/`: " + ", ".join(f"`{n}` ({s / 1e6:.1f} MB)" for n, s in srcs.items()) + ".")
    w("")
    w("```toml")
    w((res.get("manifest_text") or "(none written)").rstrip())
    w("```")
    w("")
    with open(md_path, "w") as f:
        f.write("\n".join(lines))


# ------------------------------------------------------------------------------------
# the CPU dry run


def dry(out, work):
    """KILN_FAMILIES_TINY=1 on the CPU, two kilnds from this tree's build with the real worker
    (tests/python/kilnd_proc.py), then run()."""
    defaults = {"KILN_TEST_KILND": os.path.join(ROOT, "build", "daemon", "kilnd"),
                "KILN_TEST_PYTHON": "/opt/kiln/test-venv/bin/python",
                "KILN_REAL_WORKER": os.path.join(ROOT, "ops", "workers", "kiln_worker"),
                "KILN_LIBRARY": os.path.join(ROOT, "build", "client", "libkiln.so"),
                "KILN_PREWARM_KILNCTL": os.path.join(ROOT, "build", "ops", "kilnctl", "kilnctl"),
                "KILN_PREWARM_HIT_WAIT_S": "120",
                "KILN_FAMILIES_TINY": "1"}
    for k, val in defaults.items():
        os.environ.setdefault(k, val)
    package = os.path.join(ROOT, "client", "python")
    os.environ["PYTHONPATH"] = package + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    sys.path.insert(0, package)
    sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
    from kilnd_proc import running

    work = os.path.abspath(work)
    with running(os.path.join(work, "node-a"), worker="real") as a, running(os.path.join(work, "node-b"),
                                                                             worker="real") as b:
        log("kilnds up:", a.socket, b.socket)
        rc = run(out, a.socket, b.socket, os.environ["KILN_PREWARM_KILNCTL"], work)
    return rc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("out")
    r.add_argument("--socket-a", required=True)
    r.add_argument("--socket-b", required=True)
    r.add_argument("--kilnctl", required=True)
    r.add_argument("--work", default=None)
    d = sub.add_parser("dry")
    d.add_argument("out")
    d.add_argument("--work", default=None)
    p = sub.add_parser("report")
    p.add_argument("json")
    p.add_argument("md")
    s = sub.add_parser("step")
    s.add_argument("name", choices=STEPS)
    s.add_argument("config")
    args = ap.parse_args()
    if args.cmd == "step":
        return child(args.name, args.config)
    if args.cmd == "report":
        return report(args.json, args.md)
    work = args.work or os.path.join(os.path.abspath(args.out), "work")
    if args.cmd == "dry":
        return dry(args.out, work)
    return run(args.out, args.socket_a, args.socket_b, args.kilnctl, work)


if __name__ == "__main__":
    sys.exit(main())
