"""The kiln Python package on the real diffusers FluxTransformer2DModel (issue 11's proof).

    PYTHONPATH=client/python:.carry/diffusers/src KILN_SOCKET=/path/kiln.sock \
      KILN_LIBRARY=build-gpu/client/libkiln.so python3 tests/gpu/python_flux.py OUT_DIR

Needs a kilnd on KILN_SOCKET with the real worker (`[builds] worker = ["python3",
"ops/workers/kiln_worker"]`, builds_per_gpu >= 4, as tests/gpu/python_run.sh starts it) on
an EMPTY store, and diffusers importable. kilnd may still be starting when this begins: the
rows that do not use it run first. FLUX.1-dev config, random bf16 weights, 1024x1024 (4096
image tokens, 512 text tokens), batch 1. Each row is a fresh process; TTR is process start
(before `import torch`) to the end of the first forward. One run, in this order:

  1. diffusers compile_repeated_blocks, cold then warm (one Inductor cache folder), seed 0
  2. eager, seed 0 and seed 1 (the references of the errors)
  3. a cold node: the kiln miss process (seed 0, full model) and 7 racers (seed 2, one
     block of each class: the same block keys at 1024x1024) started at once on the empty
     store. The miss process then calls at 768x768 (a second resolution: miss, eager),
     waits for its packages, steps at 1024 and calls at 768 again (now a hit). kilnd's
     builds are counted per key: one per block class and signature is the target.
  4. kiln hit: a fresh process with seed 1's weights (not the export's), the first forward
     right after compile_repeated_blocks(); then the same with kiln.torch.wait() first
     ("ready", timed apart), and the variants of KILN_FLUX_VARIANTS (JSON list of
     {"label", "prefetch": bool, "single": _aoti.RUN_SINGLE_THREADED, "ready": bool,
     "warm_up": _runtime.WARM_UP, "trace": where the first call's time goes,
     tests/gpu/python_trace.py}).

KILN_FLUX_SKIP (comma list: regional, race, res768, ready) leaves rows out, and a row that
would start after KILN_FLUX_DEADLINE_S seconds (default 530: a device call's limit is 600)
is left out and reported so. Writes OUT_DIR/python-flux.json and prints a Markdown table.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

T0 = time.monotonic()  # before import torch: the TTR clock of a child
SKIP = set(filter(None, os.environ.get("KILN_FLUX_SKIP", "").split(",")))
DEADLINE_S = float(os.environ.get("KILN_FLUX_DEADLINE_S", "530"))


def build_model(seed, layers=(19, 38), times=None):
    import torch
    from diffusers import FluxTransformer2DModel

    if times is not None:
        times["imports_s"] = time.monotonic() - T0

    torch.manual_seed(seed)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = FluxTransformer2DModel(patch_size=1, in_channels=64, num_layers=layers[0], num_single_layers=layers[1],
                                       attention_head_dim=128, num_attention_heads=24, joint_attention_dim=4096,
                                       pooled_projection_dim=768, guidance_embeds=True, axes_dims_rope=(16, 56, 56))
    torch.set_default_dtype(torch.float32)
    model = model.eval().requires_grad_(False)
    if times is not None:
        torch.cuda.synchronize()
        times["model_built_s"] = time.monotonic() - T0
    return model


def inputs(res):
    import torch

    g = torch.Generator(device="cuda").manual_seed(123)
    n, dev, bf = (res // 16) ** 2, "cuda", torch.bfloat16
    r = lambda *s: torch.randn(*s, generator=g, device=dev, dtype=bf)  # noqa: E731
    return dict(hidden_states=r(1, n, 64), encoder_hidden_states=r(1, 512, 4096), pooled_projections=r(1, 768),
                timestep=torch.tensor([0.5], device=dev, dtype=bf), img_ids=torch.zeros(n, 3, device=dev),
                txt_ids=torch.zeros(512, 3, device=dev), guidance=torch.tensor([3.5], device=dev, dtype=bf),
                return_dict=False)



def child(mode, seed, res, out_path):
    import torch

    # The racers share one GPU: one block of each class is enough to race for the same
    # keys (a block's fingerprint does not depend on how many blocks the model has).
    result = {"mode": mode, "seed": seed, "res": res, "started_s": time.time()}
    # TTR's parts: imports (torch, diffusers), the model built; what is left is the path's own.
    model = build_model(seed, layers=(1, 1) if mode == "kiln-race" else (19, 38), times=result)
    variant = json.loads(os.environ.get("KILN_FLUX_VARIANT") or "{}")
    result.update({"variant": variant, "label": variant.get("label")})
    trace = None
    if mode.startswith("regional"):
        model.compile_repeated_blocks(fullgraph=True)
    elif mode.startswith("kiln"):
        import kiln.torch

        result["kiln_torch_file"] = kiln.torch.__file__
        if variant.get("trace"):
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            import python_trace as trace

            trace.install()
        if "single" in variant:
            from kiln.torch import _aoti

            _aoti.RUN_SINGLE_THREADED = variant["single"]
        if "warm_up" in variant:
            from kiln.torch import _runtime

            _runtime.WARM_UP = variant["warm_up"]
        options = {"prefetch": variant["prefetch"]} if "prefetch" in variant else {}
        t = time.monotonic()
        kiln.torch.compile_repeated_blocks(model, on_miss="eager", **options)
        result["compile_call_s"] = time.monotonic() - t
        if variant.get("ready"):
            t = time.monotonic()
            result["ready_ok"] = kiln.torch.wait(model, timeout=60)
            result["ready_s"] = time.monotonic() - t
    x = inputs(res)
    step = lambda x=x: model(**x)[0]  # noqa: E731
    with torch.no_grad():
        if trace:
            trace.mark_zero()
        t = time.monotonic()
        out = step()
        torch.cuda.synchronize()
        first = time.monotonic() - t
        ttr = time.monotonic() - T0
        result.update({"ttr_s": ttr, "first_call_s": first})
        if trace:
            trace.uninstall()
            result["trace"] = trace.summary()
        second = mode == "kiln-miss" and "res768" not in SKIP
        if mode.startswith("kiln"):
            import kiln.torch

            result["status_after_first"] = kiln.torch.status(model)
            if second:  # a second resolution in the same process: a miss, served eager meanwhile
                x768 = inputs(768)
                t = time.monotonic()
                step(x768)
                torch.cuda.synchronize()
                result["res768_first_call_s"] = time.monotonic() - t
                result["status_after_768"] = kiln.torch.status(model)
            if mode in ("kiln-miss", "kiln-race"):  # racers wait too: every block class built once
                t = time.monotonic()
                result["builds_landed"] = kiln.torch.wait(model, timeout=1800)
                result["builds_landed_after_s"] = time.monotonic() - t
                result["status"] = kiln.torch.status(model)
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        t = time.monotonic()
        for _ in range(10):
            out = step()
        torch.cuda.synchronize()
        result["step_ms"] = (time.monotonic() - t) * 100
        cpu = []
        for _ in range(3):  # how long the host takes to queue one step (a sync per block shows here)
            t = time.monotonic()
            out = step()
            cpu.append(time.monotonic() - t)
            torch.cuda.synchronize()
        result["host_step_ms"] = min(cpu) * 1000
        ref_path = os.path.join(os.path.dirname(out_path), f"eager-{seed}-{res}.pt")
        if mode == "eager":
            torch.save(out.cpu(), ref_path)
        elif os.path.exists(ref_path):
            result["rel_err"] = rel_err(out, torch.load(ref_path))
        elif mode != "kiln-race":  # the reference comes later in the run (regional rows run first)
            result["output"] = out_path + ".pt"
            torch.save(out.cpu(), result["output"])
        if second:  # the 768x768 call again, now that its packages landed
            t = time.monotonic()
            step(x768)
            torch.cuda.synchronize()
            result["res768_again_s"] = time.monotonic() - t
        if mode.startswith("kiln"):
            import kiln.torch

            result["status"] = kiln.torch.status(model)
    result["finished_s"] = time.time()
    json.dump(result, open(out_path, "w"), default=str)


def rel_err(out, ref):
    ref = ref.to(out.device).float()
    return float((out.float() - ref).norm() / ref.norm())


def wait_for_kilnd(timeout_s=300):
    """kilnd's socket answers STATUS (it probes its worker's toolchain before it listens)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client", "python"))
    import kiln

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with kiln.Client() as c:
                return c.status()
        except kiln.KilnError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def compiled_calls(row):
    return sum(e.get("calls", {}).get("compiled", 0) for e in row.get("status") or [])


def states(row, key="status"):
    out = {}
    for e in row.get(key) or []:
        out[e["state"]] = out.get(e["state"], 0) + 1
    return out


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    cache = os.path.join(tempfile.gettempdir(), "kiln-flux-inductor-cache")  # regional's, cold then warm
    shutil.rmtree(cache, ignore_errors=True)
    skipped = []

    def due(name):
        """Whether the row `name` still fits the call's time; else it is recorded as left out."""
        if time.monotonic() - T0 <= DEADLINE_S:
            return True
        skipped.append(f"{name} (would start {time.monotonic() - T0:.0f} s in, past {DEADLINE_S:.0f} s)")
        return False

    def start(mode, seed=0, res=1024, env=None, tag=""):
        path = os.path.join(out_dir, f"{mode}-{seed}-{res}{tag}.json")
        e = dict(os.environ, **(env or {}))
        # What else the machine runs when a row starts (timings are host-bound): the 1-minute
        # load average and the busiest processes.
        top = subprocess.run(["ps", "-eo", "pcpu,etimes,comm", "--sort=-pcpu"], capture_output=True, text=True)
        load = {"loadavg_1m": os.getloadavg()[0], "top": top.stdout.splitlines()[1:5]}
        return subprocess.Popen([sys.executable, __file__, "child", mode, str(seed), str(res), path], env=e), path, load

    def finish(started, name):
        p, path, load = started
        p.wait()
        row = json.load(open(path)) if p.returncode == 0 else {"mode": name, "returncode": p.returncode}
        row["load_at_start"] = load
        return row

    def run(mode, seed=0, res=1024, env=None, tag=""):
        return finish(start(mode, seed, res, env, tag), mode)

    timeline = [("start", 0.0)]
    mark = lambda what: timeline.append((what, round(time.monotonic() - T0, 1)))  # noqa: E731
    rows = []
    if "regional" not in SKIP:  # kilnd may still be starting beside these: they do not use it
        rows.append(run("regional-cold", env={"TORCHINDUCTOR_CACHE_DIR": cache}))
        rows.append(run("regional-warm", env={"TORCHINDUCTOR_CACHE_DIR": cache}))
        mark("regional done")
    node = wait_for_kilnd()
    mark("kilnd answering")
    rows += [run("eager", seed=0), run("eager", seed=1)]
    mark("eager done")

    # A cold node: the measured miss process and the racers, all started at once.
    racers = 0 if "race" in SKIP else 7
    group = [start("kiln-miss", seed=0)] + [start("kiln-race", seed=2, tag=f"-{i}") for i in range(racers)]
    miss = finish(group[0], "kiln-miss")
    raced = [finish(g, "kiln-race") for g in group[1:]]
    rows.append(miss)
    mark("miss and race done")

    hits = [{"label": "hit"}] + ([] if "ready" in SKIP else [{"label": "hit, ready", "ready": True}])
    hits += json.loads(os.environ.get("KILN_FLUX_VARIANTS") or "[]")
    for v in hits:
        if due(f"kiln hit ({v['label']})"):
            rows.append(run("kiln-hit", seed=1, env={"KILN_FLUX_VARIANT": json.dumps(v)},
                            tag="-" + v["label"].replace(" ", "").replace(",", "-")))
            mark(f"hit ({v['label']}) done")

    import kiln
    import torch

    for r in rows:  # rows that ran before their eager reference existed
        ref_path = os.path.join(out_dir, f"eager-{r.get('seed')}-{r.get('res')}.pt")
        if "rel_err" not in r and r.get("output") and os.path.exists(ref_path):
            r["rel_err"] = rel_err(torch.load(r["output"]), torch.load(ref_path))
    with kiln.Client() as c:
        builds = c.build_status()
    per_key = {}
    for b in builds:
        per_key.setdefault(b.get("key_digest"), []).append(b)
    summary = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "node": node.get("node"),
               "gpus": node.get("gpus"), "rows": rows, "racers": raced, "builds": builds, "timeline": timeline,
               "skipped": skipped}
    json.dump(summary, open(os.path.join(out_dir, "python-flux.json"), "w"), indent=1, default=str)

    nan = float("nan")
    print("| path | TTR s | imports s | model built s | compile_repeated_blocks s | ready s | first call s | "
          "step ms | host ms/step | rel. error vs eager |\n|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        err = r.get("rel_err")
        print(f"| {r.get('mode')} {r.get('label') or ''} (seed {r.get('seed')}, {r.get('res')}²) | "
              f"{r.get('ttr_s', nan):.2f} | {r.get('imports_s', nan):.2f} | {r.get('model_built_s', nan):.2f} | "
              f"{r.get('compile_call_s', nan):.3f} | {r.get('ready_s', nan):.3f} | "
              f"{r.get('first_call_s', nan):.3f} | {r.get('step_ms', nan):.1f} | {r.get('host_step_ms', nan):.1f} | "
              f"{'—' if err is None else f'{err:.2e}'} |")
    print(f"\nmiss process: builds landed {miss.get('builds_landed')} {miss.get('builds_landed_after_s', nan):.1f} s "
          f"after its first call; states {states(miss)}; compiled calls {compiled_calls(miss)}; "
          f"768² first call {miss.get('res768_first_call_s', nan):.3f} s (states after it: "
          f"{states(miss, 'status_after_768')}), 768² after the builds {miss.get('res768_again_s', nan):.3f} s")
    print(f"racers: {len(raced)}, exit codes {[r.get('returncode', 0) for r in raced]}, first calls "
          f"{[round(r.get('first_call_s', nan), 2) for r in raced]}, all landed "
          f"{all(r.get('builds_landed') for r in raced)}, states {[states(r) for r in raced]}")
    print(f"builds kilnd ran: {len(builds)} for {len(per_key)} keys (target: one per key; 2 block classes x "
          f"2 resolutions = 4)")
    names = {e.get("key_digest"): f"{e['region']} [{e['signature'][:40]}]" for r in [miss] + raced
             for e in r.get("status") or [] if e.get("key_digest")}
    for digest, bs in per_key.items():
        took = [(b.get("state"), (b.get("finished_at") or 0) - (b.get("started_at") or 0)) for b in bs]
        print(f"  {str(digest)[:16]} {names.get(digest, '?')}: {took} (state, s)")
    print("timeline (s since start):", timeline)
    for r in rows:
        load = r.get("load_at_start") or {}
        print(f"  load at the start of {r.get('mode')} {r.get('label') or ''}: {load.get('loadavg_1m')}, "
              f"busiest {load.get('top')}")
    if skipped:
        print("left out (time):", skipped)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        main()
