"""GPU check of the Python package's loader path (kiln.torch._aoti), on a tiny block.

  PYTHONPATH=client/python python3 tests/gpu/python_loader_check.py OUTDIR

Builds one weight-free AOTI package of a tiny block, then in fresh processes:
  1. loads it with no preload at all (does the std::regex crash of DESIGN.md happen?);
  2. loads it through kiln.torch._aoti (libstdc++ made global in-process with ctypes,
     AFTER `import torch`, as a user's process would), attaches two instances' weights in
     turn as user-managed constants, and compares with eager; with a dict argument built
     in the export's key order and in another ("rel_errs_dict_reordered": the package
     must read it by key);
  3. the same on cuda:1 when there is a second GPU.
Writes OUTDIR/loader-check.json and prints it.
"""
import json
import os
import subprocess
import sys
import time

BLOCK = '''
import torch
class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(256)
        self.proj = torch.nn.Linear(256, 512)
        self.out = torch.nn.Linear(512, 256)
    def forward(self, hidden_states, temb, rotary=None, extra=None):
        x = self.norm(hidden_states) * (1 + temb[:, None, :])
        x = self.out(torch.nn.functional.gelu(self.proj(x)))
        if rotary is not None:
            x = x * rotary[0] + rotary[1]
        if extra is not None:
            x = x * extra["scale"] + extra["shift"]
        return (x + hidden_states,)
'''

CHILD = BLOCK + '''
import json, sys, time
mode, path, dev = sys.argv[1], sys.argv[2], int(sys.argv[3])
device = torch.device("cuda", dev)
maps = lambda: sorted({l.split()[-1] for l in open("/proc/self/maps") if "libstdc++" in l})
before = maps()
t = time.monotonic()
if mode == "kiln":
    from kiln.torch import _aoti
    pkg = _aoti.load_package(path, dev)
    names = pkg.constant_names
    def run(consts, kwargs):
        return pkg.call(consts, (), kwargs)
else:
    loader = torch._C._aoti.AOTIModelPackageLoader(path, "model", False, 1, dev)
    names = list(loader.get_constant_fqns())
    def run(consts, kwargs):
        loader.load_constants({n: consts[n] for n in names}, False, False, True)
        r, e = kwargs["rotary"], kwargs["extra"]
        return loader.run([kwargs["hidden_states"], kwargs["temb"], r[0], r[1], e["scale"], e["shift"]])
load_s = time.monotonic() - t
errs = []
torch.manual_seed(1)
blocks = [Tiny().to(device).eval() for _ in range(2)]
hs = torch.randn(2, 64, 256, device=device)
temb = torch.randn(2, 256, device=device)
rot = (torch.randn(64, 256, device=device), torch.randn(64, 256, device=device))
scale, shift = torch.randn(64, 256, device=device), torch.randn(64, 256, device=device)
reordered = []
with torch.no_grad():
    for rounds in range(2):
        for b in blocks:
            consts = dict(b.named_parameters())
            consts.update(dict(b.named_buffers()))
            kwargs = dict(hidden_states=hs, temb=temb, rotary=rot, extra={"scale": scale, "shift": shift})
            out = run(consts, kwargs)
            ref = b(**kwargs)[0]
            errs.append(float((out[0] - ref).norm() / ref.norm()))
            if mode == "kiln":  # the same dict, built in another order
                kwargs["extra"] = {"shift": shift, "scale": scale}
                out = run(consts, kwargs)
                reordered.append(float((out[0] - ref).norm() / ref.norm()))
torch.cuda.synchronize()
print(json.dumps({"mode": mode, "device": dev, "load_s": round(load_s, 4), "constants": names,
                  "rel_errs": errs, "rel_errs_dict_reordered": reordered, "libstdcxx_before": before,
                  "libstdcxx_after": maps()}))
'''


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    import torch

    exec(BLOCK, globals())
    result = {"torch": torch.__version__, "gpus": torch.cuda.device_count(),
              "gpu": torch.cuda.get_device_name(0)}
    path = os.path.join(out_dir, "tiny.pt2")
    dev = torch.device("cuda", 0)
    block = Tiny().to(dev).eval()
    kwargs = {"hidden_states": torch.randn(2, 64, 256, device=dev), "temb": torch.randn(2, 256, device=dev),
              "rotary": (torch.randn(64, 256, device=dev), torch.randn(64, 256, device=dev)),
              "extra": {"scale": torch.randn(64, 256, device=dev), "shift": torch.randn(64, 256, device=dev)}}
    t = time.monotonic()
    ep = torch.export.export(block, (), kwargs)
    with torch.no_grad():
        torch._inductor.aoti_compile_and_package(
            ep, package_path=path, inductor_configs={"aot_inductor.package_constants_in_so": False})
    result["compile_s"] = round(time.monotonic() - t, 2)
    result["package_bytes"] = os.path.getsize(path)
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    runs = [("plain", 0), ("kiln", 0)] + ([("kiln", 1)] if torch.cuda.device_count() > 1 else [])
    for mode, d in runs:
        p = subprocess.run([sys.executable, "-c", CHILD, mode, path, str(d)], capture_output=True, text=True,
                           env=env, timeout=240)
        entry = {"mode": mode, "device": d, "returncode": p.returncode, "stderr_tail": p.stderr[-1500:]}
        if p.returncode == 0 and p.stdout.strip():
            entry.update(json.loads(p.stdout.strip().splitlines()[-1]))
        result.setdefault("runs", []).append(entry)
    os.remove(path)
    text = json.dumps(result, indent=1)
    open(os.path.join(out_dir, "loader-check.json"), "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
