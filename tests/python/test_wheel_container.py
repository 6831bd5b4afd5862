"""The serving container (issue: a serving container with only the kiln wheel and the
node's socket): the wheel make_wheel.py builds, pip-installed with --no-deps into a venv
that otherwise holds only the pinned torch and diffusers (through a .pth file: the
container's own Python packages), run outside the source tree with no KILN_* variable and
no PYTHONPATH, reaching a real kilnd (the real worker, building on the CPU) only through
its socket: a diffusers model misses, is built, runs compiled, and a second process hits
from its first call; `python -m kiln status` answers. And no code of kiln's Python
package reaches for kiln's build worker: the node computes model hashes."""
import json
import os
import subprocess
import sys
import sysconfig

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "families"))

from kilnd_proc import running  # noqa: E402

BF16_TOLERANCE = 2e-2

# The user's program, as a serving container runs it: nothing of kiln's tree, one line of kiln.
USER = r"""
import json, sys, time
import torch
from diffusers import FluxTransformer2DModel
import kiln, kiln.torch

sock, folder, inputs_path, mode = sys.argv[1:5]
torch.set_num_threads(1)
model = FluxTransformer2DModel.from_pretrained(folder, torch_dtype=torch.bfloat16).eval()
inputs = torch.load(inputs_path)
with torch.no_grad():
    ref = model(**inputs, return_dict=False)[0]
kiln.torch.compile_repeated_blocks(model, socket=sock, on_miss=mode)
with torch.no_grad():
    first = model(**inputs, return_dict=False)[0]
    first_status = kiln.torch.status(model)
    again = model(**inputs, return_dict=False)[0]
rel = lambda a: float((a.float() - ref.float()).norm() / ref.float().norm())
print(json.dumps({"kiln": kiln.__file__, "path": sys.path, "first_status": first_status,
                  "status": kiln.torch.status(model), "first_err": rel(first), "err": rel(again)}))
"""


def _container(tmp_path):
    """(python of a venv holding the pinned torch/diffusers and the pip-installed wheel, env)."""
    out = subprocess.run([sys.executable, os.path.join(ROOT, "client", "python", "make_wheel.py"),
                          "--libkiln", os.environ["KILN_LIBRARY"], "--out", str(tmp_path / "dist")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    wheel = out.stdout.strip().splitlines()[-1]
    assert os.path.basename(wheel).startswith("kiln-0.1.0-py3-none-manylinux_")
    venv = tmp_path / "container"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (site / "image-packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # torch, diffusers
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", "--target",
                          str(site), wheel], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env["KILN_CACHE_DIR"] = str(tmp_path / "user-cache")
    return str(venv / "bin" / "python"), env, site


def test_a_container_with_only_the_wheel_misses_builds_and_hits(tmp_path):
    import families

    python, env, site = _container(tmp_path)
    model = families.load_like_a_user("flux", str(tmp_path / "flux"), seed=0)
    torch.save(families.FAMILIES["flux"].inputs(model, 0), str(tmp_path / "inputs.pt"))
    with running(str(tmp_path / "node"), worker="real") as node:
        def user(mode):
            out = subprocess.run([python, "-c", USER, node.socket, str(tmp_path / "flux"), str(tmp_path / "inputs.pt"),
                                  mode], capture_output=True, text=True, timeout=1800, cwd=str(tmp_path), env=env)
            assert out.returncode == 0, out.stderr[-3000:]
            return json.loads(out.stdout.strip().splitlines()[-1])

        miss = user("wait")
        assert os.path.realpath(miss["kiln"]).startswith(os.path.realpath(str(site)))  # the wheel's copy
        assert not any(p.startswith(ROOT) for p in miss["path"])  # nothing of the source tree
        assert miss["first_err"] <= BF16_TOLERANCE and miss["err"] <= BF16_TOLERANCE
        assert {e["state"] for e in miss["status"]} == {"hit"}, miss["status"]
        assert all(e["calls"]["compiled"] > 0 for e in miss["status"])

        hit = user("eager")  # a second process: hits from its first call
        assert all(e["state"] == "hit" and e["calls"]["eager"] == 0 for e in hit["first_status"]), hit["first_status"]
        assert hit["first_err"] <= BF16_TOLERANCE

        out = subprocess.run([python, "-m", "kiln", "status", "--socket", node.socket], capture_output=True, text=True,
                             timeout=120, cwd=str(tmp_path), env=env)
        assert out.returncode == 0, out.stderr
        assert "can build: yes" in out.stdout and "roles: read" in out.stdout
        assert f"torch: {torch.__version__} (supported by kiln.torch)" in out.stdout
    out = subprocess.run([python, "-m", "kiln", "status", "--socket", str(tmp_path / "gone.sock")],
                         capture_output=True, text=True, timeout=120, cwd=str(tmp_path), env=env)
    assert out.returncode == 1 and "kilnd: not reached" in out.stdout


def test_no_code_of_the_python_package_reaches_for_kilns_build_worker():
    package = os.path.join(ROOT, "client", "python", "kiln")
    for folder, _, names in os.walk(package):
        for name in names:
            if name.endswith(".py"):
                text = open(os.path.join(folder, name)).read()
                for needle in ("KILN_WORKER", "KILN_PREFIX", '"kiln_worker"', "share/kiln/workers"):
                    assert needle not in text, f"{name} mentions {needle}"
