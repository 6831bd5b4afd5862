"""Fixtures for the kiln Python package's tests: a real kilnd (kilnd_proc.py: a child
process building through the project's test worker, or the real worker on the CPU), and
the package and libkiln under test.

Environment (set by tests/python/CMakeLists.txt when ctest runs this suite): KILN_LIBRARY,
the libkiln.so built here; kilnd_proc.py's variables.
"""
import os
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))

import kiln  # noqa: E402

from kilnd_proc import TEST_CPU_ISA, TEST_NODE, TEST_NODE_TOML, Kilnd, MissingEnvironment  # noqa: E402,F401


@pytest.fixture(autouse=True)
def kiln_cache_dir(tmp_path, monkeypatch):
    """kiln.torch's per-user files (Triton's hash, input layouts) in the test's folder,
    never the user's ~/.cache/kiln."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "kiln-cache"))


@pytest.fixture
def kilnd(tmp_path):
    d = Kilnd(str(tmp_path))
    d.start()
    yield d
    d.close()


@pytest.fixture
def make_kilnd(tmp_path):
    made = []

    def make(extra_toml="", name="node", worker="test"):
        folder = tmp_path / name
        folder.mkdir()
        d = Kilnd(str(folder), extra_toml, worker)
        made.append(d)
        return d

    yield make
    for d in made:
        d.close()


@pytest.fixture
def client(kilnd):
    with kiln.Client(kilnd.socket) as c:
        yield c


def wait_for(cond, timeout=20.0, what="condition"):
    """Polls `cond` until true or `timeout` passes (then fails naming `what`)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)
