"""The megacache artifact through torch.compile (run.sh step 7): a fresh process loads the
cache artifacts kiln served, compiles the registered source's module with the client's
own weights (seed 3), checks it against eager, and times the warm start.

  python3 tests/gpu/megacache_client.py --artifact FILE --source SRC --block single|double
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--artifact", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--block", required=True)
    ap.add_argument("--cold", action="store_true", help="do not load the artifact (cold compile, for comparison)")
    a = ap.parse_args()
    t_start = time.monotonic()
    import torch
    from torch._dynamo.utils import counters
    import flux_blocks as fb

    r = {"import_torch_s": time.monotonic() - t_start}
    t = time.monotonic()
    if not a.cold:
        with open(a.artifact, "rb") as f:
            torch.compiler.load_cache_artifacts(f.read())
    r["load_cache_artifacts_s"] = time.monotonic() - t
    t = time.monotonic()
    mod = torch.export.load(a.source).module()
    r["load_source_module_s"] = time.monotonic() - t
    ref_mod = fb.make_block(a.block, seed=3)
    with torch.no_grad():
        own = dict(mod.named_parameters())
        for name, p in ref_mod.state_dict().items():
            if name in own:
                own[name].copy_(p)
    args = fb.example_inputs(a.block, seed=5)
    compiled = torch.compile(mod)
    with torch.no_grad():
        t = time.monotonic()
        out = compiled(*args)
        torch.cuda.synchronize()
        r["first_call_s"] = time.monotonic() - t
        out = [o.clone() for o in (out if isinstance(out, tuple) else (out,))]
        ref = ref_mod(*args)
        ref = ref if isinstance(ref, tuple) else (ref,)
        r["rel_err_vs_eager"] = max(float((o.float() - e.float()).norm() / e.float().norm()) for o, e in zip(out, ref))
        for _ in range(10):
            compiled(*args)
        torch.cuda.synchronize()
        t = time.monotonic()
        for _ in range(100):
            compiled(*args)
        torch.cuda.synchronize()
        r["step_ms"] = (time.monotonic() - t) / 100 * 1e3
    r["within_bf16_tolerance"] = r["rel_err_vs_eager"] <= 2e-2
    r["fxgraph_cache_hit"] = counters["inductor"].get("fxgraph_cache_hit", 0)
    r["fxgraph_cache_miss"] = counters["inductor"].get("fxgraph_cache_miss", 0)
    r["aot_autograd_cache_hit"] = counters["aot_autograd"].get("autograd_cache_hit", 0)
    print(json.dumps(r))


if __name__ == "__main__":
    main()
