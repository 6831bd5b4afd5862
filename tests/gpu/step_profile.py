"""Where a compiled step's GPU time goes, and what is left to win (issue "Misses that reach
compiled speed ...": step <= 0.9 x regional compile's at the same error).

  python3 tests/gpu/step_profile.py OUT_DIR [FAMILIES [MODES]]
      FAMILIES default flux,wan2.1,qwen-image; MODES default all (eager always runs first)

For each family (tests/gpu/families_gpu_configs.py: real widths, reduced depth, bf16), one
process per family, one after another on the same model and inputs:
  eager        step ms, and the step's FLOPs by torch's FLOP counter (matmuls, attention)
  regional     diffusers' compile_repeated_blocks(fullgraph=True), what kiln's packages are
               measured against
  whole        torch.compile of the whole model: what Inductor makes of it with every block
               and the parts between them in view (an upper bound for per-block packages)
  regional-cg  compile_repeated_blocks(fullgraph=True, mode="reduce-overhead"): CUDA graphs
               over each block's calls (torch.compiler.cudagraph_mark_step_begin() before each
               step, as torch asks of a loop that keeps no output of the step before)
  whole-cg     torch.compile(model, mode="reduce-overhead"): one graph tree over the model
Every row: step ms (median, synced), the host's time to queue a step, and torch.profiler's
kernel time per step by kind: GEMM (cuBLAS/CUTLASS), attention (cuDNN/flash), Triton
(Inductor's fused kernels), other; a compiled row also its error against this process's
eager output; GPU idle = step - kernel time; the GEMMs' achieved TFLOP/s. If GEMMs and
attention are most of the step and run near what this GPU does on a large matmul, no
per-block package with the same kernels and precision reaches 0.9 x regional's step.
Writes OUT_DIR/step_profile.json; prints each row as it lands.
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
MODES = ("regional", "whole", "regional-cg", "whole-cg")
ATTENTION = ("sdpa", "flash", "fmha", "attention", "attn")
GEMM = ("gemm", "nvjet", "cutlass", "xmma", "wgmma", "cublas", "sm90_", "splitk")


def kind_of(kernel):
    k = kernel.lower()
    if k.startswith("triton"):  # before attention: a fused prologue is named after the op it feeds
        return "triton"
    if any(s in k for s in ATTENTION):
        return "attention"
    if any(s in k for s in GEMM):
        return "gemm"
    return "other"


def kernel_profile(step, steps=5):
    """Per step: kernel ms by kind, kernels run, and the ten longest kernels, from
    torch.profiler's CUDA events (one stream: kernels do not overlap, so the sum is the busy
    time)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from families_gpu import _sync

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        _sync()
    by_kind, by_name, n = {}, {}, 0
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        n += 1
        us = e.time_range.elapsed_us()
        kind = kind_of(e.name)
        by_kind[kind] = by_kind.get(kind, 0.0) + us
        by_name[e.name] = by_name.get(e.name, 0.0) + us
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:10]
    return ({k: round(v / steps / 1000, 3) for k, v in sorted(by_kind.items())}, n // steps,
            [(name[:120], round(us / steps / 1000, 3)) for name, us in top])


def flops(step):
    """The step's FLOPs by op (torch's counter: matmuls and attention; elementwise is not
    counted)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc:
        step()
    return {str(op): n for op, n in fc.get_flop_counts()["Global"].items()}


def child(family, mode):
    import torch

    import families_gpu_configs as cfg
    from families_gpu import _sync, rel_err, time_steps

    fam = cfg.FAMILIES[family]
    model = cfg.build_model(family, 0, os.environ.get("KILN_FAMILIES_WORK", "/tmp/kiln-step-profile"))
    x = fam.inputs(model, 0)
    step = lambda: model(**x, return_dict=False)[0]  # noqa: E731  (sees `model` rebound below)
    row = {"family": family, "mode": mode, "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name() if cfg.DEVICE == "cuda" else "cpu"}
    with torch.no_grad():
        ref = step().clone()
        if mode != "eager":
            if fam.block_classes:
                model._repeated_blocks = list(fam.block_classes)
            cg = mode.endswith("-cg")
            t = time.monotonic()
            if mode.startswith("regional"):
                model.compile_repeated_blocks(fullgraph=True, mode="reduce-overhead" if cg else None)
            else:
                model = torch.compile(model, mode="reduce-overhead" if cg else None)
            if cg:
                def step():
                    torch.compiler.cudagraph_mark_step_begin()
                    return model(**x, return_dict=False)[0]
            out = step().clone()
            _sync()
            row["first_call_s"] = round(time.monotonic() - t, 2)
            row["rel_err_vs_eager"] = rel_err(out, ref)
        row["step_ms"], row["host_ms"] = (round(v, 3) for v in time_steps(step)[:2])
        if mode == "eager":
            row["flops"] = flops(step)
        row["kernels_ms"], row["kernels_per_step"], row["top"] = kernel_profile(step)
    if mode != "eager":
        from torch._dynamo.utils import counters

        row["cudagraph_skips"] = dict(counters["inductor"]).get("cudagraph_skips", 0)
    return row


def summarize(rows):
    """Adds each compiled row's step ratio to regional's and the GEMMs' TFLOP/s."""
    by = {(r["family"], r["mode"]): r for r in rows if "step_ms" in r}
    for r in rows:
        reg = by.get((r["family"], "regional"))
        eager = by.get((r["family"], "eager"))
        if reg and "step_ms" in r:
            r["vs_regional"] = round(r["step_ms"] / reg["step_ms"], 3)
        k = r.get("kernels_ms")
        if k and "step_ms" in r:
            r["gpu_idle_ms"] = round(r["step_ms"] - sum(k.values()), 3)
            if eager and k.get("gemm"):
                mm = sum(n for op, n in eager["flops"].items() if "mm" in op or "linear" in op)
                r["gemm_tflops"] = round(mm / (k["gemm"] / 1000) / 1e12, 1)
    return rows


def main():
    if sys.argv[1] == "row":
        print("ROW " + json.dumps(child(sys.argv[2], sys.argv[3])), flush=True)
        return
    out_dir = sys.argv[1]
    families = (sys.argv[2] if len(sys.argv) > 2 else "flux,wan2.1,qwen-image").split(",")
    modes = [m for m in (sys.argv[3].split(",") if len(sys.argv) > 3 else MODES) if m != "eager"]
    os.makedirs(out_dir, exist_ok=True)
    rows = []
    for family in families:
        for mode in ["eager"] + modes:
            p = subprocess.run([sys.executable, __file__, "row", family, mode], capture_output=True, text=True)
            line = [ln for ln in p.stdout.splitlines() if ln.startswith("ROW ")]
            row = json.loads(line[-1][4:]) if line else {"family": family, "mode": mode, "rc": p.returncode,
                                                         "error": p.stderr[-2000:]}
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k not in ("top", "flops")}), flush=True)
            with open(os.path.join(out_dir, "step_profile.json"), "w") as f:
                json.dump({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                           "rows": summarize(rows)}, f, indent=1)
    for r in rows:  # summarized in place above
        print(r["family"], r["mode"], r.get("step_ms"), r.get("vs_regional"), r.get("kernels_ms"),
              r.get("gpu_idle_ms"), r.get("gemm_tflops"), r.get("rel_err_vs_eager"), flush=True)


if __name__ == "__main__":
    main()
