"""A real kilnd as a child process, for the Python tests (conftest.py's fixtures) and for
the diffusers family sweep (tests/families). Needs the package importable (`kiln`).

Environment (set by tests/python/CMakeLists.txt when ctest runs the suites):
  KILN_TEST_KILND  the kilnd binary
  KILN_TEST_WORKER the test worker (tests/support/test_worker.cpp)
  KILN_REAL_WORKER the real build worker (ops/workers/kiln_worker), run by
                   KILN_TEST_PYTHON (the pinned environment's python): a kilnd made with
                   worker="real" builds AOTInductor packages for the CPU with it
"""
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib

import kiln

HERE = os.path.dirname(os.path.abspath(__file__))


class MissingEnvironment(RuntimeError):
    """A variable the tests' runner sets is not set."""


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
        raise MissingEnvironment(f"{name} is not set (ctest sets it; see tests/python/CMakeLists.txt)")
    return value


class Kilnd:
    """A kilnd on a socket in a short /tmp folder, store and log in a test folder."""

    def __init__(self, folder, extra_toml="", worker="test"):
        self.folder = folder
        self.worker = worker
        self.sock_dir = tempfile.mkdtemp(prefix="kiln-py-", dir="/tmp")
        os.chmod(self.sock_dir, 0o755)
        self.socket = os.path.join(self.sock_dir, "kiln.sock")
        self.config = os.path.join(folder, "kilnd.toml")
        self.log_path = os.path.join(folder, "kilnd.log")
        with open(self.config, "w") as f:
            f.write('log_level = "info"\n' + extra_toml + "\n")
            if worker == "none":  # a serve-only node: builds nothing, hashes nothing
                f.write('[builds]\nenabled = false\n')
                with open(TEST_NODE_TOML) as node:
                    f.write(node.read())
            elif worker in ("real", "debian-torch", "real-no-unpack"):
                # The node as a CPU machine is: the real worker in the pinned environment, one
                # CPU slot (schema/key.md: gpu_arch/gpu_name "cpu"), node fields from the worker.
                # "debian-torch": the same worker under Debian's python3 and its torch 1.13,
                # older than kiln's range (test_old_torch.py). "real-no-unpack": the real worker
                # whose torch cannot make its package-unpack folder, as torch 2.11 in a sandbox
                # without a /tmp of its own (test_worker_unpack.py): torch takes the first of
                # TMPDIR, TMP, TEMP that is set, Python's tempfile the first that works, so
                # kilnd's TMPDIR moves to TEMP and TMPDIR names no folder.
                python = "/usr/bin/python3" if worker == "debian-torch" else _required_env("KILN_TEST_PYTHON")
                argv = [python, _required_env("KILN_REAL_WORKER")]
                if worker == "real-no-unpack":
                    argv = ["/bin/sh", "-c", 'TEMP="$TMPDIR" TMPDIR=/nonexistent/kiln-no-unpack exec "$0" "$@"'] + argv
                f.write(f'[builds]\nworker = {json.dumps(argv)}\nprobe_gpus = false\nfailure_ttl_s = 600\n'
                        'build_timeout_s = 1200\nbuilds_per_gpu = 2\n[[builds.slots]]\nname = "cpu"\ngpu_arch = "cpu"\ngpu_name = "cpu"\n')
            else:
                worker_path = _required_env("KILN_TEST_WORKER")
                f.write(f'[builds]\nworker = ["{worker_path}"]\nprobe_gpus = false\nfailure_ttl_s = 600\n'
                        f'[[builds.slots]]\nname = "gpu0"\ngpu_arch = "{TEST_NODE["gpu_arch"]}"\n'
                        f'gpu_name = "{TEST_NODE["gpu_name"]}"\n')
                with open(TEST_NODE_TOML) as node:
                    f.write(node.read())
        self.proc = None

    def start(self, timeout=None):
        # The real worker imports torch and asks it for the toolchain before kilnd settles.
        timeout = timeout or (30 if self.worker in ("test", "none") else 180)
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
        """The regions of the builds kilnd started, in order, from its log's lines "build
        <digest> started on <slot> (<kind> <region>)": the sandboxed test worker writes
        nothing outside its build's folder."""
        return re.findall(r"\bbuild [0-9a-f]{64} started on \S+ \(\S+ (\S+)\)", self.log())

    def close(self):
        self.stop(signal.SIGKILL)
        shutil.rmtree(self.sock_dir, ignore_errors=True)

    def source_command(self, behavior="ok", **extra):
        """A source whose content commands the test worker (its text, and the model hash the
        test worker's hash op gives it: the SHA-256 of the text)."""
        import hashlib

        text = json.dumps({"behavior": behavior, **extra})
        return text, hashlib.sha256(text.encode()).hexdigest()



@contextlib.contextmanager
def running(folder, extra_toml="", worker="test"):
    """A started Kilnd in `folder` (made if missing; see Kilnd), killed on exit."""
    os.makedirs(folder, exist_ok=True)
    d = Kilnd(folder, extra_toml, worker)
    try:
        d.start()
        yield d
    finally:
        d.close()


def settled_builds(socket, timeout=60.0):
    """BUILD_STATUS's builds once none is queued or running (or `timeout` seconds passed). A
    build's state turns done a moment after its artifact is served (kilnd records it and
    removes its scratch in between: schema/protocol.md), so a count taken right after a hit
    waits for it here."""
    deadline = time.monotonic() + timeout
    with kiln.Client(socket) as c:
        while True:
            builds = c.build_status()
            if not any(b.get("state") in ("queued", "running") for b in builds) or time.monotonic() > deadline:
                return builds
            time.sleep(0.1)


def done_builds(socket):
    """The key digests of the builds kilnd ran to done, sorted (settled_builds)."""
    return sorted(b["key_digest"] for b in settled_builds(socket) if b.get("state") == "done")


def builds_by_key(socket):
    """{key digest: builds kilnd ran to the end for it (done or failed)} (settled_builds)."""
    counts = {}
    for b in settled_builds(socket):
        if b.get("state") in ("done", "failed"):
            counts[b["key_digest"]] = counts.get(b["key_digest"], 0) + 1
    return counts


def can_build_line(socket):
    """The "can build: ..." line of `python -m kiln status` for the kilnd at `socket`, as an
    operator reads it (the package from this tree)."""
    root = os.path.abspath(os.path.join(HERE, "..", ".."))
    out = subprocess.run([sys.executable, "-m", "kiln", "status", "--socket", socket], capture_output=True, text=True,
                         timeout=300, env=dict(os.environ, PYTHONPATH=os.path.join(root, "client", "python")))
    assert out.returncode == 0, out.stderr
    return next(x for x in out.stdout.splitlines() if x.startswith("can build:"))
