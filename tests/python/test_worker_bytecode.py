"""The worker keeps Python's bytecode in the folder kilnd names (KILN_WORKER_PYCACHE) when
torch was installed without any (ops/workers/kiln_worker/bytecode.py): on the H200 node's
uv-installed torch, which has no .pyc files, every worker process compiled torch, Inductor
and torch.export from source (13-16 s) where its sandbox keeps it from writing beside them.
A package of the test's own stands in for torch: with and without its bytecode beside it.
"""
import compileall
import os
import subprocess
import sys

WORKER = os.environ.get("KILN_REAL_WORKER") or os.path.join(os.path.dirname(__file__), "..", "..", "ops", "workers",
                                                            "kiln_worker")
PROGRAM = """
import subprocess, sys
import bytecode
print(bytecode.use_node_cache("kiln_bc_probe"))
import kiln_bc_probe
# a child of the worker (Inductor's compile workers, its ISA probes) imports too
subprocess.run([sys.executable, "-c", "import kiln_bc_probe.child"], check=True)
"""


def make_package(root):
    pkg = root / "site" / "kiln_bc_probe"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("VALUE = 1\n")
    (pkg / "child.py").write_text("VALUE = 2\n")
    return pkg


def run(root, cache, **extra):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    env.update(PYTHONPATH=os.pathsep.join([WORKER, str(root / "site")]), **extra)
    if cache is not None:
        env["KILN_WORKER_PYCACHE"] = str(cache)
    out = subprocess.run([os.environ.get("KILN_TEST_PYTHON", sys.executable), "-c", PROGRAM], capture_output=True,
                         text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[0]


def cached(cache):
    """The .pyc files under `cache`: file name -> modification time (ns)."""
    return {n: os.stat(os.path.join(d, n)).st_mtime_ns for d, _, ns in os.walk(cache) for n in ns if n.endswith(".pyc")}


def test_without_bytecode_beside_it_the_process_and_its_children_compile_into_the_named_folder(tmp_path):
    pkg = make_package(tmp_path)
    cache = tmp_path / "node-cache"
    assert run(tmp_path, cache) == str(cache)
    names = cached(cache)
    assert any(n.startswith("__init__.") for n in names), names
    assert any(n.startswith("child.") for n in names), names  # the child process's import, through the environment
    assert not (pkg / "__pycache__").exists()  # nothing written into the installation
    # A second process finds it there and leaves it as it was.
    assert run(tmp_path, cache) == str(cache)
    assert cached(cache) == names


def test_an_installation_with_its_bytecode_keeps_using_it(tmp_path):
    pkg = make_package(tmp_path)
    assert compileall.compile_dir(str(pkg), quiet=1)
    cache = tmp_path / "node-cache"
    assert run(tmp_path, cache) == "None"
    assert cached(cache) == {}


def test_no_folder_named_changes_nothing(tmp_path):
    make_package(tmp_path)
    assert run(tmp_path, None) == "None"
    # an operator's own prefix wins over kilnd's
    cache = tmp_path / "node-cache"
    assert run(tmp_path, cache, PYTHONPYCACHEPREFIX=str(tmp_path / "theirs")) == "None"
    assert cached(cache) == {}
