"""Worker-level GPU check of call structures and weight-free sources (no daemon): a tiny
block called with keyword arguments, a (cos, sin) tuple and a None, returning a tuple,
holding a parameter, a buffer and a plain tensor attribute, exported as diffusers calls its
blocks; stripped of its weights; hashed, then built as AOTI and megacache by the worker
from the weight-free source; a key under the wrong model hash and a key with a flattened
call are refused.

  python3 tests/gpu/worker_kwargs_check.py --out DIR     (writes kwargs_check.json, worker_logs.txt)
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(os.path.dirname(HERE), "..", "ops", "workers", "kiln_worker")


def run_worker(request, logs, label, timeout=400):
    t = time.monotonic()
    p = subprocess.run([sys.executable, WORKER], input=json.dumps(request), capture_output=True, text=True, timeout=timeout)
    logs.write(f"===== {label} (exit {p.returncode}, {time.monotonic() - t:.1f} s)\n{p.stderr}\n")
    logs.flush()
    lines = [l for l in p.stdout.splitlines() if l.strip()]
    r = json.loads(lines[-1]) if lines else {"ok": False, "error": "no result line"}
    r["wall_seconds"] = round(time.monotonic() - t, 2)
    return r


def export(work):
    import torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(64, 64)
            self.norm = torch.nn.LayerNorm(64)
            self.register_buffer("gain", torch.ones(64))
            self.scale = torch.tensor(0.5)  # a plain tensor attribute (issue 10 item 11)

        def forward(self, hidden_states, temb, image_rotary_emb, joint_attention_kwargs=None):
            cos, sin = image_rotary_emb
            h = self.norm(hidden_states) * (1 + temb[:, None, :])
            h = h * cos + torch.roll(h, 1, -1) * sin
            out = self.proj(h) * self.gain * self.scale.to(h.device)
            return out, hidden_states + out

    torch.manual_seed(0)
    block = Block().cuda().to(torch.bfloat16)
    kwargs = {"hidden_states": torch.randn(1, 32, 64, device="cuda", dtype=torch.bfloat16),
              "temb": torch.randn(1, 64, device="cuda", dtype=torch.bfloat16),
              "image_rotary_emb": (torch.randn(32, 64, device="cuda"), torch.randn(32, 64, device="cuda")),
              "joint_attention_kwargs": None}
    ep = torch.export.export(block, (), kwargs)
    full = os.path.join(work, "block.pt2")
    torch.export.save(ep, full)
    return full, {"in_spec": str(ep.call_spec.in_spec), "constants": sorted(ep.constants),
                  "input_specs": [(s.kind.name, s.target, type(s.arg).__name__) for s in ep.graph_signature.input_specs]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    work = os.path.join(a.out, "work")
    os.makedirs(work, exist_ok=True)
    res = {}
    with open(os.path.join(a.out, "worker_logs.txt"), "w") as logs:
        full, res["export"] = export(work)
        light = os.path.join(work, "block-weight-free.pt2")
        t = time.monotonic()
        res["strip"] = run_worker({"protocol": 1, "op": "strip", "source": full, "output": light}, logs, "strip")
        res["sizes"] = {"full": os.path.getsize(full), "weight_free": os.path.getsize(light) if os.path.exists(light) else None}
        res["hash_full"] = run_worker({"protocol": 1, "op": "hash", "source": full}, logs, "hash full")
        tc = run_worker({"protocol": 1, "op": "toolchain", "host": False}, logs, "toolchain")
        res["toolchain"] = tc
        h = res["strip"]
        node = dict(tc["toolchain"])
        node["gpu_arch"], node["gpu_name"] = tc["gpus"][0]["arch"], tc["gpus"][0]["name"]
        node["cpu_isa"] = node["cpu_isa"] or "avx512"  # not probed (25-70 s); the worker does not check it
        base = {"model_hash": h["model_hash"], "region": "Block", "dtype": h["dtype"], "inputs": h["inputs"],
                "call": h["call"], "compile_options": {}, "format_version": 2, **node}
        for kind in ("aoti", "megacache"):
            key = dict(base, kind=kind)
            res[f"build_{kind}"] = run_worker({"protocol": 1, "op": "build", "key": key, "key_digest": "0" * 64,
                                               "source": light, "output": os.path.join(work, f"{kind}.out"),
                                               "workdir": work}, logs, f"build {kind}")
        bad = dict(base, kind="aoti", model_hash="f" * 64)
        res["wrong_hash"] = run_worker({"protocol": 1, "op": "build", "key": bad, "key_digest": "0" * 64, "source": light,
                                        "output": os.path.join(work, "bad.out"), "workdir": work}, logs, "wrong hash")
        flat = dict(base, kind="aoti", call=None)
        res["flat_call"] = run_worker({"protocol": 1, "op": "build", "key": flat, "key_digest": "0" * 64, "source": light,
                                       "output": os.path.join(work, "flat.out"), "workdir": work}, logs, "flat call")
    with open(os.path.join(a.out, "kwargs_check.json"), "w") as f:
        json.dump(res, f, indent=1, sort_keys=True, default=str)
    print(json.dumps(res, indent=1, sort_keys=True, default=str))


if __name__ == "__main__":
    main()
