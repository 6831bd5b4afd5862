"""Where a kiln.torch hit's first call spends its time: wraps kiln.torch's internals with
timers (tests/gpu/python_flux.py, KILN_FLUX_VARIANTS with "trace"). Records, per function,
how often it ran and for how long, in which thread, relative to mark_zero() (the start of
the first forward); uninstall() puts the originals back before the timed steps.
Works with older kiln.torch trees (a function that is missing is skipped)."""
import functools
import threading
import time

_events = []
_patched = []
_zero = [time.monotonic()]


def mark_zero():
    _zero[0] = time.monotonic()


def _wrap(owner, name, label, static=False):
    original = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
    if original is None:
        return
    fn = original.__func__ if isinstance(original, staticmethod) else original

    @functools.wraps(fn)
    def timed(*args, **kwargs):
        t = time.monotonic()
        try:
            return fn(*args, **kwargs)
        finally:
            _events.append((label, threading.current_thread().name, t - _zero[0], time.monotonic() - t))

    setattr(owner, name, staticmethod(timed) if isinstance(original, staticmethod) else timed)
    _patched.append((owner, name, original))


def install():
    import kiln.client
    import kiln.torch
    from kiln.torch import _aoti, _fingerprint, _runtime

    for owner, names in ((_fingerprint, ["describe", "fingerprint"]), (kiln.torch, ["capture"]),
                         (_aoti, ["ensure_libstdcxx_global"]), (_runtime, ["LOADER", "block_constants"])):
        for n in names:
            _wrap(owner, n, f"{owner.__name__.split('.')[-1]}.{n}")
    for n in ["entry", "lookup_source", "make_key", "wire_key", "try_hit", "load", "load_artifact", "prefetched",
              "_prefetch", "warm_up"]:
        _wrap(_runtime.Runtime, n, f"Runtime.{n}")
    for n in ["get", "ls", "status", "key_digest"]:
        _wrap(kiln.client.Client, n, f"Client.{n}")
    _wrap(kiln.client.Sources, "list", "Sources.list")
    _wrap(_aoti.Package, "call", "Package.call")
    _wrap(_aoti.Package, "__init__", "Package.__init__")
    make_call = kiln.torch._make_call

    def traced_make_call(state):
        call = make_call(state)

        def block_call(block, original, args, kwargs):
            t = time.monotonic()
            try:
                return call(block, original, args, kwargs)
            finally:
                _events.append((f"block_call.{type(block).__name__}", threading.current_thread().name,
                                t - _zero[0], time.monotonic() - t))

        return block_call

    kiln.torch._make_call = traced_make_call
    _patched.append((kiln.torch, "_make_call", make_call))


def uninstall():
    while _patched:
        owner, name, original = _patched.pop()
        setattr(owner, name, original)


def summary():
    """{label: {count, total_s, max_s, threads}} and the first 400 events."""
    out = {}
    for label, thread, start, dur in _events:
        d = out.setdefault(label, {"count": 0, "total_s": 0.0, "max_s": 0.0, "threads": []})
        d["count"] += 1
        d["total_s"] += dur
        d["max_s"] = max(d["max_s"], dur)
        if thread not in d["threads"]:
            d["threads"].append(thread)
    events = [{"what": label, "thread": thread, "start_s": round(start, 4), "dur_s": round(dur, 5)}
              for label, thread, start, dur in sorted(_events, key=lambda e: e[2])
              if not label.startswith("block_call") and label not in ("kiln.capture", "_runtime.block_constants",
                                                                        "Package.call")][:400]
    return {"by_function": out, "events": events}
