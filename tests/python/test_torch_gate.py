"""The export gate (kiln/torch/_gate.py): a background export runs only while the thread
that drives the model is parked at a block boundary, never beside its module calls (torch's
tracer patches nn.Module.__call__ process-wide; on the H100 an export beside eager calls
failed)."""
import threading
import time

from kiln.torch import _gate


def run_together(*targets):
    """Runs each target on a thread of its own, all at once, and waits for them (30 s each)."""
    threads = [threading.Thread(target=t) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)


def test_a_background_export_runs_only_while_the_driving_thread_is_parked():
    gate = _gate.ExportGate()
    in_module = threading.Event()  # the driving thread is inside the model's modules
    done, overlaps, exported = threading.Event(), [], []

    def driver():  # a serving loop: block boundaries, then module work
        while not done.is_set():
            gate.checkpoint()
            in_module.set()
            time.sleep(0.002)
            in_module.clear()

    def exporter():
        _gate.mark_background()
        for _ in range(5):
            with gate.exclusive():
                for _ in range(20):  # the export's own work, watching for an overlap
                    overlaps.append(in_module.is_set())
                    time.sleep(0.001)
                exported.append(True)
        done.set()

    run_together(driver, exporter)
    assert len(exported) == 5 and len(overlaps) == 100
    assert not any(overlaps)


def test_the_driving_thread_exports_at_once_and_a_stop_ends_a_wait():
    gate = _gate.ExportGate()
    with gate.exclusive():  # on_miss="wait": the caller exports itself; nothing to wait for
        pass
    errors = []

    def exporter():
        _gate.mark_background()
        try:
            with gate.exclusive(stopped=lambda: time.monotonic() > deadline):
                errors.append("entered without a parked caller")
        except _gate.Stopped as ex:
            errors.append(ex)

    deadline = time.monotonic() + 0.2
    t = threading.Thread(target=exporter)
    t.start()
    t.join(10)
    assert len(errors) == 1 and isinstance(errors[0], _gate.Stopped)
    gate.checkpoint()  # the withdrawn request parks nobody


def test_a_driving_thread_that_waits_lets_exports_run_and_resumes_only_after_them():
    # kiln.torch.wait() from the driving thread: exports queued meanwhile must not starve
    # (on the H100, racers waiting for their packages held the next export forever).
    gate = _gate.ExportGate()
    exporting, order = threading.Event(), []

    def exporter():
        _gate.mark_background()
        with gate.exclusive():
            exporting.set()
            time.sleep(0.2)
            order.append("export done")

    t = threading.Thread(target=exporter)
    with gate.parked():
        t.start()
        assert exporting.wait(10)  # the export ran while this thread was parked
    order.append("driver resumed")  # parked() returned only after the export ended
    t.join(10)
    assert order == ["export done", "driver resumed"]


def drive_forwards(gate, done, log, blocks=4, block_s=0.01):
    """A serving loop over a hooked model: a model boundary, then its blocks."""
    while not done.is_set():
        gate.checkpoint(model_boundary=True)
        log.append("model")
        for _ in range(blocks):
            gate.checkpoint()
            log.append("block")
            time.sleep(block_s)


def test_with_a_model_boundary_an_export_waits_for_the_next_model_call_not_a_block():
    # A miss's first forward must run at eager speed: the export's pause falls between
    # two calls of the model, not inside the one running.
    gate = _gate.ExportGate()
    gate.add_model_boundary()
    done, log, seen = threading.Event(), [], []

    def exporter():
        _gate.mark_background()
        while "block" not in log:  # ask while a forward is running
            time.sleep(0.001)
        with gate.exclusive():
            seen.append(list(log))
        done.set()

    threads = [threading.Thread(target=drive_forwards, args=(gate, done, log)), threading.Thread(target=exporter)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    before = seen[0]
    # The export ran right after a model call began (parked at its pre-hook), never
    # inside a forward: the last entry before it is a whole forward's last block.
    assert len(before) % 5 == 0 and before[-1] == "block" and before.count("model") >= 1, before


def export_wait_inside_a_forward(gate, enter_model):
    """Seconds an export asked for inside a running forward waits for its turn, the
    driving thread calling only block checkpoints from then on (after one model call
    when `enter_model`)."""
    done, log, seen = threading.Event(), [], []

    def driver():
        if enter_model:
            gate.checkpoint(model_boundary=True)
            log.append("model")
        while not done.is_set():
            gate.checkpoint()
            log.append("block")
            time.sleep(0.005)

    def exporter():
        _gate.mark_background()
        while "block" not in log:
            time.sleep(0.001)
        t = time.monotonic()
        with gate.exclusive():
            seen.append(time.monotonic() - t)
        done.set()

    run_together(driver, exporter)
    assert seen, "the export never ran"
    return seen[0]


def test_a_request_older_than_the_fallback_parks_at_a_block_boundary(monkeypatch):
    # A model called once, its forward longer than the fallback.
    monkeypatch.setattr(_gate, "BLOCK_FALLBACK_S", 0.05)
    gate = _gate.ExportGate()
    gate.add_model_boundary()
    assert 0.04 <= export_wait_inside_a_forward(gate, enter_model=True) < 5


def test_without_a_model_boundary_a_block_boundary_is_taken_at_once(monkeypatch):
    # A fallback far longer than a slow machine's pause: waiting for it would show.
    monkeypatch.setattr(_gate, "BLOCK_FALLBACK_S", 60.0)
    gate = _gate.ExportGate()
    gate.add_model_boundary()
    gate.add_model_boundary(-1)  # restore(): the model's hook is gone
    assert export_wait_inside_a_forward(gate, enter_model=False) < 20


# A module traced by torch.fx in one thread while another thread calls its own modules:
# the trace waits inside the traced forward (the patch in place) until the other thread's
# call has run. Prints what that call did and the traced graph's operations.
_TRACE_BESIDE_A_CALL = """
import sys, threading, torch
if sys.argv[1] == "confined":
    from kiln.torch import _fx_threads
    assert _fx_threads.confine()
inside, called = threading.Event(), threading.Event()

class Slow(torch.nn.Module):
    def forward(self, x):
        inside.set()
        called.wait(30)
        return torch.relu(x) + 1

graph = []
tracer = threading.Thread(target=lambda: graph.append(torch.fx.symbolic_trace(Slow()).graph))
tracer.start()
inside.wait(30)
try:
    out = torch.nn.Linear(2, 2)(torch.ones(1, 2))  # the model's thread, meanwhile
    print("call ok", tuple(out.shape))
except NameError as ex:
    print("call NameError", ex)
called.set()
tracer.join(30)
print("graph", [getattr(n.target, "__name__", str(n.target)) for n in graph[0].nodes if n.op == "call_function"])
"""


def _trace_beside_a_call(mode):
    import os
    import subprocess
    import sys

    import kiln

    package = os.path.dirname(os.path.dirname(os.path.abspath(kiln.__file__)))  # this kiln, for the child
    out = subprocess.run([sys.executable, "-c", _TRACE_BESIDE_A_CALL, mode], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, PYTHONPATH=package))
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_torch_fx_traces_break_other_threads_module_calls_and_confine_keeps_them_apart():
    """on_miss="compile" traces in a background thread (torch.compile: make_fx, which runs
    torch.fx's Tracer.trace) while the model's thread runs its modules. Unconfined, the
    tracer's process-wide patch of nn.Module.__call__ takes the other thread's call (FLUX
    on an H200: the user's forward raised this NameError); confined, that call runs as
    itself and the trace is unchanged."""
    call, graph = _trace_beside_a_call("unconfined")
    assert call.startswith("call NameError") and "not installed as a submodule" in call, call
    call_c, graph_c = _trace_beside_a_call("confined")
    assert call_c == "call ok (1, 2)"
    assert graph_c == graph and "relu" in graph_c, (graph, graph_c)
