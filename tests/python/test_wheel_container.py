"""The serving container (issue: a serving container with only the kiln wheel and the
node's socket): the wheel make_wheel.py builds, pip-installed with --no-deps into a venv
that otherwise holds only the pinned torch and diffusers (through a .pth file: the
container's own Python packages), run outside the source tree with no KILN_* variable and
no PYTHONPATH, as a user other than kilnd's (uid 65534, with the read and build roles),
reaching a real kilnd (the real worker, building on the CPU) only through its socket: a diffusers model misses
(on_miss="compile": torch.compile in the background, then through it; "wait": built, runs
compiled), a second process hits from its first call, a third has a faster variant built in
kilnd's idle time and decided; `python -m kiln status` answers. And no code of kiln's Python
package reaches for kiln's build worker: the node computes model hashes."""
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
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
if mode == "variant":  # a hit process that asks for a faster variant in kilnd's idle time
    kiln.torch.compile_repeated_blocks(model, socket=sock, variants=[{"inductor": {"coordinate_descent_tuning": True}}])
else:
    kiln.torch.compile_repeated_blocks(model, socket=sock, on_miss=mode)
with torch.no_grad():
    first = model(**inputs, return_dict=False)[0]
    first_status = kiln.torch.status(model)
    again = model(**inputs, return_dict=False)[0]
rel = lambda a: float((a.float() - ref.float()).norm() / ref.float().norm())
out = {"kiln": kiln.__file__, "path": sys.path, "first_status": first_status,
       "status": kiln.torch.status(model), "first_err": rel(first), "err": rel(again)}
if mode == "compile":  # torch.compile in the background: wait for it, then a call through it
    deadline = time.monotonic() + 900
    while any(e.get("jit") == "compiling" for e in kiln.torch.status(model)) and time.monotonic() < deadline:
        time.sleep(0.2)
    with torch.no_grad():
        third = model(**inputs, return_dict=False)[0]
    out.update(jit_status=kiln.torch.status(model), jit_err=rel(third))
if mode == "variant":  # decided (built, timed side by side), then a call with what serves
    out["decided"] = kiln.torch.wait(model, timeout=900, variants=True)
    with torch.no_grad():
        fourth = model(**inputs, return_dict=False)[0]
    out.update(variant_status=kiln.torch.status(model), variant_err=rel(fourth))
print(json.dumps(out))
"""


def _container(tmp_path):
    """(python of a venv holding the pinned torch/diffusers and the pip-installed wheel, env,
    its site-packages). tmp_path must be readable by the container's user."""
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
    home = tmp_path / "home"  # the container user's own, writable folder (kiln.torch's cache)
    home.mkdir()
    os.chmod(home, 0o777)
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(home)}
    return str(venv / "bin" / "python"), env, site


# The container's processes run as this user: not kilnd's (root here), reaching kilnd only
# through the socket, with the read and build roles the README's recipe grants (kiln.torch
# needs nothing more: never put).
CONTAINER_UID = 65534
CONTAINER_ACCESS = f'[access]\nsocket_mode = "0666"\nread_users = ["*"]\nbuild_users = ["{CONTAINER_UID}"]\n'


@pytest.fixture
def shared_tmp():
    """A folder the container's user can read (pytest's own are root's alone)."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="kiln-container-", dir="/tmp"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_container_with_only_the_wheel_misses_builds_and_hits(shared_tmp, tmp_path_factory):
    import families

    assert os.geteuid() == 0, "CI runs the tests as root, so the container can run as another user"
    tmp_path = shared_tmp
    python, env, site = _container(tmp_path)
    model = families.load_like_a_user("flux", str(tmp_path / "flux"), seed=0)
    torch.save(families.FAMILIES["flux"].inputs(model, 0), str(tmp_path / "inputs.pt"))
    for folder, _, names in os.walk(tmp_path / "flux"):  # the image's files: readable by its user
        for name in names:
            os.chmod(os.path.join(folder, name), 0o644)
    os.chmod(tmp_path / "inputs.pt", 0o644)
    node_dir = str(tmp_path_factory.mktemp("container-node"))
    with running(node_dir, extra_toml=CONTAINER_ACCESS, worker="real") as node:
        def user(mode):
            out = subprocess.run([python, "-c", USER, node.socket, str(tmp_path / "flux"), str(tmp_path / "inputs.pt"),
                                  mode], capture_output=True, text=True, timeout=1800, cwd=str(tmp_path), env=env,
                                 user=CONTAINER_UID, group=CONTAINER_UID)
            assert out.returncode == 0, out.stderr[-3000:]
            return json.loads(out.stdout.strip().splitlines()[-1])

        # on_miss="compile" first, on the empty node: its first call waits for no compiler,
        # torch.compile runs in the container's process, then its calls go through it.
        jit = user("compile")
        assert all(e["calls"]["eager"] > 0 for e in jit["first_status"]), jit["first_status"]  # ran, not waited
        assert jit["first_err"] <= BF16_TOLERANCE and jit["jit_err"] <= BF16_TOLERANCE
        assert all(e.get("jit") == "ready" or e["state"] == "hit" for e in jit["jit_status"]), jit["jit_status"]
        assert all(e["calls"]["jit"] + e["calls"]["compiled"] > 0 for e in jit["jit_status"]), jit["jit_status"]

        miss = user("wait")
        assert os.path.realpath(miss["kiln"]).startswith(os.path.realpath(str(site)))  # the wheel's copy
        assert not any(p.startswith(ROOT) for p in miss["path"])  # nothing of the source tree
        assert miss["first_err"] <= BF16_TOLERANCE and miss["err"] <= BF16_TOLERANCE
        assert {e["state"] for e in miss["status"]} == {"hit"}, miss["status"]
        assert all(e["calls"]["compiled"] > 0 for e in miss["status"])

        hit = user("eager")  # a second process: hits from its first call
        assert all(e["state"] == "hit" and e["calls"]["eager"] == 0 for e in hit["first_status"]), hit["first_status"]
        assert hit["first_err"] <= BF16_TOLERANCE

        # A faster variant from the container: an idle BUILD with the build role, the
        # package's own check read from the wheel's code, timed side by side, decided.
        variant = user("variant")
        assert variant["decided"] and variant["variant_err"] <= BF16_TOLERANCE, variant["variant_status"]
        for e in variant["variant_status"]:
            [v] = e["variants"]
            assert v["state"] in ("serving", "kept default") and v["step_ratio"] > 0 and v["step_s"] > 0, e
            assert v["key_digest"] != e["key_digest"], e

        out = subprocess.run([python, "-m", "kiln", "status", "--socket", node.socket], capture_output=True, text=True,
                             timeout=120, cwd=str(tmp_path), env=env, user=CONTAINER_UID, group=CONTAINER_UID)
        assert out.returncode == 0, out.stderr
        assert "can build: yes" in out.stdout and "roles: read, build" in out.stdout, out.stdout
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
