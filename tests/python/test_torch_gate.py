"""The export gate (kiln/torch/_gate.py): a background export runs only while the thread
that drives the model is parked at a block boundary, never beside its module calls (torch's
tracer patches nn.Module.__call__ process-wide; on the H100 an export beside eager calls
failed)."""
import threading
import time

import pytest

from kiln.torch import _gate


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

    threads = [threading.Thread(target=driver), threading.Thread(target=exporter)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
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
