"""Prepares the GPU proof's inputs (run.sh step 2): the two FLUX-shaped blocks' sources,
their keys, a different set of weights for the client, and eager references.

  python3 tests/gpu/prepare.py --work DIR

Writes under DIR: sources/{single,double}.pt2 (torch.export archives, weights of seed 0),
keys/{single,double}-{aoti,megacache}.json (node fields left to kilnd), tensors/
{single,double}-weights.{json,bin} (weights of seed 3: NOT the source's, to show that the
artifacts are weight-free), tensors/{single,double}-ref.{json,bin} (inputs and eager
outputs under those weights), prepare.json (model hashes, eager step times).
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

REGIONS = {"single": "FluxSingleStreamBlock", "double": "FluxDoubleStreamBlock"}


def write_tensors(prefix, named):
    import torch

    manifest, offset = [], 0
    with open(prefix + ".bin", "wb") as f:
        for name, t in named:
            t = t.detach().contiguous().cpu()
            raw = t.view(torch.uint8).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
            manifest.append({"name": name, "dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
                             "offset": offset, "nbytes": len(raw)})
            f.write(raw)
            offset += len(raw)
    with open(prefix + ".json", "w") as f:
        json.dump({"tensors": manifest}, f)


def worker_hash(path):
    p = subprocess.run([sys.executable, WORKER], input=json.dumps({"protocol": 1, "op": "hash", "source": path}),
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"hash of {path} failed: {p.stdout} {p.stderr[-2000:]}")
    return json.loads(p.stdout)


def eager_step_ms(m, args, iters=100):
    import torch

    with torch.no_grad():
        for _ in range(10):
            m(*args)
        torch.cuda.synchronize()
        t = time.monotonic()
        for _ in range(iters):
            m(*args)
        torch.cuda.synchronize()
    return (time.monotonic() - t) / iters * 1e3


def main():
    import torch
    import flux_blocks as fb

    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    for d in ("sources", "keys", "tensors"):
        os.makedirs(os.path.join(a.work, d), exist_ok=True)
    report = {}
    for block in ("single", "double"):
        src = os.path.join(a.work, "sources", f"{block}.pt2")
        m0 = fb.make_block(block, seed=0)
        t = time.monotonic()
        torch.export.save(torch.export.export(m0, fb.example_inputs(block)), src)
        export_s = time.monotonic() - t
        del m0
        h = worker_hash(src)
        for kind in ("aoti", "megacache"):
            key = {"kind": kind, "model_hash": h["model_hash"], "region": REGIONS[block], "dtype": h["dtype"],
                   "inputs": h["inputs"], "compile_options": {}}
            with open(os.path.join(a.work, "keys", f"{block}-{kind}.json"), "w") as f:
                json.dump(key, f)
        m3 = fb.make_block(block, seed=3)
        write_tensors(os.path.join(a.work, "tensors", f"{block}-weights"), list(m3.state_dict().items()))
        args = fb.example_inputs(block, seed=5)
        with torch.no_grad():
            out = m3(*args)
        outs = out if isinstance(out, tuple) else (out,)
        write_tensors(os.path.join(a.work, "tensors", f"{block}-ref"),
                      [(f"input{i}", x) for i, x in enumerate(args)] + [(f"output{i}", o) for i, o in enumerate(outs)])
        report[block] = {"model_hash": h["model_hash"], "source_bytes": os.path.getsize(src), "export_s": export_s,
                         "hash_worker_s": h.get("worker_seconds"), "eager_step_ms": eager_step_ms(m3, args),
                         "params": sum(p.numel() for p in m3.parameters())}
        del m3
        torch.cuda.empty_cache()
    with open(os.path.join(a.work, "prepare.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
