"""Fixtures for the kiln Python package's tests: a real kilnd (started as a child process,
building through the project's test worker), and the package and libkiln under test.

Environment (set by tests/python/CMakeLists.txt when ctest runs this suite):
  KILN_LIBRARY     the libkiln.so built here
  KILN_TEST_KILND  the kilnd binary
  KILN_TEST_WORKER the test worker (tests/support/test_worker.cpp)
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))

import kiln  # noqa: E402

# The test node (its one copy: tests/support/test_node.toml), the [node] table every test
# kilnd is configured with. TEST_NODE: the fields a key carries; cpu_isa is left to kilnd.
TEST_NODE_TOML = os.path.join(HERE, "..", "support", "test_node.toml")
with open(TEST_NODE_TOML, "rb") as _f:
    _NODE = tomllib.load(_f)["node"]
TEST_NODE = {k: v for k, v in _NODE.items() if k != "cpu_isa"}
TEST_CPU_ISA = _NODE["cpu_isa"]


def _required_env(name):
    value = os.environ.get(name)
    if not value:
        pytest.skip(f"{name} is not set (ctest sets it; see tests/python/CMakeLists.txt)")
    return value


class Kilnd:
    """A kilnd on a socket in a short /tmp folder, store and log in a test folder."""

    def __init__(self, folder, extra_toml=""):
        self.folder = folder
        self.sock_dir = tempfile.mkdtemp(prefix="kiln-py-", dir="/tmp")
        os.chmod(self.sock_dir, 0o755)
        self.socket = os.path.join(self.sock_dir, "kiln.sock")
        self.config = os.path.join(folder, "kilnd.toml")
        self.log_path = os.path.join(folder, "kilnd.log")
        self.count_file = os.path.join(folder, "builds.txt")
        worker = _required_env("KILN_TEST_WORKER")
        with open(self.config, "w") as f:
            f.write('log_level = "info"\n' + extra_toml + "\n")
            f.write(f'[builds]\nworker = ["{worker}"]\nprobe_gpus = false\nfailure_ttl_s = 600\n'
                    f'[[builds.slots]]\nname = "gpu0"\ngpu_arch = "{TEST_NODE["gpu_arch"]}"\n'
                    f'gpu_name = "{TEST_NODE["gpu_name"]}"\n')
            with open(TEST_NODE_TOML) as node:
                f.write(node.read())
        self.proc = None

    def start(self, timeout=30):
        binary = _required_env("KILN_TEST_KILND")
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([binary, "--socket", self.socket, "--store", os.path.join(self.folder, "store"),
                                      "--config", self.config], stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        while True:
            try:
                # kilnd serves while its build service still probes; tests start from a
                # settled node.
                with kiln.Client(self.socket) as c:
                    if not c.status().get("builds_probing"):
                        return
            except kiln.Unavailable:
                pass
            except kiln.PermissionDenied:  # a test's kilnd may not let it ask STATUS
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("kilnd did not start; its log:\n" + self.log())
            time.sleep(0.02)

    def stop(self, sig=signal.SIGTERM):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)
        self.proc = None

    def log(self):
        try:
            return open(self.log_path, errors="replace").read()
        except OSError:
            return ""

    def builds(self):
        """Lines "<region> <pid>" the test worker appended, one per build started."""
        try:
            return open(self.count_file).read().splitlines()
        except OSError:
            return []

    def close(self):
        self.stop(signal.SIGKILL)
        shutil.rmtree(self.sock_dir, ignore_errors=True)

    def source_command(self, behavior="ok", **extra):
        """A source whose content commands the test worker (its text, and the model hash the
        test worker's hash op gives it: the SHA-256 of the text)."""
        import hashlib
        import json

        text = json.dumps({"behavior": behavior, "count_file": self.count_file, **extra})
        return text, hashlib.sha256(text.encode()).hexdigest()


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

    def make(extra_toml="", name="node"):
        folder = tmp_path / name
        folder.mkdir()
        d = Kilnd(str(folder), extra_toml)
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
