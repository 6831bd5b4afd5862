"""kiln.torch against a real kilnd building through the test worker: hook install and
restore, call guards, the miss state machine (eager -> exporting -> building -> hit, and
failed), a hit in a fresh runtime with no export, on_miss="wait", autograd, a daemon that
is gone.

The state machine's corners (failing builds, held builds, daemons going away, exits during
an export) need a worker that misbehaves on command, and the test worker produces bytes,
not packages. So two narrow seams of kiln.torch._runtime are replaced here:
EXPORTER (writes a test-worker command as the "archive"; its model hash is the SHA-256 of
that text, as the test worker's hash op says) and LOADER (checks it was handed the bytes
kilnd built for that key, and returns a package that runs the block's class through
torch.nn.utils.stateless.functional_call with the constants it is given, so a wrong
instance's weights would show in the outputs). Everything else is the real code path:
fingerprints, guards, keys, sources, builds, polling, swapping. The same path with the
real worker, real exports and real packages: test_torch_real_path.py, test_torch_lora.py
and tests/families.
"""
import hashlib
import json
import os
import subprocess
import sys
import time

import pytest

import torch  # noqa: E402  (the pinned environment has it: tests/python-requirements.txt)

import kiln  # noqa: E402
import kiln.torch  # noqa: E402
from kiln.torch import _STATE_ATTR, _hooks, _layouts, _node, _runtime  # noqa: E402
from conftest import TEST_NODE, wait_for  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, hidden_states, temb=None, joint_attention_kwargs=None):
        y = self.proj(hidden_states)
        if temb is not None:
            y = y + temb
        return (y,)


class Model(torch.nn.Module):
    _repeated_blocks = ["Block"]

    def __init__(self, n=3):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block() for _ in range(n)])

    def forward(self, x, temb=None, **kw):
        for b in self.blocks:
            x = b(hidden_states=x, temb=temb, **kw)[0]
        return x


class Seams:
    """The replaced EXPORTER and LOADER, with what they saw."""

    def __init__(self, kilnd, behavior="ok"):
        self.kilnd, self.behavior = kilnd, behavior
        self.exports, self.loads, self.calls = [], [], 0
        self.command = {}  # more for the test worker's command (sleep_ms, ...)
        self.example_inputs = None  # text the archive carries outside its model hash
        self.call_inputs = []  # per package call: (hidden_states' stride, any nonzero, weight's data_ptr)

    def export(self, block, args, kwargs, workdir, as_called=None):
        assert "forward" not in vars(block)  # the unhooked view, never kiln's own forward
        # Like a real model hash, this one covers the call's structure and shapes.
        call = json.dumps([[list(a.shape) for a in args], {k: repr(v) for k, v in sorted(kwargs.items())}])
        text, model_hash = self.kilnd.source_command(self.behavior, log=call, region=type(block).__name__,
                                                     **self.command)
        if self.example_inputs is not None:  # the test worker does not hash it (test_worker.cpp)
            text += "\n#example-inputs " + self.example_inputs
        path = os.path.join(workdir, "block.json")
        with open(path, "w") as f:
            f.write(text)
        self.exports.append((type(block).__name__, sorted(kwargs)))
        return path, model_hash

    def load(self, path, device_index, key=None):
        data = open(path, "rb").read()
        assert data.startswith(b"artifact of ")  # what the test worker built
        self.loads.append((data, device_index))
        seams = self

        class Package:
            template = Block()

            def call(self, constants, args, kwargs):
                seams.calls += 1
                seams.call_inputs.append((kwargs["hidden_states"].stride(), bool(kwargs["hidden_states"].any()),
                                          constants["proj.weight"].data_ptr()))
                return torch.func.functional_call(self.template, constants, args, kwargs)

        return Package()


@pytest.fixture
def seams(kilnd, monkeypatch):
    s = Seams(kilnd)
    monkeypatch.setattr(_runtime, "EXPORTER", s.export)
    monkeypatch.setattr(_runtime, "LOADER", s.load)
    # The test worker's toolchain, not Debian's torch: kilnd builds only keys of its own.
    monkeypatch.setattr(_node, "node_fields", lambda device: dict(TEST_NODE))
    return s


@pytest.fixture(autouse=True)
def patient_first_calls(monkeypatch):
    """A first call waits up to 60 s for its hit attempt, not HIT_WAIT_S's 5: a test that
    expects the very first call to run the package must not see a loaded machine's slow
    attempt run it eager. The test of that bound sets its own."""
    monkeypatch.setattr(_runtime, "HIT_WAIT_S", 60.0)


def run(model, x, temb=None, **kw):
    with torch.no_grad():
        return model(x, temb, **kw)


def states(model):
    return sorted(e["state"] for e in kiln.torch.status(model))


def test_miss_runs_eager_then_the_built_package_takes_over(kilnd, seams):
    model, x = Model(), torch.randn(2, 4, 8)
    expected = run(model, x)
    kiln.torch.compile_repeated_blocks(model, socket=kilnd.socket)
    assert torch.equal(run(model, x), expected)  # the first call: eager, never waits
    assert kiln.torch.wait(model, timeout=30)
    assert states(model) == ["hit"], kiln.torch.status(model)
    assert len(seams.exports) == 1 and len(kilnd.builds()) == 1 and len(seams.loads) == 1
    assert seams.exports[0] == ("Block", ["hidden_states", "temb"])  # the call as made
    calls = seams.calls
    assert torch.allclose(run(model, x), expected)  # each instance's own weights
    assert seams.calls == calls + 3
    entry = kiln.torch.status(model)[0]
    assert entry["calls"]["compiled"] == 3 and entry["region"] == "Block" and entry["key_digest"]
    # The key kilnd stored is the one kiln.torch built (the test node's fields, our region).
    with kiln.Client(kilnd.socket) as c:
        info = c.stat(entry["key_digest"])
    assert info["key"]["region"] == "Block" and info["key"]["inputs"][0]["shape"] == [2, 4, 8]


def test_a_program_another_process_registered_first_is_built_from_its_source(kilnd, seams, tmp_path):
    """Two processes export one block at once: their archives differ (each carries what it
    was traced with), their model hash does not, and kilnd keeps the first source. The
    second process builds from that source instead of failing (found on the H100: the
    miss process of a cold-node race stayed eager)."""
    model, x = Model(), torch.randn(2, 4, 8)
    expected = run(model, x)
    seams.example_inputs = "the other process's activations"
    path, model_hash = seams.export(Block(), (), {"hidden_states": x, "temb": None}, str(tmp_path))
    with kiln.Client(kilnd.socket) as c:
        c.sources.put(model_hash, path, name="registered-by-another-process.pt2")
    seams.example_inputs = "this process's activations"
    kiln.torch.compile_repeated_blocks(model, socket=kilnd.socket)
    assert torch.equal(run(model, x), expected)
    assert kiln.torch.wait(model, timeout=30)
    assert states(model) == ["hit"], kiln.torch.status(model)
    assert len(seams.exports) == 2 and len(kilnd.builds()) == 1  # ours was exported, then refused
    with kiln.Client(kilnd.socket) as c:
        (source,) = c.sources.list(model_hash)
    assert source["name"] == "registered-by-another-process.pt2"  # the first source stays
    assert torch.allclose(run(model, x), expected)


def test_a_second_fingerprint_of_a_registered_program_is_found_by_its_name_in_later_processes(kilnd, seams):
    """Two fingerprints, one program (an attribute forward never reads): the second exports
    once, kilnd keeps its name as an alias of the first's source, and a later runtime (what
    a new process is) with the second fingerprint hits without exporting again."""
    x = torch.randn(2, 4, 8)

    def serve(note=None):
        model = Model()  # fresh instances, as a new process has (descriptions are per instance)
        if note is not None:
            for b in model.blocks:
                b.note = note
        expected = run(model, x)
        kiln.torch.compile_repeated_blocks(model, socket=kilnd.socket)
        run(model, x)
        assert kiln.torch.wait(model, timeout=30)
        assert states(model) == ["hit"], kiln.torch.status(model)
        (entry,) = kiln.torch.status(model)
        assert torch.allclose(run(model, x), expected)
        kiln.torch.restore(model)
        return entry["fingerprint"]

    first = serve()
    second = serve(note="read by no forward")
    assert first != second and len(seams.exports) == 2 and len(kilnd.builds()) == 1
    with kiln.Client(kilnd.socket) as c:
        (source,) = c.sources.list()
    assert source["name"] == f"kiln-fp-{first}.pt2" and source["aliases"] == [f"kiln-fp-{second}.pt2"], source
    assert serve(note="read by no forward") == second
    assert len(seams.exports) == 2 and len(kilnd.builds()) == 1  # found by its alias: no export


def test_a_new_signature_takes_its_own_miss_path_and_guards_hold(kilnd, seams):
    model = Model()
    kiln.torch.compile_repeated_blocks(model, socket=kilnd.socket)
    run(model, torch.randn(2, 4, 8))
    assert kiln.torch.wait(model, timeout=30)
    calls = seams.calls
    other = torch.randn(2, 6, 8)
    out = run(model, other)  # a new resolution: eager, never the first package
    assert seams.calls == calls and out.shape == other.shape
    run(model, torch.randn(2, 4, 8), joint_attention_kwargs={"scale": 1.0})  # another constant
    assert seams.calls == calls
    assert kiln.torch.wait(model, timeout=30)
    assert states(model) == ["hit", "hit", "hit"]
    assert len(kilnd.builds()) == 3


def test_a_fresh_process_hits_at_the_first_call_without_exporting(kilnd, seams):
    first, x = Model(), torch.randn(2, 4, 8)
    kiln.torch.compile_repeated_blocks(first, socket=kilnd.socket)
    run(first, x)
    assert kiln.torch.wait(first, timeout=30)
    kiln.torch.restore(first)
    exports = len(seams.exports)
    second = Model()  # other weights, same architecture: same fingerprint
    kiln.torch.compile_repeated_blocks(second, socket=kilnd.socket)
    calls = seams.calls
    assert torch.allclose(run(second, x), run_eager(second, x))
    assert seams.calls == calls + 3  # the very first call ran the package
    assert states(second) == ["hit"] and len(seams.exports) == exports and len(kilnd.builds()) == 1
    assert kiln.torch.status(second)[0]["calls"]["compiled"] == 3


def run_eager(model, x):
    with torch.no_grad():
        y = x
        for b in model.blocks:
            y = type(b).forward(b, hidden_states=y)[0]
        return y


def test_a_failed_build_leaves_the_block_eager_with_the_reason(kilnd, seams):
    seams.behavior = "fail"
    model, x = Model(), torch.randn(2, 4, 8)
    expected = run(model, x)
    kiln.torch.compile_repeated_blocks(model, socket=kilnd.socket)
    run(model, x)
    wait_for(lambda: states(model) == ["failed"], what="the failed state")
    assert "failed on purpose" in kiln.torch.status(model)[0]["detail"]
    assert torch.equal(run(model, x), expected) and seams.calls == 0


def test_restore_puts_the_class_forward_back(kilnd, seams):
    from kiln.torch import _gate

    model = Model()
    boundaries = _gate.GATE._model_boundaries
    blocks = kiln.torch.compile_repeated_blocks(model, socket=kilnd.socket)
    assert len(blocks) == 3 and all(_hooks.is_installed(b) for b in blocks)
    assert len(model._forward_pre_hooks) == 1 and _gate.GATE._model_boundaries == boundaries + 1
    with pytest.raises(ValueError):
        kiln.torch.compile_repeated_blocks(model, socket=kilnd.socket)
    kiln.torch.restore(model)
    assert not any(_hooks.is_installed(b) for b in blocks)
    x = torch.randn(2, 4, 8)
    assert all(torch.equal(b(hidden_states=x)[0], Block.forward(b, hidden_states=x)[0]) for b in blocks)
    assert len(model._forward_pre_hooks) == 0 and _gate.GATE._model_boundaries == boundaries
    assert kiln.torch.status(model) == []
    kiln.torch.restore(model)  # idempotent
    run(model, torch.randn(2, 4, 8))
    assert seams.exports == []


def test_restore_waits_for_the_runtimes_threads_and_a_waiting_export_gives_up(kilnd, seams, monkeypatch):
    """restore() ends the model's background threads before it returns. An export still
    waiting for its turn (the model's next call, which after restore() never comes) gives
    up instead of holding restore() for STOP_WAIT_S."""
    import threading

    from kiln.torch import _gate

    monkeypatch.setattr(_gate, "BLOCK_FALLBACK_S", 600.0)  # the turn comes only at a model call
    monkeypatch.setattr(_runtime, "STOP_WAIT_S", 600.0)
    asked, outcome = threading.Event(), []

    def export(block, args, kwargs, workdir, as_called=None):
        asked.set()
        try:
            with _gate.GATE.exclusive(_runtime._stop_requested):
                outcome.append("turn")
        except _gate.Stopped:
            outcome.append("gave up")
            raise
        return seams.export(block, args, kwargs, workdir)

    monkeypatch.setattr(_runtime, "EXPORTER", export)
    model = Model()
    kiln.torch.compile_repeated_blocks(model, socket=kilnd.socket)
    runtime = model._kiln_torch_state.runtime
    run(model, torch.randn(2, 4, 8))
    assert asked.wait(30)
    kiln.torch.restore(model)
    assert not [t.name for t in runtime._threads if t.is_alive()]
    assert outcome == ["gave up"] and seams.exports == []


def test_block_classes_for_a_plain_module_and_clear_refusals(kilnd, seams):
    plain = torch.nn.Sequential(Block(), Block())
    with pytest.raises(ValueError):
        kiln.torch.compile_repeated_blocks(plain)  # no _repeated_blocks
    assert len(kiln.torch.compile_repeated_blocks(plain, block_classes=[Block], socket=kilnd.socket)) == 2
    with pytest.raises(ValueError):
        kiln.torch.compile_repeated_blocks(torch.nn.Linear(2, 2), block_classes=[Block])
    with pytest.raises(ValueError):
        kiln.torch.compile_repeated_blocks(Model(), on_miss="later")


def test_wait_mode_asks_for_every_signature_then_waits_at_the_end_of_the_call(kilnd, seams, monkeypatch):
    model, x, y = Model(), torch.randn(2, 4, 8), torch.randn(2, 6, 8)

    def two_signatures(m, a, b):  # one model call that meets two signatures of the block
        return m(a), m(b)

    class Twice(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, a, b):
            return two_signatures(self.inner, a, b)

    outer = Twice(model)
    with torch.no_grad():
        expected = outer(x, y)
    exported_before_waiting = []
    wait_for_builds = _runtime.Runtime.wait_for_builds

    def recording(self):  # what was under way when the call's wait began
        exported_before_waiting.append(len(seams.exports))
        wait_for_builds(self)

    monkeypatch.setattr(_runtime.Runtime, "wait_for_builds", recording)
    kiln.torch.compile_repeated_blocks(outer, block_classes=[Block], socket=kilnd.socket, on_miss="wait")
    with torch.no_grad():
        a, _ = outer(x, y)
    assert seams.calls == 0  # the model call that met the misses ran eager ...
    assert torch.equal(a, expected[0])  # eager's own result
    assert sorted(states(outer)) == ["hit", "hit"]  # ... and waited for both builds when it ended
    # both exported before any was waited for: each registered and built in a thread of its own
    assert exported_before_waiting == [2]
    assert len(kilnd.builds()) == 2
    with torch.no_grad():
        outer(x, y)
    assert seams.calls == 6  # every block of both signatures compiled


def test_unsupported_calls_and_autograd_run_eager(kilnd, seams):
    model, x = Model(), torch.randn(2, 4, 8)
    kiln.torch.compile_repeated_blocks(model, socket=kilnd.socket)
    run(model, x)
    assert kiln.torch.wait(model, timeout=30)
    calls = seams.calls

    class Opaque:
        pass

    run(model, x, joint_attention_kwargs=Opaque())
    assert seams.calls == calls
    assert any(e["state"] == "unsupported" for e in kiln.torch.status(model))
    y = model(x)  # grad enabled and parameters require grad: a package has no backward
    y.sum().backward()
    assert seams.calls == calls and model.blocks[0].proj.weight.grad is not None


def test_no_daemon_means_eager_and_a_reason(tmp_path, seams):
    model, x = Model(), torch.randn(2, 4, 8)
    expected = run(model, x)
    kiln.torch.compile_repeated_blocks(model, socket=str(tmp_path / "absent.sock"))
    assert torch.equal(run(model, x), expected)
    wait_for(lambda: states(model) == ["failed"], what="the failed state")
    assert "unavailable" in kiln.torch.status(model)[0]["detail"]
    assert torch.equal(run(model, x), expected)


def test_fingerprint_names_the_source(kilnd, seams):
    model = Model()
    kiln.torch.compile_repeated_blocks(model, socket=kilnd.socket)
    run(model, torch.randn(2, 4, 8))
    assert kiln.torch.wait(model, timeout=30)
    fp = kiln.torch.status(model)[0]["fingerprint"]
    with kiln.Client(kilnd.socket) as c:
        names = {s["name"]: s["model_hash"] for s in c.sources.list()}
    assert list(names) == [f"kiln-fp-{fp}.pt2"]
    with kiln.Client(kilnd.socket) as c, c.sources.get(names[f"kiln-fp-{fp}.pt2"]) as src:
        text = src.read()
    assert hashlib.sha256(text).hexdigest() == names[f"kiln-fp-{fp}.pt2"] and json.loads(text)["behavior"] == "ok"


def test_a_daemon_that_never_answers_does_not_hold_a_call(tmp_path, seams, monkeypatch):
    import socket
    import threading
    import time

    monkeypatch.setattr(_runtime, "HIT_WAIT_S", 0.5)
    # libkiln gives up on this daemon after its 5 s connect timeout (on one that stalls
    # later in a request, never); the hit attempt is held here until the call returned
    # (60 s at most), so a call that waited for it would take 60 s.
    returned, try_hit = threading.Event(), _runtime.Runtime.try_hit

    def held_try_hit(self, job):
        try:
            return try_hit(self, job)
        finally:
            returned.wait(60)

    monkeypatch.setattr(_runtime.Runtime, "try_hit", held_try_hit)
    path = str(tmp_path / "mute.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(16)  # accepts (the kernel's backlog) and never says a word
    try:
        model, x = Model(), torch.randn(2, 4, 8)
        expected = run(model, x)
        kiln.torch.compile_repeated_blocks(model, socket=path)
        t = time.monotonic()
        assert torch.equal(run(model, x), expected)
        assert time.monotonic() - t < 30  # the hit attempt's wait is bounded; eager ran
    finally:
        returned.set()
        server.close()


class Other(Block):
    """A second block class (another region) of the same structure."""


class TwoClasses(torch.nn.Module):
    _repeated_blocks = ["Block", "Other"]

    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(), Other(), Block(), Other()])

    def forward(self, x, temb=None, **kw):
        for b in self.blocks:
            x = b(hidden_states=x, temb=temb, **kw)[0]
        return x


def two_classes_built(kilnd, seams, command, timeout):
    """A TwoClasses model through its misses, the test worker given `command`: the first
    call runs eager (eager's output), then both classes hit. Returns (model, x, expected)."""
    seams.command = command
    model, x = TwoClasses(), torch.randn(2, 4, 8)
    expected = run(model, x)
    kiln.torch.compile_repeated_blocks(model, socket=kilnd.socket)
    assert torch.equal(run(model, x), expected)
    assert kiln.torch.wait(model, timeout=timeout)
    assert states(model) == ["hit", "hit"], kiln.torch.status(model)
    return model, x, expected


def test_a_second_block_class_is_exported_while_kilnd_still_checks_the_first_source(kilnd, seams, monkeypatch):
    """kilnd's hash check of a registered source runs a worker process (4-10 s on the H200):
    the next block class's export does not wait for it, and both classes build. Before,
    the miss thread registered each source before exporting the next class."""
    started = []

    def timed_export(*args, **kwargs):
        started.append(time.monotonic())
        return seams.export(*args, **kwargs)

    monkeypatch.setattr(_runtime, "EXPORTER", timed_export)
    model, x, expected = two_classes_built(kilnd, seams, {"hash_sleep_ms": 3000}, timeout=60)
    assert len(started) == 2 and started[1] - started[0] < 2.0, started  # not after the first's 3 s check
    assert sorted(kilnd.builds()) == ["Block", "Other"]
    assert torch.allclose(run(model, x), expected)


def test_every_block_class_is_asked_for_at_once_so_kilnd_builds_them_side_by_side(kilnd, seams):
    # Each build takes 5 s. Waiting for one class's build before exporting the next would
    # queue the second only after the first finished; asked for at once, the second is
    # queued moments after the first, seconds before the first finishes, which kilnd's
    # whole-second times still tell apart on a slow machine.
    model, x, expected = two_classes_built(kilnd, seams, {"sleep_ms": 5000}, timeout=120)
    with kiln.Client(kilnd.socket) as c:
        # kilnd serves an artifact before its job turns done (the build record's fsync).
        wait_for(lambda: [b["state"] for b in c.build_status()] == ["done", "done"], timeout=60,
                 what="both builds done")
        builds = sorted(c.build_status(), key=lambda b: b["queued_at"])
    assert builds[1]["queued_at"] < builds[0]["finished_at"], builds
    assert torch.allclose(run(model, x), expected)


def test_compile_mode_compiles_in_the_background_and_runs_it_until_the_package_lands(kilnd, seams, tmp_path):
    """on_miss="compile": no call waits for torch.compile; it compiles the class in a
    background thread (one graph for all instances), calls run eager until it is ready and
    through it after, while kilnd builds (held here until the compiled calls were seen);
    status() says where the build and the compile stand; the package takes over between
    two calls."""
    model, x = Model(), torch.randn(2, 4, 8)
    expected = run(model, x)
    hold = tmp_path / "hold"
    hold.write_text("")
    seams.command = {"holds": [{"file": str(hold), "only": ""}]}
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    kiln.torch.compile_repeated_blocks(model, socket=kilnd.socket, on_miss="compile")
    assert torch.allclose(run(model, x), expected, atol=1e-6)
    entry = kiln.torch.status(model)[0]
    # The first call started the compile and did not wait for it.
    assert entry["calls"] == {"compiled": 0, "eager": 3, "jit": 0}, entry
    ready = wait_for(lambda: [e for e in kiln.torch.status(model) if e.get("jit") != "compiling"], timeout=300,
                     what="the background compile")
    assert ready[0]["jit"] == "ready", ready
    assert torch.allclose(run(model, x), expected, atol=1e-6)
    entry = kiln.torch.status(model)[0]
    assert entry["state"] in ("exporting", "building") and entry["calls"] == {"compiled": 0, "eager": 3, "jit": 3}
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1  # the class's forward, once
    building = wait_for(lambda: [e for e in kiln.torch.status(model) if e.get("queue")], timeout=60)
    assert building[0]["queue"]["position"] == 0  # running: nothing ahead of it
    hold.unlink()
    assert kiln.torch.wait(model, timeout=60)
    assert torch.allclose(run(model, x), expected, atol=1e-6)
    entry = kiln.torch.status(model)[0]
    assert entry["state"] == "hit" and entry["calls"] == {"compiled": 3, "eager": 3, "jit": 3}
    assert "queue" not in entry and "jit" not in entry


def test_compile_mode_falls_back_to_eager_when_torch_compile_fails(kilnd, seams, monkeypatch):
    def broken(forward):
        def call(*args, **kwargs):
            raise RuntimeError("no compiler here")
        return call

    seams.command = {"sleep_ms": 4000}
    model, x = Model(), torch.randn(2, 4, 8)
    expected = run(model, x)
    kiln.torch.compile_repeated_blocks(model, socket=kilnd.socket, on_miss="compile")
    monkeypatch.setattr(model.__dict__[_STATE_ATTR].runtime, "jit_compiled", broken)
    assert torch.equal(run(model, x), expected)
    wait_for(lambda: kiln.torch.status(model)[0].get("jit") == "failed", timeout=60, what="the compile's failure")
    assert torch.equal(run(model, x), expected)
    entry = kiln.torch.status(model)[0]
    assert entry["calls"]["eager"] == 6 and entry["calls"]["jit"] == 0
    assert "torch.compile failed" in entry["detail"] and "no compiler here" in entry["detail"]


def test_two_models_share_one_loaded_package(kilnd, seams):
    first, second, x = Model(), Model(), torch.randn(2, 4, 8)
    kiln.torch.compile_repeated_blocks(first, socket=kilnd.socket)
    run(first, x)
    assert kiln.torch.wait(first, timeout=30)
    kiln.torch.compile_repeated_blocks(second, socket=kilnd.socket)
    run(second, x)
    assert states(second) == ["hit"]
    assert len(seams.loads) == 1  # loaded once for the process
    assert torch.allclose(run(second, x), run_eager(second, x)) and torch.allclose(run(first, x), run_eager(first, x))


CHILD_EXITS_DURING_EXPORT = r"""
import os, sys, time, torch
import kiln.torch
from kiln.torch import _node, _runtime
sock, marker, node = sys.argv[1], sys.argv[2], eval(sys.argv[3])

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
    def forward(self, hidden_states):
        return (self.proj(hidden_states),)

class Model(torch.nn.Module):
    _repeated_blocks = ["Block"]
    def __init__(self):
        super().__init__()
        self.block = Block()
    def forward(self, x):
        return self.block(hidden_states=x)[0]

def export(block, args, kwargs, workdir, as_called=None):
    open(marker, "w").write("started")
    time.sleep(1.5)  # the process exits meanwhile
    open(marker, "w").write("finished")
    raise RuntimeError("no archive in this test")

_runtime.EXPORTER = export
_node.node_fields = lambda device: dict(node)
model = Model()
kiln.torch.compile_repeated_blocks(model, socket=sock)
with torch.no_grad():
    model(torch.randn(2, 8))
while not os.path.exists(marker):
    time.sleep(0.01)
print("exiting with the export in flight", flush=True)
"""


def test_a_process_that_exits_during_an_export_waits_for_it_and_exits_cleanly(kilnd, tmp_path):
    marker = str(tmp_path / "export-state")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.run([sys.executable, "-c", CHILD_EXITS_DURING_EXPORT, kilnd.socket, marker, repr(TEST_NODE)],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "exiting with the export in flight" in p.stdout
    assert open(marker).read() == "finished"  # the export was let finish, not cut off


def _built_once(seams, kilnd, x):
    """Builds and stores the package of Model's block for `x`, as an earlier process would;
    then forgets every loaded package, as a fresh process would."""
    first = Model()
    kiln.torch.compile_repeated_blocks(first, socket=kilnd.socket)
    run(first, x)
    assert kiln.torch.wait(first, timeout=30) and states(first) == ["hit"]
    restore_releasing_packages(first)


def restore_releasing_packages(model):
    """restore(model), which leaves no package of its own loaded in the process: the next
    model of the class loads its own (LOADER runs), as in a fresh process."""
    slots = [(e["key_digest"], -1) for e in kiln.torch.status(model) if e["key_digest"]]
    assert slots
    kiln.torch.restore(model)
    assert not [s for s in slots if s in _runtime._packages], "a package outlived restore()"


@pytest.fixture
def fresh_packages(monkeypatch):
    import weakref

    monkeypatch.setattr(_runtime, "_packages", weakref.WeakValueDictionary())


@pytest.fixture
def gets(monkeypatch):
    """Counts GETs of artifacts (kiln.Client.get)."""
    counted = []
    original = kiln.Client.get

    def get(self, key, *a, **kw):
        counted.append(key)
        return original(self, key, *a, **kw)

    monkeypatch.setattr(kiln.Client, "get", get)
    return counted


def test_the_prefetch_loads_the_stored_package_before_the_first_call(kilnd, seams, gets, monkeypatch):
    x = torch.randn(2, 4, 8)
    _built_once(seams, kilnd, x)
    monkeypatch.setattr(_runtime, "_packages", __import__("weakref").WeakValueDictionary())
    loads, calls = len(seams.loads), seams.calls
    second = Model()
    kiln.torch.compile_repeated_blocks(second, socket=kilnd.socket)
    assert kiln.torch.wait(second, timeout=30)  # waits for the prefetch
    assert len(seams.loads) == loads + 1 and kiln.torch.status(second) == []  # loaded before any call
    got = len(gets)
    assert torch.allclose(run(second, x), run_eager(second, x))
    assert seams.calls == calls + 3 and states(second) == ["hit"]  # the first call ran the package
    assert len(seams.loads) == loads + 1 and len(gets) == got  # the prefetched one: no second GET or load


def test_a_prefetched_package_is_used_only_for_its_own_key(kilnd, seams, fresh_packages):
    _built_once(seams, kilnd, torch.randn(2, 4, 8))
    loads, calls = len(seams.loads), seams.calls
    other = Model()
    kiln.torch.compile_repeated_blocks(other, socket=kilnd.socket)
    assert kiln.torch.wait(other, timeout=30) and len(seams.loads) == loads + 1  # the (2, 4, 8) package
    y = torch.randn(3, 4, 8)  # another signature: its own fingerprint and key
    assert torch.equal(run(other, y), run_eager(other, y)) and seams.calls == calls  # eager, not the prefetched one
    assert kiln.torch.wait(other, timeout=30) and states(other) == ["hit"]
    assert len(seams.loads) == loads + 2 and len(kilnd.builds()) == 2  # its own build and package
    assert torch.allclose(run(other, y), run_eager(other, y))


def test_prefetch_false_loads_nothing_before_the_first_call(kilnd, seams, fresh_packages):
    x = torch.randn(2, 4, 8)
    _built_once(seams, kilnd, x)
    loads = len(seams.loads)
    second = Model()
    kiln.torch.compile_repeated_blocks(second, socket=kilnd.socket, prefetch=False)
    assert kiln.torch.wait(second, timeout=30) and len(seams.loads) == loads
    run(second, x)
    assert states(second) == ["hit"] and len(seams.loads) == loads + 1  # the first call's hit attempt loaded it


def hold_loads(seams, monkeypatch):
    """Makes every package load wait for `release` (after setting `started`)."""
    import threading

    started, release = threading.Event(), threading.Event()
    load = seams.load

    def slow_load(path, index, key=None):
        started.set()
        assert release.wait(10)
        return load(path, index, key=key)

    monkeypatch.setattr(_runtime, "LOADER", slow_load)
    return started, release


def test_a_hit_attempt_waits_for_the_prefetch_load_in_flight(kilnd, seams, fresh_packages, monkeypatch):
    import threading

    x = torch.randn(2, 4, 8)
    _built_once(seams, kilnd, x)
    loads = len(seams.loads)
    started, release = hold_loads(seams, monkeypatch)
    second = Model()
    kiln.torch.compile_repeated_blocks(second, socket=kilnd.socket)
    assert started.wait(10)  # the prefetch is inside the loader
    threading.Timer(0.3, release.set).start()
    calls = seams.calls
    assert torch.allclose(run(second, x), run_eager(second, x))
    assert seams.calls == calls + 3 and len(seams.loads) == loads + 1  # waited for it: one load, used at once


def test_a_package_whose_layout_a_process_recorded_is_warmed_before_the_first_call(kilnd, seams, fresh_packages):
    """The first compiled call of a key records its inputs' layout (strides too: here a
    view whose strides are not a contiguous tensor's); a later process's prefetch runs the
    package once on zeros of exactly that layout, with its first block's weights, so the
    package's kernels load before the model's first call (_layouts.py)."""
    x = torch.randn(2, 8, 8)[:, :4, :]
    first = Model(n=1)
    kiln.torch.compile_repeated_blocks(first, socket=kilnd.socket)
    run(first, x)
    assert kiln.torch.wait(first, timeout=30) and states(first) == ["hit"]
    run(first, x)  # compiled: records the layout
    digest = kiln.torch.status(first)[0]["key_digest"]
    kiln.torch.restore(first)
    with open(_layouts.path(digest)) as f:
        layout = json.load(f)
    assert layout["inputs"][0] == {"shape": [2, 4, 8], "stride": [64, 8, 1], "dtype": "float32"}

    calls = seams.calls
    second = Model(n=1)
    kiln.torch.compile_repeated_blocks(second, socket=kilnd.socket)
    assert kiln.torch.wait(second, timeout=30)
    assert seams.calls == calls + 1 and kiln.torch.status(second) == []  # warmed before any call
    assert seams.call_inputs[-1] == ((64, 8, 1), False, second.blocks[0].proj.weight.data_ptr())
    assert torch.allclose(run(second, x), run_eager(second, x)) and states(second) == ["hit"]
    assert seams.calls == calls + 1 + 1
    kiln.torch.restore(second)

    # A record that disagrees with the key (another shape), or none: no warm-up.
    layout["inputs"][0]["shape"] = [2, 5, 8]
    with open(_layouts.path(digest), "w") as f:
        json.dump(layout, f)
    _runtime._packages.clear()
    calls = seams.calls
    third = Model(n=1)
    kiln.torch.compile_repeated_blocks(third, socket=kilnd.socket)
    assert kiln.torch.wait(third, timeout=30) and seams.calls == calls
    kiln.torch.restore(third)
    os.remove(_layouts.path(digest))
    _runtime._packages.clear()
    fourth = Model(n=1)
    kiln.torch.compile_repeated_blocks(fourth, socket=kilnd.socket)
    assert kiln.torch.wait(fourth, timeout=30) and seams.calls == calls
    assert torch.allclose(run(fourth, x), run_eager(fourth, x))
    assert os.path.exists(_layouts.path(digest))  # written again by this process's first compiled call


def test_no_warm_up_starts_once_the_model_has_been_called(kilnd, seams, fresh_packages, monkeypatch):
    """A warm-up beside a forward only moves its cost into that forward: once the model is
    called, the prefetch loads but warms nothing."""
    import threading

    x = torch.randn(2, 4, 8)
    first = Model(n=1)
    kiln.torch.compile_repeated_blocks(first, socket=kilnd.socket)
    run(first, x)
    assert kiln.torch.wait(first, timeout=30)
    run(first, x)  # records the layout
    restore_releasing_packages(first)
    started, release = hold_loads(seams, monkeypatch)
    calls = seams.calls
    second = Model(n=1)
    kiln.torch.compile_repeated_blocks(second, socket=kilnd.socket)
    assert started.wait(10)  # the prefetch is inside the loader
    threading.Timer(0.3, release.set).start()
    assert torch.allclose(run(second, x), run_eager(second, x))  # called while the load is in flight
    assert kiln.torch.wait(second, timeout=30) and states(second) == ["hit"]
    assert seams.calls == calls + 1  # the call itself, no warm-up


def test_a_torch_too_old_is_refused_at_once_naming_the_version(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "1.13.1")
    with pytest.raises(RuntimeError, match="torch 1.13.1 is older than .*torch >= 2.6"):
        kiln.torch.compile_repeated_blocks(Model())


def test_a_diffusers_hook_inside_kilns_runs_eager_and_one_outside_stays_on_hits(kilnd, seams):
    """A package replaces the block's whole forward chain. A diffusers hook registered on
    the block BEFORE compile_repeated_blocks (FirstBlockCache and friends) sits inside
    kiln's: the block runs eager, status() says why, and the hook acts on every call. One
    registered AFTER wraps kiln's: hits, and the hook acts on them too. A torch hook on a
    submodule would be skipped by a package: eager."""
    from diffusers.hooks import HookRegistry, ModelHook

    class Twice(ModelHook):
        def post_forward(self, module, output):
            return tuple(o * 2 for o in output)

    def plain_with_twice(model, x):
        y = x
        with torch.no_grad():
            for b in model.blocks:
                y = Block.forward(b, hidden_states=y)[0] * 2
        return y

    inner, x = Model(), torch.randn(2, 4, 8)
    for b in inner.blocks:
        HookRegistry.check_if_exists_or_initialize(b).register_hook(Twice(), "twice")
    kiln.torch.compile_repeated_blocks(inner, socket=kilnd.socket)
    assert torch.allclose(run(inner, x), plain_with_twice(inner, x))
    assert torch.allclose(run(inner, x), plain_with_twice(inner, x))
    (entry,) = kiln.torch.status(inner)
    assert entry["state"] == "unsupported" and "['twice']" in entry["detail"] and seams.calls == 0
    assert seams.exports == []  # nothing of it was exported or built

    outer = Model()
    kiln.torch.compile_repeated_blocks(outer, socket=kilnd.socket)
    for b in outer.blocks:
        HookRegistry.check_if_exists_or_initialize(b).register_hook(Twice(), "twice")
    run(outer, x)
    assert kiln.torch.wait(outer, timeout=30) and states(outer) == ["hit"]
    calls = seams.calls
    assert torch.allclose(run(outer, x), plain_with_twice(outer, x))  # the hook acted on the hits
    assert seams.calls == calls + 3

    before = plain_with_twice(outer, x)
    outer.blocks[0].proj.register_forward_hook(lambda m, a, out: out + 1)
    want = plain_with_twice(outer, x)  # the submodule hook changes block 0's output ...
    assert not torch.allclose(want, before)
    calls = seams.calls
    assert torch.allclose(run(outer, x), want) and seams.calls == calls + 2  # ... so block 0 runs eager
    assert any(e["state"] == "unsupported" and "submodule" in e["detail"] for e in kiln.torch.status(outer))


def test_a_lora_scale_changed_before_the_first_hit_is_another_fingerprint(kilnd, seams):
    """The block's description is cached; a state change must drop it even when no call of
    the old state has hit yet (a persistent scale such as set_adapters' weights, changed
    while the first state still builds), or both states share one entry and the second
    would run the first's package."""
    from peft import LoraConfig, inject_adapter_in_model

    model, x = Model(), torch.randn(2, 4, 8)
    inject_adapter_in_model(LoraConfig(r=2, target_modules=["proj"]), model)
    kiln.torch.compile_repeated_blocks(model, socket=kilnd.socket)
    run(model, x)
    for b in model.blocks:
        b.proj.scaling["default"] = 0.5
    run(model, x)
    fingerprints = {e["fingerprint"] for e in kiln.torch.status(model)}
    assert len(fingerprints) == 2, kiln.torch.status(model)


def test_queue_estimate_from_the_nodes_build_history():
    from kiln.torch import _queue

    done = [{"key_digest": f"d{i}", "state": "done", "queued_at": 0, "started_at": 10 * i, "finished_at": 10 * i + s}
            for i, s in enumerate((20, 30, 40))]
    running = {"key_digest": "r", "state": "running", "queued_at": 100, "started_at": 100}
    queued = [{"key_digest": f"q{i}", "state": "queued", "queued_at": 101 + i} for i in range(3)]
    builds = done + [running] + queued
    # running 5 s of a typical 30: 25 left, nothing ahead
    assert _queue.estimate(builds, "r", now=105) == {"position": 0, "expected_s": 25.0}
    # the third queued: two queued and one running ahead; one build at a time: 4 rounds of 30 s
    assert _queue.estimate(builds, "q2", now=105) == {"position": 2, "expected_s": 120.0}
    # two at a time: (2 + 1) // 2 + 1 = 2 rounds
    assert _queue.estimate(builds, "q2", now=105, concurrency=2) == {"position": 2, "expected_s": 60.0}
    # no history: the position alone
    assert _queue.estimate([running] + queued, "q0", now=105) == {"position": 0, "expected_s": None}
    assert _queue.estimate(builds, "d0", now=105) is None  # landed: nothing to wait for
