"""A consumer whose torch or GPU differs from a package's is refused, naming the field
(issue "Sound keys", its GPU proof). Run by tests/gpu/refusal_check.sh, which builds kilnd,
libkiln.so and kiln_gpu_bench and starts kilnd with the real worker on an empty store:

  python3 tests/gpu/refusal_check.py --work DIR --out DIR --bench PATH/kiln_gpu_bench

Needs $KILN_SOCKET (that kilnd), $KILN_LIBRARY (libkiln.so), $KILN_WORKER
(ops/workers/kiln_worker) and client/python on the path.

1. exports a tiny block (Linear(256,256) + GELU, bfloat16, cuda, called as
   block(hidden_states=x)) with kiln.torch's own exporter (torch.export, weights stripped,
   the worker's `hash` op), registers it (PUT_SOURCE) and has kilnd build its AOTI key
   (node fields left to kilnd, which fills them from this node);
2. writes other weights (seed 3) and the eager reference in prepare.py's tensor format;
3. `kiln_gpu_bench load` with the key as kilnd stored it: loads, runs, matches eager;
4. PUTs the same package bytes under edited keys (gpu_name, torch_version: accepted, since
   nothing in the package contradicts them; gpu_arch: kilnd's PUT must refuse it, the
   package's AOTI_COMPUTE_CAPABILITY disagreeing) and runs `kiln_gpu_bench load` for each:
   it must fail with the field named; also cpu_isa edited to kilnd's coarse probe value
   ("avx512"): kilnd's PUT must refuse it (AOTI_CPU_ISA);
5. writes refusal.json to --out; exits 1 if any expectation failed.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "client", "python"))

REGION = "TinyBlock"
OTHER_GPU_NAME = "NVIDIA A100-SXM4-80GB"
OTHER_TORCH_VERSION = "2.10.0+cu128"
OTHER_GPU_ARCH = "sm_80"
COARSE_CPU_ISA = "avx512"  # what kilnd's own probe fills (daemon/src/node.cpp)

# (case, field, edited value, kilnd's PUT should accept it, what the failed load's message
# must hold). A PUT kilnd refuses leaves the key missing: the load then asks kilnd to build
# it (load_block's build_on_miss), which kilnd must refuse too, naming the field.
CASES = [
    ("gpu_name", "gpu_name", OTHER_GPU_NAME, True, ["this package is not for this process", "key.gpu_name"]),
    ("torch_version", "torch_version", OTHER_TORCH_VERSION, True,
     ["this package is not for this process", "key.torch_version"]),
    ("gpu_arch", "gpu_arch", OTHER_GPU_ARCH, False, ["key.gpu_arch"]),
    ("cpu_isa", "cpu_isa", COARSE_CPU_ISA, False, ["key.cpu_isa"]),
]
PUT_REFUSAL_MUST_HOLD = {"gpu_arch": ["key.gpu_arch", "AOTI_COMPUTE_CAPABILITY"],
                         "cpu_isa": ["key.cpu_isa", "AOTI_CPU_ISA"]}


def tiny_block(seed):
    import torch

    class TinyBlock(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(256, 256)

        def forward(self, hidden_states):
            return torch.nn.functional.gelu(self.proj(hidden_states), approximate="tanh")

    torch.manual_seed(seed)
    return TinyBlock().to(device="cuda", dtype=torch.bfloat16).eval()


def tiny_input(seed):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(4, 128, 256, generator=g, device="cuda", dtype=torch.bfloat16)


def worker_describe(path):
    """The worker's `hash` op on the archive: model hash, inputs, call, dtype, weight_free."""
    worker = os.environ["KILN_WORKER"]
    p = subprocess.run([sys.executable, worker, "hash", path], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"the worker's hash op failed: {p.stdout[-1000:]} {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_bench(bench, key_path, work, iters=20):
    """`kiln_gpu_bench load` of one key: {rc, seconds, stdout (parsed if JSON), message}."""
    t = time.monotonic()
    p = subprocess.run([bench, "load", "--key", key_path, "--weights", os.path.join(work, "tensors", "tiny-weights"),
                        "--ref", os.path.join(work, "tensors", "tiny-ref"), "--iters", str(iters)],
                       capture_output=True, text=True, timeout=300)
    out = {"rc": p.returncode, "seconds": round(time.monotonic() - t, 3),
           "message": p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""}
    try:
        out["result"] = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        out["stdout"] = p.stdout[-2000:]
    if p.returncode != 0:
        out["stderr_tail"] = p.stderr[-2000:]
    return out


def put_edited(client, full_key, data, field, value):
    """PUT `data` under `full_key` with `field` set to `value`: (edited key, put result)."""
    from kiln import KilnError

    edited = dict(full_key)
    edited[field] = value
    res = {"key_digest": client.key_digest(edited)}
    try:
        meta = client.put(edited, data)
        res.update({"accepted": True, "stored_key_digest": meta.get("key_digest")})
    except KilnError as e:
        res.update({"accepted": False, "error": type(e).__name__, "message": str(e)})
    return edited, res


def judge_case(name, expect_put_ok, must_hold, put, load):
    """The expectations of one edited-key case: a list of failures (empty: held)."""
    fails = []
    if put["accepted"] != expect_put_ok:
        fails.append(f"kilnd's PUT {'refused' if expect_put_ok else 'accepted'} it: {put.get('message', '')}")
    for s in PUT_REFUSAL_MUST_HOLD.get(name, []) if not put["accepted"] else []:
        if s not in put.get("message", ""):
            fails.append(f"the PUT refusal does not name {s!r}")
    if load["rc"] == 0:
        fails.append("kiln_gpu_bench load succeeded")
    for s in must_hold:
        if s not in load["message"]:
            fails.append(f"the load's message does not hold {s!r}")
    return fails


def gpu_facts():
    import torch

    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True)
    return {"nvidia_smi": smi.stdout.strip().splitlines()[0] if smi.returncode == 0 and smi.stdout.strip() else None,
            "torch_device_name": torch.cuda.get_device_name(0),
            "capability": "sm_%d%d" % torch.cuda.get_device_capability(0),
            "torch": torch.__version__, "cuda": torch.version.cuda}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--bench", required=True)
    a = ap.parse_args()
    for d in ("sources", "keys", "tensors"):
        os.makedirs(os.path.join(a.work, d), exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    summary = {"date": datetime.date.today().isoformat(), "cases": [], "failures": []}
    t_all = time.monotonic()
    try:
        run(a, summary)
    except Exception as e:  # noqa: BLE001 - every failure ends in the summary
        import traceback

        summary["failures"].append(f"{type(e).__name__}: {e}")
        summary["traceback"] = traceback.format_exc()[-4000:]
    summary["seconds"] = round(time.monotonic() - t_all, 1)
    summary["ok"] = not summary["failures"]
    with open(os.path.join(a.out, "refusal.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps({"ok": summary["ok"], "failures": summary["failures"]}, indent=1))
    print_table(summary)
    return 0 if summary["ok"] else 1


def run(a, summary):
    import torch

    import kiln
    from kiln.torch import _runtime
    from prepare import write_tensors

    summary["machine"] = gpu_facts()

    # 1. the source, as kiln.torch registers one: exported as called, weights stripped.
    m0 = tiny_block(seed=0)
    x0 = tiny_input(seed=1)
    t = time.monotonic()
    path, model_hash = _runtime.default_exporter(m0, (), {"hidden_states": x0}, tempfile.mkdtemp(dir=a.work))
    summary["export_s"] = round(time.monotonic() - t, 2)
    desc = worker_describe(path)
    if desc["model_hash"] != model_hash:
        raise RuntimeError(f"the exporter's model hash {model_hash} is not the worker's {desc['model_hash']}")
    summary["source"] = {"model_hash": model_hash, "bytes": os.path.getsize(path), "weight_free": desc["weight_free"],
                         "call": desc["call"], "inputs": desc["inputs"], "dtype": desc["dtype"]}
    if not desc["weight_free"]:
        summary["failures"].append("the registered source is not weight-free")
    key = {"kind": "aoti", "model_hash": model_hash, "region": REGION, "dtype": desc["dtype"],
           "inputs": desc["inputs"], "call": desc["call"], "compile_options": {}}

    client = kiln.Client()
    client.sources.put(model_hash, path, name="tiny.pt2")
    t = time.monotonic()
    art = client.get(key, build=True, wait=420)
    summary["build_s"] = round(time.monotonic() - t, 2)
    full_key = art.info["key"]
    if isinstance(full_key, str):
        full_key = json.loads(full_key)
    data = art.read()
    art.close()
    summary["true_key"] = full_key
    summary["true_key_digest"] = client.key_digest(full_key)
    if summary["true_key_digest"] != art.info.get("key_digest"):
        summary["failures"].append(f"the stored key's digest {art.info.get('key_digest')} is not its key's")
    summary["artifact_bytes"] = len(data)
    with open(os.path.join(a.work, "keys", "true.json"), "w") as f:
        json.dump(full_key, f)

    # 2. the consumer's weights (not the source's: it has none) and eager's outputs.
    m3 = tiny_block(seed=3)
    x5 = tiny_input(seed=5)
    write_tensors(os.path.join(a.work, "tensors", "tiny-weights"), list(m3.state_dict().items()))
    with torch.no_grad():
        ref = m3(hidden_states=x5)
    write_tensors(os.path.join(a.work, "tensors", "tiny-ref"), [("input0", x5), ("output0", ref)])
    del m0, m3
    torch.cuda.empty_cache()

    # 3. the key as kilnd stored it: a hit that loads, runs and matches eager.
    true_load = run_bench(a.bench, os.path.join(a.work, "keys", "true.json"), a.work)
    ok = true_load["rc"] == 0 and true_load.get("result", {}).get("within_bf16_tolerance") is True
    summary["cases"].append({"case": "true key", "field": None, "value": None, "put": None, "load": true_load,
                             "expect": "loads, runs, matches eager", "held": ok})
    if not ok:
        summary["failures"].append(f"the true key did not load and match eager: {true_load['message']}")

    # 4. the same bytes under edited keys.
    for name, field, value, expect_put_ok, must_hold in CASES:
        edited, put = put_edited(client, full_key, data, field, value)
        kpath = os.path.join(a.work, "keys", f"{name}.json")
        with open(kpath, "w") as f:
            json.dump(edited, f)
        load = run_bench(a.bench, kpath, a.work)
        fails = judge_case(name, expect_put_ok, must_hold, put, load)
        summary["cases"].append({"case": f"{field} edited", "field": field, "value": value,
                                 "original": full_key.get(field), "put": put, "load": load,
                                 "expect": ("PUT accepted; " if expect_put_ok else "PUT refused; ") +
                                           "load refused naming " + must_hold[-1], "held": not fails,
                                 "failures": fails})
        summary["failures"] += [f"{name}: {f}" for f in fails]
    client.close()


def print_table(summary):
    print("| case | kilnd's PUT | kiln_gpu_bench load | held |")
    print("|---|---|---|---|")
    for c in summary["cases"]:
        put = "-" if c["put"] is None else ("accepted" if c["put"]["accepted"] else f"refused: `{c['put']['message']}`")
        load = c["load"]
        if load["rc"] == 0:
            r = load.get("result", {})
            what = f"exit 0, rel. err. {r.get('rel_err_vs_eager', float('nan')):.2e} vs eager"
        else:
            what = f"exit {load['rc']}: `{load['message']}`"
        print(f"| {c['case']} | {put} | {what} | {'yes' if c['held'] else 'NO'} |")


if __name__ == "__main__":
    sys.exit(main())
