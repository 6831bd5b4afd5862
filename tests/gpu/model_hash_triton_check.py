"""GPU check of the model hash's rules for user code (schema/sources.md; issue 10 items 5
and 10), in one process, no daemon, no diffusers: plain python3 with torch 2.11 and Triton.

  python3 tests/gpu/model_hash_triton_check.py [--out DIR]     (< 60 s on an H100)

Blocks, each a Linear followed by user code, exported with torch.export.export and hashed
by the worker's own model_hash.model_hash (ops/workers/kiln_worker):
  - relu / square: the same block calling two different @triton.jit kernels through
    torch.library.wrap_triton (the graph holds triton_kernel_wrapper_* with a kernel_idx
    into torch's kernel side table): their hashes must differ;
  - relu exported a second time in this process (new side-table indexes): same hash;
  - op_relu / op_square: the same through torch.library.triton_op custom ops (hashed by
    their Python implementation and the kernels it launches): must differ; op_relu twice:
    same hash;
  - ones: a block that creates a tensor with device=x.device: its hash document must not
    hold "cuda:" (devices are hashed by type).
Also reported, not judged: whether the raw-Triton block's archive survives
torch.export.save/load (torch's deserializer may not support the Triton wrapper).

Prints one JSON document (hashes, rules, notes) and exits 1 if a rule fails, 2 if the
machine cannot run the check (no GPU, no Triton).
"""
import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "ops", "workers", "kiln_worker"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", help="folder for model_hash_triton_check.json")
    a = ap.parse_args()
    t0 = time.monotonic()
    try:
        import torch
        import triton
        import triton.language as tl
    except ImportError as e:
        print(json.dumps({"ok": False, "error": f"needs torch and triton: {e}"}))
        return 2
    if not torch.cuda.is_available():
        print(json.dumps({"ok": False, "error": "needs a CUDA GPU"}))
        return 2
    import model_hash
    from torch.library import triton_op, wrap_triton

    @triton.jit
    def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m)
        tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=m)

    @triton.jit
    def square_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m)
        tl.store(out_ptr + offs, x * x, mask=m)

    def launch(kernel, x):
        out = torch.empty_like(x)
        n = x.numel()
        wrap_triton(kernel)[(triton.cdiv(n, 256),)](x, out, n, BLOCK=256)
        return out

    @triton_op("kilncheck::relu", mutates_args=())
    def op_relu(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        n = x.numel()
        wrap_triton(relu_kernel)[(triton.cdiv(n, 256),)](x, out, n, BLOCK=256)
        return out

    @triton_op("kilncheck::square", mutates_args=())
    def op_square(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        n = x.numel()
        wrap_triton(square_kernel)[(triton.cdiv(n, 256),)](x, out, n, BLOCK=256)
        return out

    class Block(torch.nn.Module):
        def __init__(self, act):
            super().__init__()
            self.linear = torch.nn.Linear(64, 64)
            self.act = act

        def forward(self, x):
            return self.act(self.linear(x))

    class Ones(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(64, 64)

        def forward(self, x):
            return self.linear(x) + torch.ones(64, device=x.device)

    dev = torch.device("cuda", 0)
    x = torch.randn(8, 64, device=dev)
    blocks = {
        "relu": lambda: Block(lambda y: launch(relu_kernel, y)),
        "square": lambda: Block(lambda y: launch(square_kernel, y)),
        "op_relu": lambda: Block(torch.ops.kilncheck.relu),
        "op_square": lambda: Block(torch.ops.kilncheck.square),
        "ones": Ones,
    }
    hashes, errors, eps = {}, {}, {}

    def export(name, label):
        try:
            with torch.no_grad():
                ep = torch.export.export(blocks[name]().to(dev), (x,))
            eps[label] = ep
            hashes[label] = model_hash.model_hash(ep)
        except Exception as e:  # noqa: BLE001 - reported, and the rules on it fail
            errors[label] = f"{type(e).__name__}: {e}"

    for name in ("relu", "square", "op_relu", "op_square", "ones"):
        export(name, name)
    export("relu", "relu_again")        # the same kernel, exported second in this process
    export("op_relu", "op_relu_again")

    def differ(a, b):
        return a in hashes and b in hashes and hashes[a] != hashes[b]

    def same(a, b):
        return a in hashes and b in hashes and hashes[a] == hashes[b]

    notes = {}
    ones_doc = json.dumps(model_hash.hash_document(eps["ones"]), sort_keys=True) if "ones" in eps else ""
    relu_doc = json.dumps(model_hash.hash_document(eps["relu"]), sort_keys=True) if "relu" in eps else ""
    rules = {
        "different_triton_kernels_differ": differ("relu", "square"),
        "same_triton_kernel_exported_twice_same": same("relu", "relu_again"),
        "different_triton_ops_differ": differ("op_relu", "op_square"),
        "same_triton_op_exported_twice_same": same("op_relu", "op_relu_again"),
        "triton_kernel_hashed_by_content": '"triton_kernel"' in relu_doc or '"triton_kernels"' in relu_doc,
        "no_device_index_in_hash": bool(ones_doc) and "cuda:" not in ones_doc,
    }
    # Not judged: can the raw-Triton source travel as an archive (torch.export.save/load)?
    if "relu" in eps:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "relu.pt2")
            try:
                torch.export.save(eps["relu"], path)
                loaded = torch.export.load(path)
                notes["relu_archive_round_trip"] = {"ok": True, "hash_after_load": model_hash.model_hash(loaded)}
            except Exception as e:  # noqa: BLE001
                notes["relu_archive_round_trip"] = {"ok": False, "error": f"{type(e).__name__}: {str(e)[:300]}"}
    ok = all(rules.values())
    doc = {"ok": ok, "torch": torch.__version__, "triton": triton.__version__, "gpu": torch.cuda.get_device_name(0),
           "hashes": hashes, "rules": rules, "errors": errors, "notes": notes,
           "seconds": round(time.monotonic() - t0, 1)}
    text = json.dumps(doc, indent=2, sort_keys=True)
    print(text)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "model_hash_triton_check.json"), "w") as f:
            f.write(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
