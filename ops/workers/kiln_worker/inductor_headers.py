"""Inductor's precompiled wrapper headers, kept in the build's compiler cache."""
import os


def share_precompiled_headers():
    """Inductor precompiles the header every AOTInductor wrapper (and CPU kernel) includes
    into <tempfile.gettempdir()>/torchinductor_<user>/precompiled_headers, not into
    TORCHINDUCTOR_CACHE_DIR. A kilnd build's TMPDIR is its own, so every build compiled it
    again: 4.4 s on the H200 node, most of the gap between a build's C++ phase in kilnd
    (15.8-20.1 s) and alone on warm caches (9.6 s; tests/gpu/RESULTS-build-speed.md, 8).
    This points it at TORCHINDUCTOR_CACHE_DIR/precompiled_headers: the node's compiler
    cache, or the build's own where kilnd does not share one. A header's file name hashes
    its preprocessed text and its compile command, and torch locks each while it writes
    it, as for the cache's other entries. Returns the folder, or None where nothing changed
    (no cache folder set, or a torch without this header cache). Call before compiling."""
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not cache:
        return None
    from torch._inductor import codecache

    if not hasattr(codecache, "_HEADER_DIR") or not hasattr(codecache, "_HEADER_LOCK_DIR"):
        return None
    folder = os.path.join(cache, "precompiled_headers")
    codecache._HEADER_DIR = folder
    codecache._HEADER_LOCK_DIR = os.path.join(folder, "locks")
    return folder
