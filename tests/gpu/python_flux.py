"""The kiln Python package on the real diffusers FluxTransformer2DModel (issue 11's proof).

    PYTHONPATH=client/python:.carry/diffusers/src KILN_SOCKET=/path/kiln.sock \
      KILN_LIBRARY=build-gpu/client/libkiln.so KILN_WORKER=ops/workers/kiln_worker \
      python3 tests/gpu/python_flux.py OUT_DIR

Needs a kilnd on KILN_SOCKET with the real worker (`[builds] worker = ["python3",
"ops/workers/kiln_worker"]`, as tests/gpu/run.sh starts it) on an EMPTY store, and
diffusers importable. FLUX.1-dev config, random bf16 weights, 1024x1024 (4096 image
tokens, 512 text tokens), batch 1. Each row is a fresh process; TTR is process start
(before `import torch`) to the end of the first forward. Rows:
  eager | compile_repeated_blocks cold | same, warm Inductor cache | kiln miss (empty
  store: first call, then steps once the packages land) | kiln hit (fresh process, weights
  from another seed than the export) | 768x768 in the hit process (miss -> build -> hit)
  | 8 processes started at once at 896x896 (builds per block class counted by kilnd)
  | hits: more kiln-hit processes, one per entry of KILN_FLUX_VARIANTS (JSON list of
  {"label", "old": run the tree in .carry/kiln-old/client/python, "prefetch": bool,
  "single": _aoti.RUN_SINGLE_THREADED, "ready": kiln.torch.wait() before the first call,
  timed apart, "trace": where the first call's time goes, tests/gpu/python_trace.py})
Writes OUT_DIR/python-flux.json and prints a Markdown table.
"""
import json
import os
import subprocess
import sys
import time

T0 = time.monotonic()  # before import torch: the TTR clock of a child
# Which optional rows run (a device call has a time limit): regional-cold, regional-warm,
# res768 (a second resolution in the hit process), race (8 processes at once). Eager, kiln
# miss and kiln hit run unless "nocore" is listed.
ROWS = os.environ.get("KILN_FLUX_ROWS", "regional-cold,regional-warm,res768,race").split(",")


def build_model(seed, layers=(19, 38)):
    import torch
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(seed)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = FluxTransformer2DModel(patch_size=1, in_channels=64, num_layers=layers[0], num_single_layers=layers[1],
                                       attention_head_dim=128, num_attention_heads=24, joint_attention_dim=4096,
                                       pooled_projection_dim=768, guidance_embeds=True, axes_dims_rope=(16, 56, 56))
    torch.set_default_dtype(torch.float32)
    return model.eval().requires_grad_(False)


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

    # The 8 racers share one GPU: one block of each class is enough to race for the same
    # keys (a block's fingerprint does not depend on how many blocks the model has).
    model = build_model(seed, layers=(1, 1) if mode == "kiln-race" else (19, 38))
    variant = json.loads(os.environ.get("KILN_FLUX_VARIANT") or "{}")
    result = {"mode": mode, "seed": seed, "res": res, "variant": variant}
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
        options = {"prefetch": variant["prefetch"]} if "prefetch" in variant else {}
        t = time.monotonic()
        kiln.torch.compile_repeated_blocks(model, on_miss="eager", **options)
        result["compile_call_s"] = time.monotonic() - t
        if variant.get("ready"):
            t = time.monotonic()
            result["ready_ok"] = kiln.torch.wait(model, timeout=60)
            result["ready_s"] = time.monotonic() - t
    x = inputs(res)
    step = lambda: model(**x)[0]  # noqa: E731
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
        if mode.startswith("kiln"):
            import kiln.torch

            result["status_after_first"] = kiln.torch.status(model)
            if mode in ("kiln-miss", "kiln-race"):  # racers wait too: every block class built once
                result["builds_landed"] = kiln.torch.wait(model, timeout=1800)
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
            ref = torch.load(ref_path).to(out.device)
            result["rel_err"] = float((out.float() - ref.float()).norm() / ref.float().norm())
        if mode == "kiln-hit" and "res768" in ROWS:  # a second resolution in the same process: miss -> build -> hit
            import kiln.torch

            x = inputs(768)
            t = time.monotonic()
            step()
            result["res768_first_call_s"] = time.monotonic() - t
            result["res768_landed"] = kiln.torch.wait(model, timeout=1800)
            result["res768_status"] = [e for e in kiln.torch.status(model) if "768" in str(e.get("signature"))
                                       or e["state"] != "hit"]
            step()
        if mode.startswith("kiln"):
            import kiln.torch

            result["status"] = kiln.torch.status(model)
    json.dump(result, open(out_path, "w"), default=str)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    cache = os.path.join(out_dir, "inductor-cache")

    def run(mode, seed=0, res=1024, env=None, wait=True, tag=""):
        path = os.path.join(out_dir, f"{mode}-{seed}-{res}{tag}.json")
        e = dict(os.environ, **(env or {}))
        p = subprocess.Popen([sys.executable, __file__, "child", mode, str(seed), str(res), path], env=e)
        if not wait:
            return p, path
        p.wait()
        return json.load(open(path)) if p.returncode == 0 else {"mode": mode, "returncode": p.returncode}

    core = "nocore" not in ROWS
    rows = [run("eager", seed=0), run("eager", seed=1)] if core else []
    if "eager1" in ROWS:  # the reference of the hit rows (seed 1) alone
        rows.append(run("eager", seed=1))
    if "miss" in ROWS:  # the miss row alone: fills an empty store for the hit variants
        rows.append(run("kiln-miss", seed=0))
    if "hits" in ROWS:
        old = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".carry", "kiln-old", "client",
                           "python")
        for v in json.loads(os.environ.get("KILN_FLUX_VARIANTS") or "[{}]"):
            env = {"KILN_FLUX_VARIANT": json.dumps(v)}
            if v.get("old"):
                env["PYTHONPATH"] = os.path.abspath(old) + ":" + os.environ.get("PYTHONPATH", "")
            rows.append(dict(run("kiln-hit", seed=1, env=env, tag="-" + v.get("label", "hit")), label=v.get("label")))
            json.dump(rows, open(os.path.join(out_dir, "rows-so-far.json"), "w"), indent=1, default=str)
    if "regional-cold" in ROWS:
        rows.append(run("regional-cold", env={"TORCHINDUCTOR_CACHE_DIR": cache}))
    if "regional-warm" in ROWS:
        rows.append(run("regional-warm", env={"TORCHINDUCTOR_CACHE_DIR": cache}))
    if core:
        rows += [run("kiln-miss", seed=0), run("kiln-hit", seed=1)]
    racers = [run("kiln-race", seed=2, res=896, wait=False, tag=f"-{i}") for i in range(8 if "race" in ROWS else 0)]
    for p, _ in racers:
        p.wait()
    rows += [json.load(open(path)) for p, path in racers if p.returncode == 0]
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "client", "python"))
    import kiln

    with kiln.Client() as c:
        builds = c.build_status()
    summary = {"rows": rows, "builds": builds, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    json.dump(summary, open(os.path.join(out_dir, "python-flux.json"), "w"), indent=1, default=str)
    print("| path | TTR s | compile_repeated_blocks s | ready s | first call s | step ms | host ms/step | "
          "rel. error vs eager |\n|---|---|---|---|---|---|---|---|")
    nan = float("nan")
    for r in rows:
        print(f"| {r.get('mode')} {r.get('label') or ''} (seed {r.get('seed')}, {r.get('res')}²) | "
              f"{r.get('ttr_s', nan):.2f} | {r.get('compile_call_s', nan):.3f} | {r.get('ready_s', nan):.3f} | "
              f"{r.get('first_call_s', nan):.3f} | {r.get('step_ms', nan):.1f} | {r.get('host_step_ms', nan):.1f} | "
              f"{r.get('rel_err', '—')} |")
    print(f"builds kilnd ran: {len(builds)} (expected: 2 block classes x 3 resolutions)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        main()
