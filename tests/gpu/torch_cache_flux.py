"""torch.compile's own caches served by kilnd (issue "torch.compile's own caches") on the
real diffusers FLUX transformer: process 1 compiles its repeated blocks cold with kilnd as
torch's remote cache; process 2, with an EMPTY local Inductor cache, warm-starts from
kilnd; process 3 is the local warm start (process 1's cache folder) for comparison, and
process 4 the same with the remote caches off. Each row a fresh process; hits counted by torch's own counters.

    TORCHINDUCTOR_REDIS_URL=unix:///path/torch-cache.sock \\
    PYTHONPATH=.carry/diffusers/src:.carry/pylib python3 tests/gpu/torch_cache_flux.py OUT_DIR
"""
import json
import os
import subprocess
import sys
import time

T0 = time.monotonic()
REMOTE = {"TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE": "1",
          "TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE": "1", "TORCHINDUCTOR_BUNDLED_AUTOTUNE_REMOTE_CACHE": "1"}


def child(mode, out_path):
    import torch
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(0)
    with torch.device("cuda"):
        model = FluxTransformer2DModel(patch_size=1, in_channels=64, num_layers=19, num_single_layers=38,
                                       attention_head_dim=128, num_attention_heads=24, joint_attention_dim=4096,
                                       pooled_projection_dim=768, guidance_embeds=True,
                                       axes_dims_rope=(16, 56, 56)).to(torch.bfloat16)
    model = model.eval().requires_grad_(False)
    model.compile_repeated_blocks(fullgraph=True)
    n, dev, bf = 64 * 64, "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(123)
    x = dict(hidden_states=torch.randn(1, n, 64, generator=g, device=dev, dtype=bf),
             encoder_hidden_states=torch.randn(1, 512, 4096, generator=g, device=dev, dtype=bf),
             pooled_projections=torch.randn(1, 768, generator=g, device=dev, dtype=bf),
             timestep=torch.tensor([0.5], device=dev, dtype=bf), img_ids=torch.zeros(n, 3, device=dev),
             txt_ids=torch.zeros(512, 3, device=dev), guidance=torch.tensor([3.5], device=dev, dtype=bf),
             return_dict=False)
    with torch.no_grad():
        t = time.monotonic()
        model(**x)
        torch.cuda.synchronize()
        first = time.monotonic() - t
    from torch._dynamo.utils import counters

    inductor = dict(counters["inductor"])
    result = {"mode": mode, "ttr_s": time.monotonic() - T0, "first_call_s": first,
              "fxgraph_cache_hit": inductor.get("fxgraph_cache_hit", 0),
              "fxgraph_cache_miss": inductor.get("fxgraph_cache_miss", 0),
              "aotautograd_cache_hit": dict(counters["aot_autograd"]).get("autograd_cache_hit", 0),
              "inductor_counters": {k: v for k, v in inductor.items() if "cache" in k}}
    json.dump(result, open(out_path, "w"))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    local_a, local_b = os.path.join(out, "cache-a"), os.path.join(out, "cache-b")
    rows = []
    for mode, env in (("cold, kilnd as torch's remote cache", dict(REMOTE, TORCHINDUCTOR_CACHE_DIR=local_a)),
                      ("warm from kilnd, empty local cache", dict(REMOTE, TORCHINDUCTOR_CACHE_DIR=local_b)),
                      # Process 1's local cache with the same settings (torch looks locally first).
                      ("warm local cache, kilnd too", dict(REMOTE, TORCHINDUCTOR_CACHE_DIR=local_a)),
                      # The same without remote caches: do torch's keys depend on that setting?
                      ("warm local cache, no remote", {"TORCHINDUCTOR_CACHE_DIR": local_a})):
        path = os.path.join(out, f"torch-cache-{len(rows)}.json")
        e = dict(os.environ, **env)
        if "FX_GRAPH_REMOTE" not in str(env):
            e.pop("TORCHINDUCTOR_REDIS_URL", None)
        p = subprocess.run([sys.executable, __file__, "child", mode, path], env=e)
        rows.append(json.load(open(path)) if p.returncode == 0 else {"mode": mode, "returncode": p.returncode})
    json.dump(rows, open(os.path.join(out, "torch-cache.json"), "w"), indent=1)
    print("| process | TTR s | first call s | FX graph cache hits / misses | AOTAutograd hits |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r.get('ttr_s', float('nan')):.1f} | {r.get('first_call_s', float('nan')):.2f} | "
              f"{r.get('fxgraph_cache_hit')} / {r.get('fxgraph_cache_miss')} | {r.get('aotautograd_cache_hit')} |")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(sys.argv[2], sys.argv[3])
    else:
        main()
