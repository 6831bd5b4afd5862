"""Six diffusers families at real widths (reduced depth) on the GPU: eager, diffusers'
regional compile cold, a kiln miss on an empty kilnd store, a kiln hit in a fresh process.
Each row is a fresh process; tests/gpu/families_run.sh builds kilnd, starts it and calls
this with the environment set (KILN_SOCKET, KILN_LIBRARY, PYTHONPATH with client/python
and diffusers). Results: tests/gpu/RESULTS-families.md (tests/gpu/families_report.py).

    python3 tests/gpu/families_gpu.py run WORK PHASES [FAMILIES]
        PHASES: comma list of eager, regional, miss, hit (run in that order; Wan's
        from_pretrained folder is written first where missing)
        FAMILIES: comma list (default: all six of families_gpu_configs.FAMILIES)
    python3 tests/gpu/families_gpu.py row MODE FAMILY WORK     (one row; what `run` starts)

Rows (WORK/rows/<mode>-<family>.json; a row whose file exists is not run again, so a run
split over several device calls goes on where the last stopped; KILN_FAMILIES_REDO=1 runs
them again):
  eager     TTR (process start, before `import torch`, to the end of the first forward),
            first call s, step ms (median of 3 x 5 timed steps after 3 warm-ups, synced);
            saves the output (WORK/refs/<family>.pt): the cross-process reference.
  regional  diffusers `model.compile_repeated_blocks(fullgraph=True)` (SD3.5: the class
            lists no _repeated_blocks, so JointTransformerBlock is set on the instance
            first, which is what users do), a fresh TORCHINDUCTOR_CACHE_DIR and
            TRITON_CACHE_DIR (cold): first call s, step ms; then the compiled forwards are
            taken off again (`_compiled_call_impl = None`) and the same inputs run eager:
            the error vs eager in the same process.
  miss      all families' processes started at once on kilnd's empty store (kilnd builds
            up to builds_per_gpu side by side, as a node does): kiln.torch.
            compile_repeated_blocks(model) with the default on_miss="eager": first call s;
            then kiln.torch.wait() in slices of 1 s, polling kiln.torch.status(): seconds
            from process start until every block class and signature is "hit" (or failed:
            its detail kept verbatim), and the build records (kilnd's BUILD_STATUS, LOGS of
            a failed build). Then one step compiled and the error vs eager.
  jit       as miss, started beside the miss processes (so the same builds serve both),
            with on_miss="compile" and cold caches of its own as regional's: torch.compile
            compiles each block class in the background (no call waits for it) and runs
            it once ready, until kiln's package lands; meanwhile forwards run back to back,
            each timed (`calls`: seconds since start, call seconds), so the row shows when
            compiled speed arrived and when kiln's package took over.
  hit       a fresh process after the builds: compile_repeated_blocks, the first forward
            right after it; TTR, first call s, step ms, status (every block compiled?);
            then kiln.torch.restore(model) and the same inputs eager: the error vs eager.
  variant   as hit, with variants="auto" (issue 27's faster packages): step ms with the
            default package first (step_ms_default), then kiln.torch.wait(variants=True)
            (at most KILN_FAMILIES_VARIANT_WAIT_S, default 900: kilnd builds each variant in
            its idle time) and step ms again with whatever serves then; the status keeps
            each variant's state, side-by-side step ratio, its build's step and error.
The error of a compiled path is measured against the SAME process's eager output on the
same inputs and weights, computed after the timed part (the compiled forwards removed
again), so that the path's TTR and first call are its own; the error against the eager
row's output (another process, same seed) is recorded too.

KILN_FAMILIES_DEADLINE_S: a row is not started past this many seconds since `run` began
(recorded in WORK/rows/skipped-*.json); the miss processes' wait ends before it.
KILN_FAMILIES_WHEEL=1 (families_run.sh installed kiln's wheel): a row's process gets no
KILN_* variable but KILN_SOCKET, as in a serving container; the driver's KILN_FAMILIES_*
settings reach it as FAMILIES_* (setting()). miss and hit rows record where `kiln` was
imported from, the KILN_* variables and PYTHONPATH they saw.
"""
import time

T0 = time.monotonic()  # before import torch: a row's TTR clock

import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
MODES = ("eager", "regional", "miss", "jit", "hit", "variant")
STEP_WARMUP, STEP_REPEATS, STEP_N = 3, 3, 5


WHEEL = os.environ.get("KILN_FAMILIES_WHEEL") == "1"


def setting(name, default=None):
    """The driver's KILN_FAMILIES_<name>; in a row of a wheel run, FAMILIES_<name>."""
    return os.environ.get("KILN_FAMILIES_" + name, os.environ.get("FAMILIES_" + name, default))


def row_env(env):
    """A row's environment; for a wheel run, as a serving container's: no KILN_* variable but
    the socket (the driver's settings renamed FAMILIES_*)."""
    if not WHEEL:
        return env
    out = {}
    for k, v in env.items():
        if k.startswith("KILN_FAMILIES_"):
            out["FAMILIES_" + k[len("KILN_FAMILIES_"):]] = v
        elif not k.startswith("KILN_") or k == "KILN_SOCKET":
            out[k] = v
    return out


def row_path(work, mode, family):
    return os.path.join(work, "rows", f"{mode}-{family}.json")


def rel_err(out, ref):
    ref = ref.to(out.device).float()
    return float((out.float() - ref).norm() / ref.norm())


def _sync():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def time_steps(step):
    """Median step time in ms (STEP_REPEATS x STEP_N synced steps after warm-ups), and the
    host's time to queue one step."""
    for _ in range(STEP_WARMUP):
        step()
    _sync()
    times = []
    for _ in range(STEP_REPEATS):
        t = time.monotonic()
        for _ in range(STEP_N):
            step()
        _sync()
        times.append((time.monotonic() - t) * 1000 / STEP_N)
    host = []
    for _ in range(2):
        t = time.monotonic()
        step()
        host.append((time.monotonic() - t) * 1000)
        _sync()
    times.sort()
    return times[len(times) // 2], min(host), times


def status_summary(entries):
    """{state: count} of kiln.torch.status() entries."""
    out = {}
    for e in entries or []:
        out[e["state"]] = out.get(e["state"], 0) + 1
    return out


def uncompile(model):
    """Takes nn.Module.compile's compiled forwards off again (regional compile's blocks)."""
    n = 0
    for m in model.modules():
        if getattr(m, "_compiled_call_impl", None) is not None:
            m._compiled_call_impl = None
            n += 1
    return n


def child(mode, family, work):
    out_path = row_path(work, mode, family)
    result = {"mode": mode, "family": family, "pid": os.getpid(), "started_unix": time.time()}
    try:
        _child(mode, family, work, result)
    except BaseException as ex:  # the row records why it failed, verbatim
        import traceback

        result["error"] = f"{type(ex).__name__}: {ex}"
        result["traceback"] = traceback.format_exc()[-4000:]
    result["finished_unix"] = time.time()
    result["wall_s"] = time.monotonic() - T0
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1, default=str)
    os.replace(tmp, out_path)
    print(json.dumps({k: result.get(k) for k in ("mode", "family", "ttr_s", "first_call_s", "step_ms", "takeover_s",
                                                  "rel_err", "error")}, default=str), flush=True)


def _child(mode, family, work, result):
    import torch

    import diffusers
    import families_gpu_configs as cfg

    result["imports_s"] = time.monotonic() - T0
    fam = cfg.FAMILIES[family]
    result.update({"torch": torch.__version__, "diffusers": diffusers.__version__, "python": sys.version.split()[0],
                   "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
                   "kiln_commit": setting("COMMIT"),
                   "depth": fam.depth, "real_depth": fam.real_depth, "size": fam.size, "checkpoint": fam.checkpoint,
                   "block_classes": cfg.block_classes(family)})
    seed = 0
    model = cfg.build_model(family, seed, work)
    _sync()
    result["model_built_s"] = time.monotonic() - T0
    result.update(cfg.describe(model))
    x = cfg.FAMILIES[family].inputs(model, seed)
    step = lambda: model(**x, return_dict=False)[0]  # noqa: E731
    ref_path = os.path.join(work, "refs", f"{family}.pt")
    kiln_torch = None
    if mode == "regional":
        if fam.block_classes:  # SD3: no _repeated_blocks on the class; users name the block class
            model._repeated_blocks = list(fam.block_classes)
        model.compile_repeated_blocks(fullgraph=True)
        result["compiled_modules"] = sum(1 for m in model.modules() if getattr(m, "_compiled_call_impl", None))
    elif mode in ("miss", "hit", "jit", "variant"):
        import kiln.torch as kiln_torch

        import kiln

        result.update({"kiln_package": os.path.dirname(kiln.__file__),
                       "kiln_env": sorted(k for k in os.environ if k.startswith("KILN_")),
                       "pythonpath": os.environ.get("PYTHONPATH", "")})
        t = time.monotonic()
        kiln_torch.compile_repeated_blocks(model, block_classes=fam.block_classes,
                                           on_miss="compile" if mode == "jit" else "eager",
                                           variants="auto" if mode == "variant" else None)
        result["compile_call_s"] = time.monotonic() - t

    with torch.no_grad():
        t = time.monotonic()
        try:
            out = step()
            _sync()
        except Exception as ex:
            if mode != "regional":
                raise
            # fullgraph=True failed: recorded verbatim, then the default (graph breaks allowed),
            # timed apart (its caches are no longer cold for what compiled before the failure)
            import torch._dynamo

            result["fullgraph_error"] = f"{type(ex).__name__}: {ex}"[-3000:]
            torch._dynamo.reset()
            uncompile(model)
            model.compile_repeated_blocks()
            result["fullgraph"] = False
            t = time.monotonic()
            out = step()
            _sync()
        result["first_call_s"] = time.monotonic() - t
        result["ttr_s"] = time.monotonic() - T0
        if kiln_torch is not None:
            result["status_after_first"] = kiln_torch.status(model)
        if mode in ("miss", "jit"):
            wait_for_takeover(kiln_torch, model, result, step if mode == "jit" else None)
        if mode == "variant":
            result["step_ms_default"], _, _ = time_steps(step)
            t = time.monotonic()
            result["variants_decided"] = kiln_torch.wait(model, timeout=float(setting("VARIANT_WAIT_S", "900")),
                                                         variants=True)
            result["variant_wait_s"] = time.monotonic() - t
            result["variants"] = [{"region": e["region"], "signature": e["signature"], **v}
                                  for e in kiln_torch.status(model) for v in e.get("variants") or []]
        result["step_ms"], result["host_step_ms"], result["step_ms_all"] = time_steps(step)
        out = step()
        _sync()
        out_cpu = out.float().cpu()
        if kiln_torch is not None:
            result["status"] = kiln_torch.status(model)
            result["states"] = status_summary(result["status"])
            result["compiled_calls"] = sum(e["calls"]["compiled"] for e in result["status"])
            result["eager_calls"] = sum(e["calls"]["eager"] for e in result["status"])
            result["jit_calls"] = sum(e["calls"].get("jit", 0) for e in result["status"])
        if mode == "eager":
            os.makedirs(os.path.dirname(ref_path), exist_ok=True)
            torch.save(out_cpu, ref_path + ".tmp")
            os.replace(ref_path + ".tmp", ref_path)
        else:
            # the same process's eager output on the same inputs and weights
            if mode == "regional":
                result["uncompiled_modules"] = uncompile(model)
            else:
                kiln_torch.restore(model)
            ref = step().float().cpu()
            result["rel_err"] = rel_err(out_cpu, ref)
            result["eager_in_process_finite"] = bool(torch.isfinite(ref).all())
            if os.path.exists(ref_path):
                result["rel_err_vs_eager_row"] = rel_err(out_cpu, torch.load(ref_path))
        result["output_finite"] = bool(torch.isfinite(out_cpu).all())
        result["output_norm"] = float(out_cpu.norm())
    if torch.cuda.is_available():
        result["peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2**30


def wait_for_takeover(kiln_torch, model, result, step=None):
    """After a miss's first call: waits (kiln.torch.wait, 1 s slices; exports run meanwhile)
    until no block is exporting or building, polling status; records when each entry
    turned hit or failed and when all had (seconds since process start)."""
    deadline = float(setting("MISS_UNTIL_UNIX", "0")) or (time.time() + 1500)
    first_done = time.monotonic() - T0
    seen, transitions, calls = {}, [], []
    while True:
        if step is not None:  # jit: forwards back to back, as a busy server runs them, each timed
            import torch

            t = time.monotonic()
            with torch.no_grad():
                step()
            _sync()
            calls.append([round(t - T0, 2), round(time.monotonic() - t, 4)])
        done = kiln_torch.wait(model, timeout=0.0 if step is not None else 1.0)
        now = time.monotonic() - T0
        for e in kiln_torch.status(model):
            k = e["fingerprint"] or (e["region"], e["signature"])  # SD3.5: one class, three structures
            state = e["state"] + (f" (jit {e['jit']})" if e.get("jit") else "")
            if seen.get(k) != state:
                seen[k] = state
                transitions.append({"t_s": round(now, 2), "region": e["region"], "signature": e["signature"],
                                    "fingerprint": e["fingerprint"], "state": state, "detail": e["detail"]})
        if done:
            break
        if time.time() > deadline:
            result["takeover_timed_out"] = True
            break
    status = kiln_torch.status(model)
    result["status_after_wait"] = status
    result["transitions"] = transitions
    if step is not None:
        result["calls"] = calls
    result["all_hit"] = bool(status) and all(e["state"] == "hit" for e in status)
    if not result.get("takeover_timed_out"):
        result["takeover_s"] = now  # the next call runs every block that landed compiled
        result["takeover_after_first_call_s"] = now - first_done
    # kilnd's records of this model's builds; a failed build's log tail, verbatim
    try:
        import kiln

        builds, logs = [], {}
        with kiln.Client() as c:
            for e in status:
                d = e.get("key_digest")
                if not d:
                    continue
                for b in c.build_status(key_digest=d):
                    builds.append(dict(b, region=e["region"], signature=e["signature"]))
                if e["state"] == "failed":
                    rec = c.logs(d)
                    if rec:
                        logs[d] = {k: (v[-6000:] if isinstance(v, str) else v) for k, v in rec.items()}
        result["builds"] = builds
        result["failed_build_logs"] = logs
    except Exception as ex:
        result["builds_error"] = f"{type(ex).__name__}: {ex}"


# ------------------------------------------------------------------------------------
# the driver


def run(work, phases, families):
    import families_gpu_configs as cfg

    deadline = float(os.environ.get("KILN_FAMILIES_DEADLINE_S", "1e9"))
    redo = os.environ.get("KILN_FAMILIES_REDO") == "1"
    families = families or list(cfg.FAMILIES)
    os.makedirs(os.path.join(work, "rows"), exist_ok=True)
    os.makedirs(os.path.join(work, "logs"), exist_ok=True)
    log = lambda *a: print(f"[families_gpu {time.monotonic() - T0:6.1f}s]", *a, flush=True)  # noqa: E731
    skipped = []

    def todo(mode, fam):
        return redo or not os.path.exists(row_path(work, mode, fam))

    def start(mode, fam, env=None):
        e = row_env(dict(os.environ, **(env or {})))
        logf = open(os.path.join(work, "logs", f"{mode}-{fam}.log"), "w")
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "row", mode, fam, work], env=e,
                             stdout=logf, stderr=subprocess.STDOUT)
        p.logf = logf
        return p

    def finish(p, mode, fam):
        p.wait()
        p.logf.close()
        if p.returncode != 0 or not os.path.exists(row_path(work, mode, fam)):
            tail = open(os.path.join(work, "logs", f"{mode}-{fam}.log"), errors="replace").read()[-4000:]
            with open(row_path(work, mode, fam), "w") as f:
                json.dump({"mode": mode, "family": fam, "returncode": p.returncode, "error": f"exit {p.returncode}",
                           "log_tail": tail}, f, indent=1)
        row = json.load(open(row_path(work, mode, fam)))
        log(mode, fam, {k: row.get(k) for k in ("ttr_s", "first_call_s", "step_ms", "takeover_s", "rel_err",
                                                 "states", "error")})
        return row

    def fits(mode, fam, estimate_s):
        left = deadline - (time.monotonic() - T0)
        if left >= estimate_s:
            return True
        skipped.append({"mode": mode, "family": fam, "why": f"{left:.0f} s left of the deadline, ~{estimate_s} s needed"})
        log("left out (time):", mode, fam)
        return False

    # the page cache warm before the first timed row (a fresh machine reads torch from disk)
    t = time.monotonic()
    subprocess.run([sys.executable, "-c", "import torch, diffusers; torch.zeros(1, device='" + cfg.DEVICE + "')"])
    log(f"warm-up import of torch and diffusers: {time.monotonic() - t:.1f} s")
    if phases & {"prepare", "eager", "regional", "miss", "hit"}:
        for fam in families:  # in a process of its own: the driver holds no GPU memory
            if cfg.FAMILIES[fam].from_pretrained and not os.path.exists(
                    os.path.join(cfg.folder_of(fam, work), "config.json")):
                t = time.monotonic()
                rc = subprocess.run([sys.executable, os.path.abspath(__file__), "prepare", fam, work]).returncode
                log("prepared the from_pretrained folder of", fam, f"in {time.monotonic() - t:.1f} s" if rc == 0 else
                    f"FAILED (exit {rc}): its rows fail")
    for mode, estimate in (("eager", 25), ("regional", 70)):
        if mode not in phases:
            continue
        for fam in families:
            if not todo(mode, fam) or not fits(mode, fam, estimate):
                continue
            env = {}
            if mode == "regional":  # cold: caches of their own, emptied first
                cache = os.path.join(work, "inductor-cache", fam)
                shutil.rmtree(cache, ignore_errors=True)
                env = {"TORCHINDUCTOR_CACHE_DIR": cache, "TRITON_CACHE_DIR": os.path.join(cache, "triton")}
            finish(start(mode, fam, env), mode, fam)
    if "miss" in phases or "jit" in phases:  # jit alone: its processes by themselves
        fams = [f for f in families if any(m in phases and todo(m, f) for m in ("miss", "jit"))]
        if fams and fits("miss", ",".join(fams), 150):
            t = time.monotonic()
            st = wait_kilnd(probed=True)
            log(f"kilnd ready for builds after {time.monotonic() - t:.1f} s:",
                {k: (st or {}).get(k) for k in ("build_slots", "builds_unavailable", "builds_probing")})
            until = time.time() + deadline - (time.monotonic() - T0) - 40
            env = {"KILN_FAMILIES_MISS_UNTIL_UNIX": str(until)}
            log("starting the miss/jit processes at once:", fams)
            procs = [(start("miss", f, env), f, "miss") for f in fams if "miss" in phases]
            if "jit" in phases and "miss" in phases:  # beside them, cold compiler caches of their own
                for f in fams:
                    cache = os.path.join(work, "inductor-cache", "jit-" + f)
                    shutil.rmtree(cache, ignore_errors=True)
                    procs.append((start("jit", f, dict(env, TORCHINDUCTOR_CACHE_DIR=cache,
                                                        TRITON_CACHE_DIR=os.path.join(cache, "triton"))), f, "jit"))
            for p, f, mode in procs:
                finish(p, mode, f)
            if "jit" in phases and "miss" not in phases:
                # alone: one process at a time, so that its forwards have the GPU to themselves
                # (three processes stepping back to back share it: each step ~3x slower)
                for f in fams:
                    cache = os.path.join(work, "inductor-cache", "jit-" + f)
                    shutil.rmtree(cache, ignore_errors=True)
                    finish(start("jit", f, dict(env, TORCHINDUCTOR_CACHE_DIR=cache,
                                                 TRITON_CACHE_DIR=os.path.join(cache, "triton"))), "jit", f)
            save_builds(work)
    if "hit" in phases:
        wait_kilnd()
        for fam in families:
            if todo("hit", fam) and fits("hit", fam, 30):
                finish(start("hit", fam), "hit", fam)
    if "variant" in phases:  # after hit: the default packages are built; one family at a time
        wait_kilnd()
        for fam in families:
            if todo("variant", fam) and fits("variant", fam, 300):
                finish(start("variant", fam), "variant", fam)
    if skipped:
        with open(os.path.join(work, "rows", f"skipped-{int(time.time())}.json"), "w") as f:
            json.dump(skipped, f, indent=1)


def wait_kilnd(probed=False):
    """kilnd answers STATUS (and, probed=True, has ended its start-up probes: a node that has
    been up a while is not probing, and builds wait for the probes) within
    KILN_FAMILIES_KILND_WAIT_S (default 300 s); None if not: the rows then run and record
    what kiln.torch says (no daemon: eager)."""
    import kiln

    deadline = time.monotonic() + float(os.environ.get("KILN_FAMILIES_KILND_WAIT_S", "300"))
    while True:
        try:
            with kiln.Client() as c:
                st = c.status()
            if probed and st.get("builds_probing") and time.monotonic() < deadline:
                time.sleep(0.5)
                continue
            return st
        except Exception as ex:
            if time.monotonic() > deadline:
                print("kilnd does not answer:", type(ex).__name__, ex, flush=True)
                return None
            time.sleep(0.5)


def save_builds(work):
    """kilnd's build records and node status, for the report."""
    try:
        import kiln

        with kiln.Client() as c:
            data = {"builds": c.build_status(), "status": c.status()}
            # each build's log tail: the worker's phase report and kilnd's summary line
            data["logs"] = {b["key_digest"]: ((c.logs(b["key_digest"]) or {}).get("log") or "")[-3000:]
                            for b in data["builds"]}
        with open(os.path.join(work, "rows", "kilnd-builds.json"), "w") as f:
            json.dump(data, f, indent=1, default=str)
    except Exception as ex:
        print("kilnd's build records not saved:", type(ex).__name__, ex, flush=True)


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "prepare":
        import families_gpu_configs

        families_gpu_configs.prepare_folder(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 5 and sys.argv[1] == "row":
        child(sys.argv[2], sys.argv[3], sys.argv[4])
    elif len(sys.argv) >= 4 and sys.argv[1] == "run":
        run(sys.argv[2], set(sys.argv[3].split(",")), [f for f in (sys.argv[4] if len(sys.argv) > 4 else "").split(",")
                                                       if f])
    else:
        sys.exit(__doc__)
