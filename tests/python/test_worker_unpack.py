"""The worker refuses, at kilnd's toolchain probe, a node where torch's AOTInductor package
loader cannot make its unpack folder (ops/workers/kiln_worker/toolchain.py). Seen on an H200
(tests/gpu/RESULTS-build-speed.md, 7): torch 2.11 unpacks into /tmp whatever TMPDIR says, and
in a container that refuses kilnd a mount namespace the sandboxed worker has no writable /tmp;
every build then failed at its check run, after its whole compile. The pinned torch unpacks
into TMPDIR, so an unusable TMPDIR plays that node here, with the real worker and kilnd.
"""
import json
import os
import subprocess

from kilnd_proc import can_build_line, running


def toolchain_op(env):
    out = subprocess.run([os.environ["KILN_TEST_PYTHON"], os.environ["KILN_REAL_WORKER"]],
                         input=json.dumps({"protocol": 1, "op": "toolchain", "host": False}), capture_output=True,
                         text=True, timeout=300, env=env)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_probe_passes_where_the_loader_can_unpack_and_leaves_nothing_behind(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    reply = toolchain_op(dict(os.environ, TMPDIR=str(tmp)))
    assert reply["ok"], reply
    assert reply["toolchain"]["torch_version"]
    # The loader made its unpack folder in TMPDIR and failed on the probe's model-less zip;
    # the probe removed that folder and its own (torch's compile cache folder may stay).
    left = [n for n in os.listdir(tmp) if not n.startswith("torchinductor_")]
    assert left == []


def test_the_probe_refuses_where_the_loader_cannot_unpack_naming_the_ways_out(tmp_path):
    # torch takes TMPDIR although it names no folder; Python's tempfile moves on to TEMP
    reply = toolchain_op(dict(os.environ, TMPDIR=str(tmp_path / "missing"), TEMP=str(tmp_path)))
    assert not reply["ok"], reply
    err = reply["error"]
    assert "AOTInductor package loader cannot unpack a package in this worker" in err, err
    assert "CAP_SYS_ADMIN" in err and "sandbox = false" in err and "temporary directory" in err, err


def test_kilnd_whose_worker_cannot_unpack_says_it_cannot_build_and_why(tmp_path):
    with running(str(tmp_path), worker="real-no-unpack") as d:
        line = can_build_line(d.socket)
    assert line.startswith("can build: no: torch "), line  # the worker's words, first
    assert "cannot unpack a package" in line and "sandbox = false" in line, line
