"""torch.fx's tracer, confined to the thread that traces.

torch.fx's Tracer.trace, which make_fx, AOTAutograd and so every torch.compile run on,
patches torch.nn.Module.__call__ and __getattr__ on the class, for the whole process, while
it traces. on_miss="compile" runs torch.compile in a background thread while the model's
own thread calls its modules: a module called meanwhile went through the tracer, and the
user's forward raised NameError("module is not installed as a submodule") (FLUX on an H200,
torch 2.11, 2026-11-29). confine() makes those two patches act on the thread that made them
only; any other thread calls the method the patch replaced.
"""
import functools
import threading

PATCHED = ("__call__", "__getattr__")
_lock = threading.Lock()
_confined = None  # None: not tried; True / False: whether confine() is in place


def confine():
    """Confines torch.fx's patches of nn.Module to the tracing thread, once per process
    (later calls return the first answer). Returns False where this torch patches some
    other way (no torch.fx._symbolic_trace._Patcher.patch_method): then nothing may trace
    beside the model's own calls."""
    global _confined
    with _lock:
        if _confined is None:
            _confined = _install()
        return _confined


def _install():
    try:
        import torch
        from torch.fx import _symbolic_trace
        patcher = _symbolic_trace._Patcher
        original = patcher.patch_method
    except (ImportError, AttributeError):
        return False

    @functools.wraps(original)
    def patch_method(self, cls, name, new_fn, deduplicate=True):
        if cls is torch.nn.Module and name in PATCHED:
            new_fn = _for_this_thread(getattr(cls, name), new_fn)
        return original(self, cls, name, new_fn, deduplicate)

    patcher.patch_method = patch_method
    return True


def _for_this_thread(replaced, tracing):
    owner = threading.get_ident()

    def per_thread(*args, **kwargs):
        if threading.get_ident() == owner:
            return tracing(*args, **kwargs)
        return replaced(*args, **kwargs)

    per_thread.__name__ = getattr(tracing, "__name__", "per_thread")
    return per_thread
