"""The export gate: torch.export must not run beside the model's own calls.

torch.export's tracer patches nn.Module.__call__ for the whole process while it runs, so a
module called by another thread meanwhile enters the tracer's bookkeeping and the export
fails ("Unexpected key ..."; seen on the H100 with a model stepping while its block was
exported in the background). So a background export first asks the thread that drives the
model to park at its next hooked block call (a block boundary: no module of the model is
running then), exports, and lets it go. The caller pauses once per new signature for the
export itself (seconds; never a compile); saving the archive, hashing it and building run
after the pause.

Where the model itself is hooked too (compile_repeated_blocks registers a forward
pre-hook: add_model_boundary()), an export first waits for the start of the model's next
call, so a forward already running finishes at eager speed and the pause falls between two
calls: a miss's first call costs what eager's does. Only a request older than
BLOCK_FALLBACK_S (a forward that long, or a model never called again) parks the driving
thread at a block boundary instead.

Assumes one thread drives the hooked models at a time (what serving loops do). An export
waits for that thread's next model or block call, or for it to wait in kiln.torch.wait()
(parked()); a server idle between requests exports at the next request. Thread safety:
every method may be called from any thread.
"""
import contextlib
import threading
import time

# How long an export waits for a model boundary before it takes a block boundary.
BLOCK_FALLBACK_S = 5.0

_background = threading.local()


class Stopped(RuntimeError):
    """The runtime stopped while an export waited for its turn."""


class ExportGate:
    def __init__(self):
        self._cv = threading.Condition()
        self._requests = 0  # exports waiting for, or holding, the gate
        self._parked = 0    # callers parked at a block boundary
        self._since = 0.0   # when the oldest request still waiting was made (monotonic)
        self._model_boundaries = 0  # hooked models whose calls are checkpoints too

    def add_model_boundary(self, delta=1):
        """A model's own calls now reach checkpoint(model_boundary=True) (delta=-1: no more)."""
        with self._cv:
            self._model_boundaries += delta

    def checkpoint(self, model_boundary=False):
        """Called at the start of every hooked block call, and of every call of a hooked
        model (model_boundary=True): parks while an export wants the process. At a block
        boundary, while a model boundary is known, only for a request older than
        BLOCK_FALLBACK_S. Costs one attribute read when no export waits."""
        if not self._requests or getattr(_background, "active", False):
            return
        if not model_boundary and self._model_boundaries and time.monotonic() - self._since < BLOCK_FALLBACK_S:
            return
        with self._cv:
            if not self._requests:
                return
            self._parked += 1
            self._cv.notify_all()
            try:
                while self._requests:
                    self._cv.wait()
            finally:
                self._parked -= 1

    @contextlib.contextmanager
    def parked(self):
        """The driving thread runs no module of the model inside this block (it waits, e.g.
        in kiln.torch.wait()): exports may go on meanwhile. Leaving waits for an export in
        progress to end, so the thread never resumes beside one."""
        if getattr(_background, "active", False):
            yield
            return
        with self._cv:
            self._parked += 1
            self._cv.notify_all()
        try:
            yield
        finally:
            with self._cv:
                while self._requests:
                    self._cv.wait()
                self._parked -= 1

    @contextlib.contextmanager
    def exclusive(self, stopped=lambda: False):
        """Holds the process for an export: takes TRACING (a background torch.compile of
        on_miss="compile" may hold it), then, from a background thread, waits until the
        driving thread parks (raising Stopped if `stopped()` turns true meanwhile); from
        the driving thread itself (on_miss="wait"), nothing else runs, so it just goes."""
        while not TRACING.acquire(timeout=0.05):
            if stopped():
                raise Stopped("kiln.torch stopped before the export's turn came")
        try:
            with self._exclusive(stopped):
                yield
        finally:
            TRACING.release()

    @contextlib.contextmanager
    def _exclusive(self, stopped):
        if not getattr(_background, "active", False):
            yield
            return
        with self._cv:
            if self._requests == 0:
                self._since = time.monotonic()
            self._requests += 1
            try:
                while self._parked == 0:
                    if stopped():
                        raise Stopped("kiln.torch stopped before the export's turn came")
                    self._cv.wait(0.05)
            except BaseException:
                self._requests -= 1
                self._cv.notify_all()
                raise
        try:
            yield
        finally:
            with self._cv:
                self._requests -= 1
                self._cv.notify_all()


# Held by whatever traces the block in a thread other than the model's: an export (which
# also parks the model's thread, above) or on_miss="compile"'s background torch.compile
# (which does not: the patches of its tracer act on its own thread only, _fx_threads.py).
# One at a time: two threads tracing at once could unpatch each other's methods.
TRACING = threading.Lock()

GATE = ExportGate()


def mark_background():
    """Marks the calling thread as kiln's background thread (exports wait for the gate)."""
    _background.active = True
