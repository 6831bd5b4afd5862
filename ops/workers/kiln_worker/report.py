"""How every part of the worker reports: WorkerError for failures the daemon passes on to
its waiters, log() for the build log (stderr). The ops import this, never protocol.py, so
imports point one way: protocol (the dispatcher) -> ops -> report."""
import sys


class WorkerError(Exception):
    """A failure the daemon should report to its waiters as it stands."""


def log(*args):
    print("kiln worker:", *args, file=sys.stderr, flush=True)
