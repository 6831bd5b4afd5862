"""One supported torch range, checked with a real old torch (issue: a serving container with
only the kiln wheel): Debian's python3-torch (1.13, without torch.export) under Debian's
/usr/bin/python3, the torch a container built from Debian's packages would have.

- The wheel pip-installed into a venv over that torch (no source tree, no KILN_* variable):
  compile_repeated_blocks refuses at once, naming the version and the range, and
  `python -m kiln status` still answers and says the torch is not supported.
- kilnd whose worker runs under that torch: builds are refused, and STATUS says why (the
  worker's torch, the range), so `kilnctl status` and `python -m kiln status` say
  "can build: no: ...".
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
DEBIAN_PYTHON = "/usr/bin/python3"

from kilnd_proc import can_build_line, running  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "client", "python"))
from kiln.torch import _torch_range  # noqa: E402

MINIMUM = ".".join(map(str, _torch_range.MIN_TORCH))


def debian_torch_version():
    out = subprocess.run([DEBIAN_PYTHON, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, ("tests/install-deps.sh installs Debian's python3-torch for this test", out.stderr)
    return out.stdout.strip()


def test_the_wheel_over_an_old_torch_refuses_at_compile_naming_the_version_and_range(tmp_path, kilnd):
    version = debian_torch_version()
    assert version.startswith("1."), version
    out = subprocess.run([sys.executable, os.path.join(ROOT, "client", "python", "make_wheel.py"),
                          "--libkiln", os.environ["KILN_LIBRARY"], "--out", str(tmp_path / "dist")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    wheel = out.stdout.strip().splitlines()[-1]
    venv = tmp_path / "old"
    subprocess.run([DEBIAN_PYTHON, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True,
                   timeout=300)
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    out = subprocess.run([DEBIAN_PYTHON, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", "--target",
                          site, wheel], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(tmp_path)}
    user = ("import torch, kiln.torch\n"
            "try:\n"
            "    kiln.torch.compile_repeated_blocks(torch.nn.Sequential(torch.nn.Linear(2, 2)), block_classes=['Linear'])\n"
            "except RuntimeError as e:\n"
            "    print('refused:', e)\n")
    out = subprocess.run([str(venv / "bin" / "python"), "-c", user], capture_output=True, text=True, timeout=300,
                         env=env, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert f"torch {version} is older than" in out.stdout and f"torch >= {MINIMUM}" in out.stdout, \
        out.stdout
    out = subprocess.run([str(venv / "bin" / "python"), "-m", "kiln", "status", "--socket", kilnd.socket],
                         capture_output=True, text=True, timeout=300, env=env, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "can build: yes" in out.stdout and f"torch: {version}" in out.stdout and "not supported" in out.stdout, \
        out.stdout


def test_a_node_whose_worker_has_an_old_torch_says_it_cannot_build_and_why(tmp_path):
    version = debian_torch_version()
    with running(str(tmp_path), worker="debian-torch") as d:
        line = can_build_line(d.socket)
    assert line.startswith("can build: no:") and f"torch {version} is older than" in line, line
