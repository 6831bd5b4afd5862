"""Checks every family of tests/families/families.py on the CPU, in bf16, loaded as users load
it: the model runs at scale 1 and 2, every block class is called, each block class sees a
new input signature at scale 2, and a Wan block holds fp32 and bf16 parameters. Prints one
line per family and exits non-zero when any check fails.

    python tests/families/check_configs.py            # all families, then coverage
    python tests/families/check_configs.py --ci       # the CI subset
    python tests/families/check_configs.py flux wan2.1
    python tests/families/check_configs.py --extra    # EXTRA_FAMILIES (slow or GPU-only rows)
    python tests/families/check_configs.py -v ...     # also block outputs and non-tensor inputs

Needs accelerate importable (load_like_a_user refuses to load otherwise: without it
from_pretrained does not load as users do).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import families as F  # noqa: E402


def sig(x):
    """A hashable description of a call's structure: shapes and dtypes of tensor leaves,
    None, containers, and other values by type and value."""
    if isinstance(x, torch.Tensor):
        return ("T", tuple(x.shape), str(x.dtype).replace("torch.", ""))
    if x is None:
        return None
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(sig(v) for v in x))
    if isinstance(x, dict):
        return ("dict", tuple((k, sig(v)) for k, v in sorted(x.items(), key=lambda kv: str(kv[0]))))
    if isinstance(x, (bool, int, float, str)):
        return (type(x).__name__, x)
    return (type(x).__name__,)


def short(s):
    """Compact text of a signature (for outputs)."""
    if s is None:
        return "None"
    if s[0] == "T":
        return "T"
    if s[0] in ("list", "tuple"):
        inner = ",".join(short(v) for v in s[1])
        return f"({inner})" if s[0] == "tuple" else f"[{inner}]"
    if s[0] == "dict":
        return "{" + ",".join(f"{k}:{short(v)}" for k, v in s[1]) + "}"
    return s[0]


def tensors(x):
    """Tensor leaves of a model's output (tensor, tuple/list, dict or a ModelOutput)."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, dict):
        x = list(x.values())
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in tensors(v)]
    return []


def nontensor_kwargs(args, kwargs):
    """Names (or positions) of inputs that are not tensors: None, dicts, tuples of tensors, ints."""
    out = []
    for i, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            out.append(f"#{i}={short(sig(a))}")
    for k, v in kwargs.items():
        if not isinstance(v, torch.Tensor):
            out.append(f"{k}={short(sig(v))}")
    return out


def check(name, fam, verbose=False):
    problems = []
    with tempfile.TemporaryDirectory() as folder:
        t0 = time.perf_counter()
        model = F.load_like_a_user(name, folder, seed=0)
        t_load = time.perf_counter() - t0
    names = F.block_class_names(fam, type(model))
    calls = {n: {1: [], 2: []} for n in names}
    outs = {n: set() for n in names}
    nontensor = {n: set() for n in names}
    dtypes = {n: set() for n in names}
    mixed_instances = {n: 0 for n in names}
    instances = {n: 0 for n in names}
    state = {"scale": 1}
    handles = []
    for mod in model.modules():
        cname = type(mod).__name__
        if cname not in calls:
            continue
        instances[cname] += 1
        ds = {p.dtype for p in mod.parameters()}
        dtypes[cname] |= ds
        if len(ds) > 1:
            mixed_instances[cname] += 1

        def pre(m, args, kwargs, cname=cname):
            calls[cname][state["scale"]].append(sig((args, kwargs)))
            nontensor[cname].update(nontensor_kwargs(args, kwargs))

        def post(m, args, kwargs, output, cname=cname):
            outs[cname].add(short(sig(output)))

        handles.append(mod.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(mod.register_forward_hook(post, with_kwargs=True))

    times, finite = {}, True
    with torch.no_grad():
        for scale in (1, 2):
            state["scale"] = scale
            kw = fam.inputs(model, 0, scale=scale)
            t0 = time.perf_counter()
            out = model(**kw, return_dict=False)
            times[scale] = time.perf_counter() - t0
            leaves = tensors(out)
            if not leaves:
                problems.append(f"scale {scale}: no tensor output")
            finite = finite and all(torch.isfinite(o.float()).all().item() for o in leaves)
    for h in handles:
        h.remove()
    # Callers (run_family.py) build the kwargs once and call the model again with them, before and
    # after hooking: a second call with the same kwargs must give the same output.
    with torch.no_grad():
        again = tensors(model(**kw, return_dict=False))
    if len(again) != len(leaves) or not all(torch.equal(a, b) for a, b in zip(again, leaves)):
        problems.append("a second call with the same kwargs gives another output (inputs mutated?)")

    parts = []
    for n in names:
        s1, s2 = set(calls[n][1]), set(calls[n][2])
        if instances[n] == 0:
            problems.append(f"{n}: no instance in the model")
        if not calls[n][1] or not calls[n][2]:
            problems.append(f"{n}: not called at scale {1 if not calls[n][1] else 2}")
        elif not (s2 - s1):
            problems.append(f"{n}: scale 2 gives no new signature")
        distinct = len(s1 | s2)
        dts = "+".join(sorted(str(d).replace("torch.", "") for d in dtypes[n]))
        mixed = f" mixed:{mixed_instances[n]}/{instances[n]}" if mixed_instances[n] else ""
        extra = ""
        if verbose:
            extra = f" out={'|'.join(sorted(outs[n]))} nontensor=[{', '.join(sorted(nontensor[n]))}]"
        parts.append(
            f"{n}[x{instances[n]} calls {len(calls[n][1])}+{len(calls[n][2])} sigs {distinct} {dts}{mixed}{extra}]"
        )
    if fam.model_class in ("WanTransformer3DModel",) or "WanTransformerBlock" in names:
        wb = [m for m in model.modules() if type(m).__name__ == "WanTransformerBlock"]
        if wb and not {torch.float32, torch.bfloat16} <= {p.dtype for p in wb[0].parameters()}:
            problems.append("WanTransformerBlock does not hold both fp32 and bf16 parameters")
    if not finite:
        problems.append("non-finite output")
    slow = [s for s, t in times.items() if t > 1.0]
    if slow:
        problems.append(f"slow forward at scale {slow}: {times}")
    line = (
        f"{'CI ' if fam.ci else '   '}{name:<22} {fam.model_class:<36} "
        f"load {t_load:.2f}s fwd {times[1]*1000:.0f}/{times[2]*1000:.0f}ms "
        f"{'' if finite else 'NONFINITE '}| " + " ".join(parts)
    )
    return line, problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*")
    ap.add_argument("--ci", action="store_true")
    ap.add_argument("--extra", action="store_true", help="run EXTRA_FAMILIES (slow or GPU-only rows)")
    ap.add_argument("-v", "--verbose", action="store_true", help="block outputs and non-tensor inputs")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (tiny ops: 1 is fastest)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    import diffusers

    print(f"torch {torch.__version__}, diffusers {diffusers.__version__}, {a.threads} thread(s)", flush=True)
    from diffusers.utils import is_accelerate_available

    if not is_accelerate_available():
        print("FAIL accelerate is not importable: from_pretrained would not load these models as users do")
        print("0 passed, 1 failed")
        return 1
    fams = F.all_families()
    if a.names:
        names = a.names
    elif a.ci:
        names = F.CI
    elif a.extra:
        names = list(F.EXTRA_FAMILIES)
    else:
        names = list(F.FAMILIES)
    failed = []
    for name in names:
        fam = fams[name]
        try:
            line, problems = check(name, fam, verbose=a.verbose)
        except Exception as e:  # noqa: BLE001
            line, problems = f"   {name:<22} {fam.model_class:<36} ERROR", [f"{type(e).__name__}: {e}"]
            if a.verbose:
                traceback.print_exc()
        print(line, flush=True)
        for p in problems:
            print(f"    FAIL {p}", flush=True)
        if problems:
            failed.append(name)

    coverage_failed = False
    if not a.names and not a.ci and not a.extra:
        covered = {f.model_class for f in F.FAMILIES.values()}
        listed = [c.__name__ for c in F.repeated_block_models()]
        gaps = [c for c in listed if c not in covered and c not in F.NOT_COVERED]
        both = [c for c in F.NOT_COVERED if c in covered]
        stale = [c for c in F.NOT_COVERED if c not in listed]
        print(
            f"_repeated_blocks classes in diffusers {diffusers.__version__}: {len(listed)}; "
            f"covered {len([c for c in listed if c in covered])} (by {len(F.FAMILIES)} rows, CI {len(F.CI)}), "
            f"NOT_COVERED {len([c for c in listed if c in F.NOT_COVERED])}: "
            + ", ".join(c for c in listed if c in F.NOT_COVERED)
        )
        for c in gaps:
            print(f"    FAIL {c}: no family and no NOT_COVERED reason")
        for c in both:
            print(f"    FAIL {c}: both covered and in NOT_COVERED")
        for c in stale:
            print(f"    FAIL {c}: in NOT_COVERED but not among repeated_block_models()")
        coverage_failed = bool(gaps or both or stale)
    print(f"{len(names) - len(failed)} passed, {len(failed) + int(coverage_failed)} failed")
    return 1 if failed or coverage_failed else 0


if __name__ == "__main__":
    sys.exit(main())
