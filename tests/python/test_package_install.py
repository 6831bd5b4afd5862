"""`pip install ./client/python` as a user runs it (issue 11): into a fresh venv made from
Debian's python3, offline (`--no-index --no-build-isolation`: setuptools and wheel are
Debian's), from a copy of client/python so that nothing is written into the source tree.
Then a process outside the repository, with no PYTHONPATH, imports the installed package
and uses it against a real kilnd. libkiln is found as _capi.py promises: a copy inside the
package (as a platform wheel carries it) when KILN_LIBRARY is unset, KILN_LIBRARY first
when it is set, and a clear error naming KILN_LIBRARY when that path cannot be loaded.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import TEST_NODE

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(HERE, "..", "..", "client", "python")

# What the installed package does in the venv: a round trip through kilnd, and which
# libkiln the process mapped.
PROGRAM = r"""
import json, os, sys
import kiln
key = json.loads(sys.argv[2])
with kiln.Client(sys.argv[1]) as c:
    c.put(key, b"installed with pip")
    art = c.get(key)
    data = art.read() if art is not None else None
maps = [l.split()[-1] for l in open("/proc/self/maps") if "libkiln.so" in l]
print(json.dumps({"package": os.path.dirname(kiln.__file__), "data": data.decode() if data else None,
                  "libkiln": sorted(set(maps))}))
"""


def _run(cmd, **kw):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    assert out.returncode == 0, f"{cmd}: {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A venv with the package pip-installed from a copy that carries libkiln in kiln/lib."""
    library = os.environ.get("KILN_LIBRARY")
    if not library:
        pytest.skip("KILN_LIBRARY is not set (ctest sets it; see tests/python/CMakeLists.txt)")
    root = tmp_path_factory.mktemp("pip")
    src = root / "src"
    shutil.copytree(PACKAGE, src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    (src / "kiln" / "lib").mkdir()
    shutil.copy(library, src / "kiln" / "lib" / "libkiln.so")
    env_dir = root / "venv"
    _run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(env_dir)])
    python = str(env_dir / "bin" / "python")
    _run([python, "-m", "pip", "install", "--no-index", "--no-build-isolation", "--no-deps", "--quiet", str(src)],
         cwd=str(root))
    return python, root


def _use(venv, socket, **env):
    python, root = venv
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KILN_LIBRARY")}
    clean.update(env)
    key = {"kind": "aoti", "model_hash": "ab" * 32, "region": "PipCheck", "dtype": "bfloat16",
           "inputs": [{"shape": [1, 8], "dtype": "bfloat16", "layout": "strided"}], **TEST_NODE}
    return subprocess.run([python, "-c", PROGRAM, socket, json.dumps(key)], capture_output=True, text=True, timeout=120,
                          cwd=str(root), env=clean)


def test_the_pip_installed_package_uses_its_own_libkiln_against_kilnd(kilnd, venv):
    out = _use(venv, kilnd.socket)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    site = os.path.join(os.path.dirname(venv[0]), "..", "lib")
    assert os.path.realpath(got["package"]).startswith(os.path.realpath(site))  # the installed copy, not the tree
    assert got["data"] == "installed with pip"
    assert got["libkiln"] == [os.path.join(os.path.realpath(got["package"]), "lib", "libkiln.so")]


def test_kiln_library_comes_first_and_a_bad_one_is_named(kilnd, venv):
    library = os.path.realpath(os.environ["KILN_LIBRARY"])
    out = _use(venv, kilnd.socket, KILN_LIBRARY=library)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1])["libkiln"] == [library]
    missing = os.path.join(str(venv[1]), "no-such-libkiln.so")
    out = _use(venv, kilnd.socket, KILN_LIBRARY=missing)
    assert out.returncode != 0
    assert f"KILN_LIBRARY={missing} cannot be loaded" in out.stderr
