"""How every part of the worker reports: WorkerError for failures the daemon passes on to
its waiters, log() for the build log (stderr). Every module imports this, and it imports
none of them; nothing imports protocol.py (the dispatcher) but __main__."""
import sys


class WorkerError(Exception):
    """A failure the daemon should report to its waiters as it stands."""


def log(*args):
    print("kiln worker:", *args, file=sys.stderr, flush=True)
