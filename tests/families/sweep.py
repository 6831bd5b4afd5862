"""Every diffusers family through kiln.torch on the CPU, against a real kilnd building with
the real worker: miss -> build -> hit, error against eager, builds per key.

    tests/families/sweep.py --build build                 # every family; writes RESULTS.md
    tests/families/sweep.py --build build --ci            # the CI subset (families.CI)
    tests/families/sweep.py --build build --families flux,wan2.1 --results -

Per family, two fresh processes (run_family.py): the first loads the model with
from_pretrained(torch_dtype=torch.bfloat16), runs it once (a miss: eager), waits for kilnd's
builds and runs it again (compiled); the second, with other weights, must hit from its very
first call. test_families.py runs the same function (run_one) for the CI subset and
asserts what a row says. Model classes that list _repeated_blocks but have no small config
in families.py get a row saying so: a newer diffusers adds rows by itself.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
RUN_FAMILY = os.path.join(HERE, "run_family.py")
BUILD_WAIT_S = 1500
BF16_TOLERANCE = 2e-2  # the worker's check for bfloat16 (ops/workers/kiln_worker/signature.py)


def _run(socket, env, *args):
    argv = [sys.executable, RUN_FAMILY, "--socket", socket, "--hit-wait-s", "120", *args]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=BUILD_WAIT_S + 600)
    if out.returncode != 0:
        tail = [line for line in out.stderr.strip().splitlines() if line.strip()][-1:] or ["(no output)"]
        return {"error": f"run_family exited {out.returncode}: {tail[0]}", "stderr": out.stderr[-4000:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_one(name, socket, env):
    """One family's row: {"family", "model_class", "block_classes", "signatures", "builds",
    "served", "rel_err", "hit_rel_err", "first_call_s", "reason", "miss", "hit"}."""
    import families
    from kilnd_proc import builds_by_key

    fam = families.FAMILIES[name]
    row = {"family": name, "model_class": fam.model_class, "served": False, "reason": ""}
    miss = _run(socket, env, "--family", name, "--seed", "0", "--wait-s", str(BUILD_WAIT_S))
    row["miss"] = miss
    if "error" in miss:
        row["reason"] = miss["error"]
        return row
    final = miss["final_status"]
    row["block_classes"] = sorted({e["region"] for e in final})
    row["signatures"] = len([e for e in final if e["state"] != "unsupported"])
    built = builds_by_key(socket)
    row["builds"] = {e["key_digest"][:12]: built.get(e["key_digest"], 0) for e in final if e.get("key_digest")}
    row["rel_err"] = max(miss["rel_err"].values())
    bad = [e for e in final if e["state"] != "hit"]
    if bad:
        row["reason"] = "; ".join(sorted({f"{e['region']}: {e['state']}: {e['detail']}" for e in bad}))
        return row
    if not miss["waited"]:
        row["reason"] = f"builds not done after {BUILD_WAIT_S} s"
        return row
    hit = _run(socket, env, "--family", name, "--seed", "1")
    row["hit"] = hit
    if "error" in hit:
        row["reason"] = hit["error"]
        return row
    row["first_call_s"] = hit["first_call_s"]
    row["hit_rel_err"] = max(hit["first_rel_err"].values())
    cold = [e for e in hit["first_status"] if e["state"] != "hit" or e["calls"]["eager"]]
    if cold:
        row["reason"] = "a fresh process did not hit from its first call: " + "; ".join(
            f"{e['region']} {e['state']} {e['detail']}" for e in cold)
        return row
    if max(row["rel_err"], row["hit_rel_err"]) > BF16_TOLERANCE:
        row["reason"] = f"error against eager {max(row['rel_err'], row['hit_rel_err']):.2e} > {BF16_TOLERANCE}"
        return row
    row["served"] = True
    return row


def table(rows, uncovered):
    lines = ["| family | model class | block classes | signatures | builds per key | served | error vs eager (miss run / fresh hit) | hit's first call s | why not served |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        builds = ", ".join(str(n) for n in (r.get("builds") or {}).values()) or "—"
        err = (f"{r['rel_err']:.2e} / {r['hit_rel_err']:.2e}" if "hit_rel_err" in r
               else f"{r['rel_err']:.2e} / —" if "rel_err" in r else "—")
        lines.append(f"| {r['family']} | {r['model_class']} | {', '.join(r.get('block_classes') or []) or '—'} | "
                     f"{r.get('signatures', '—')} | {builds} | {'yes' if r['served'] else '**no**'} | {err} | "
                     f"{r.get('first_call_s', '—')} | {r['reason'].replace('|', '/') or '—'} |")
    for cls, why in sorted(uncovered.items()):
        lines.append(f"| — | {cls} | — | — | — | not run | — | — | {why} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="the CMake build folder (kilnd, libkiln.so)")
    ap.add_argument("--ci", action="store_true", help="only the CI subset")
    ap.add_argument("--families", default="", help="comma-separated family names")
    ap.add_argument("--results", default=os.path.join(HERE, "RESULTS.md"), help="where the table goes; - for stdout")
    ap.add_argument("--rows-only", action="store_true",
                    help="write only the rows' JSON (RESULTS path with .json), for a sweep run in parts")
    ap.add_argument("--merge", default="",
                    help="comma-separated rows JSON files of a sweep run in parts: write the table from them")
    a = ap.parse_args()

    os.environ.setdefault("KILN_LIBRARY", os.path.join(a.build, "client", "libkiln.so"))
    os.environ.setdefault("KILN_TEST_KILND", os.path.join(a.build, "daemon", "kilnd"))
    os.environ.setdefault("KILN_TEST_PYTHON", sys.executable)
    os.environ.setdefault("KILN_REAL_WORKER", os.path.join(ROOT, "ops", "workers", "kiln_worker"))
    sys.path[:0] = [os.path.join(ROOT, "client", "python"), os.path.join(ROOT, "tests", "python"), HERE]
    import families
    from kilnd_proc import running

    names = ([n for n in a.families.split(",") if n] or
             [n for n, f in families.FAMILIES.items() if f.ci or not a.ci])
    covered = {families.FAMILIES[n].model_class for n in families.FAMILIES}
    uncovered = {} if a.ci or (a.families and not a.merge) else {
        c.__name__: families.NOT_COVERED.get(c.__name__, "no small config in tests/families/families.py yet")
        for c in families.repeated_block_models() if c.__name__ not in covered}
    if a.merge:
        rows = []
        for path in a.merge.split(","):
            with open(path) as f:
                rows.extend(json.load(f))
        order = list(families.FAMILIES)
        rows.sort(key=lambda r: order.index(r["family"]) if r["family"] in order else len(order))
        return write(a, rows, uncovered)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "client", "python"), HERE]))
    rows = []
    with tempfile.TemporaryDirectory(prefix="kiln-sweep-") as folder, running(folder, worker="real") as node:
        env["KILN_CACHE_DIR"] = os.path.join(folder, "kiln-cache")
        for n in names:
            row = run_one(n, node.socket, env)
            print(f"{n}: {'served' if row['served'] else 'NOT served: ' + row['reason']}", flush=True)
            rows.append(row)
    if a.rows_only:
        with open(os.path.splitext(a.results)[0] + ".json", "w") as f:
            json.dump(rows, f, indent=1, default=str)
        return 0 if all(r["served"] for r in rows) else 1
    return write(a, rows, uncovered)


def write(a, rows, uncovered):
    """RESULTS.md (and its rows as JSON beside it) from the sweep's rows."""
    import diffusers
    import torch

    text = (f"# Every diffusers family through kiln.torch on the CPU\n\n"
            f"`tests/families/sweep.py` on {datetime.date.today()}, {platform.node() or 'this machine'} "
            f"({os.cpu_count()} CPUs, no GPU): torch {torch.__version__}, diffusers {diffusers.__version__}; "
            f"a real kilnd building AOTInductor packages for the CPU with the real worker. Each model is a small "
            f"config of its family's structure, loaded with `from_pretrained(torch_dtype=torch.bfloat16)`. "
            f"Served = every signature built once, a fresh process with other weights hits from its first call, "
            f"and the error against eager (relative L2, the model's output) is within {BF16_TOLERANCE}.\n\n"
            + table(rows, uncovered) + "\n")
    if a.results == "-":
        print(text)
    else:
        with open(a.results, "w") as f:
            f.write(text)
        with open(os.path.splitext(a.results)[0] + ".json", "w") as f:
            json.dump(rows, f, indent=1, default=str)
    return 0 if all(r["served"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
