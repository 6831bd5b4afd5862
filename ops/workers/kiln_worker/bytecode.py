"""Where the worker's Python keeps bytecode when its torch was installed without any.

An installation without .pyc files (uv installs none by default; images are often built with
PYTHONDONTWRITEBYTECODE) that the worker cannot write into (kilnd's sandbox, a worker_user,
a read-only image) makes every worker process compile torch, Inductor and torch.export from
source: 13-16 s per process on the H200 node's uv-installed torch 2.11
(tests/gpu/RESULTS-build-speed.md, 8). kilnd names a folder for it in KILN_WORKER_PYCACHE
(the node's compiler cache, daemon/builds/src/compiler_cache.hpp); an installation that has
its bytecode keeps using it, since a cache prefix makes Python ignore the __pycache__
folders beside the sources.
"""
import importlib.util
import os
import sys

ENV = "KILN_WORKER_PYCACHE"


def use_node_cache(module="torch"):
    """Points this process's bytecode, and its children's (Inductor's compile workers, its
    CPU-ISA probes), at $KILN_WORKER_PYCACHE when `module`'s own bytecode is not beside its
    source. Call before importing it. Returns the folder, or None where nothing changed
    (no folder named, a prefix already set, the module not installed, or its bytecode
    present)."""
    folder = os.environ.get(ENV)
    if not folder or sys.pycache_prefix:
        return None
    spec = importlib.util.find_spec(module)
    origin = spec.origin if spec is not None else None
    if not origin or not origin.endswith(".py"):
        return None
    if os.path.exists(importlib.util.cache_from_source(origin)):
        return None
    sys.pycache_prefix = folder
    os.environ["PYTHONPYCACHEPREFIX"] = folder
    return folder
