"""One diffusers family through kiln.torch, as a user's process runs it: a fresh process
loads the family's small model with from_pretrained(torch_dtype=torch.bfloat16), hooks it
with kiln.torch.compile_repeated_blocks against a kilnd, and calls it.

    python run_family.py --family flux --socket /run/kiln/kiln.sock --seed 0 \
        [--scales 1,2] [--on-miss eager|wait] [--wait-s 900]

Prints one JSON line: time to the end of the first call from process start (ttr_s), the
first call's seconds, kiln.torch.status() after the first call of every scale and again
after waiting for kilnd (--wait-s > 0) and calling each scale once more, and each output's
relative L2 error against the same model's eager output on the same inputs (computed
before hooking). The families (tests/families/families.py) and the checks on these
results (test_families.py, sweep.py) live beside it.
"""
import time

STARTED = time.monotonic()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def tensors_of(out):
    import torch
    from torch.utils import _pytree as pytree

    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    return [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def rel_err(outs, refs):
    worst = 0.0
    for o, r in zip(outs, refs):
        o, r = o.float(), r.float()
        worst = max(worst, float((o - r).norm() / r.norm().clamp_min(1e-12)))
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", required=True)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scales", default="1")
    ap.add_argument("--on-miss", default="eager", choices=["eager", "wait"])
    ap.add_argument("--wait-s", type=float, default=0.0)
    ap.add_argument("--block-classes", default=None, help="comma-separated; default: the family's")
    ap.add_argument("--hit-wait-s", type=float, default=None,
                    help="how long a first call waits for a hit (kiln.torch's HIT_WAIT_S); tests on a loaded "
                         "machine raise it so that a hit is not timed")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch's CPU threads (default 1: these models are tiny, and a loaded machine runs "
                         "several such processes and kilnd's builds at once)")
    a = ap.parse_args()

    import torch

    torch.set_num_threads(a.threads)
    import families
    import kiln.torch

    if a.hit_wait_s is not None:
        from kiln.torch import _runtime

        _runtime.HIT_WAIT_S = a.hit_wait_s
    fam = families.FAMILIES[a.family]
    scales = [int(s) for s in a.scales.split(",")]
    with tempfile.TemporaryDirectory(prefix="kiln-family-") as folder:
        model = families.load_like_a_user(a.family, folder, seed=a.seed)
    calls = {s: fam.inputs(model, a.seed, scale=s) for s in scales}
    with torch.no_grad():
        refs = {s: tensors_of(model(**calls[s], return_dict=False)) for s in scales}
    classes = a.block_classes.split(",") if a.block_classes else fam.block_classes
    kiln.torch.compile_repeated_blocks(model, block_classes=classes, socket=a.socket, on_miss=a.on_miss)
    result = {"family": a.family, "model_class": fam.model_class, "seed": a.seed, "scales": scales}
    errs = {}
    with torch.no_grad():
        for i, s in enumerate(scales):
            t = time.monotonic()
            out = tensors_of(model(**calls[s], return_dict=False))
            if i == 0:
                result["first_call_s"] = round(time.monotonic() - t, 3)
                result["ttr_s"] = round(time.monotonic() - STARTED, 3)
            errs[s] = rel_err(out, refs[s])
        result["first_status"] = kiln.torch.status(model)
        result["first_rel_err"] = errs
        if a.wait_s > 0:
            t = time.monotonic()
            result["waited"] = kiln.torch.wait(model, timeout=a.wait_s)
            result["wait_s"] = round(time.monotonic() - t, 3)
            errs = {}
            for s in scales:
                errs[s] = rel_err(tensors_of(model(**calls[s], return_dict=False)), refs[s])
            result["final_status"] = kiln.torch.status(model)
            result["rel_err"] = errs
    kiln.torch.restore(model)
    print(json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    main()
