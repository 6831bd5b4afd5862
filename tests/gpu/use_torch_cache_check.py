"""kiln.torch.use_torch_cache() on torch 2.11: process 1 compiles a small model cold with
kilnd as torch's remote cache, process 2 (empty local Inductor cache, no TORCHINDUCTOR_*
variables) warm-starts from kilnd. Prints torch's own cache counters per process.

    KILN_SOCKET=/path/kiln.sock KILN_LIBRARY=build-gpu/client/libkiln.so \\
      PYTHONPATH=client/python:.carry/pylib python3 tests/gpu/use_torch_cache_check.py WORKDIR
"""
import json
import os
import subprocess
import sys


def child(cache_dir):
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
    import torch

    import kiln.torch

    url = kiln.torch.use_torch_cache()
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).cuda()
    out = torch.compile(model)(torch.randn(8, 256, device="cuda"))
    torch.cuda.synchronize()
    from torch._dynamo.utils import counters

    print(json.dumps({"url": url, "out": float(out.abs().sum()), "inductor": {k: v for k, v in counters["inductor"].items()
                                                                                   if "fxgraph" in k},
                      "autograd": dict(counters["aot_autograd"])}))


if __name__ == "__main__":
    if sys.argv[1] == "child":
        child(sys.argv[2])
    else:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHINDUCTOR_")}
        for i in range(2):
            p = subprocess.run([sys.executable, __file__, "child", os.path.join(sys.argv[1], f"local-{i}")], env=env,
                               capture_output=True, text=True)
            print(f"process {i + 1}:", p.stdout.strip().splitlines()[-1] if p.returncode == 0 else p.stderr[-2000:])
