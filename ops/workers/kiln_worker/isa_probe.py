"""Inductor's CPU-ISA probes, made as fast on older torch as on newer (the toolchain probe
and every build pick the node's ISA through them)."""
import os

# What a probe child runs instead of torch's: a plain dlopen, which finds libtorch through
# LD_LIBRARY_PATH (faster_isa_probes sets it); `import torch` only when that fails.
_FAST_ISA_PROBE = """
from ctypes import cdll
try:
    cdll.LoadLibrary("__lib_path__")
except OSError:
    import torch  # noqa: F401
    cdll.LoadLibrary("__lib_path__")
"""


def faster_isa_probes():
    """Inductor picks a CPU vector ISA by compiling a probe library per candidate ISA and
    loading it in a child `python -c` (a crash there must not kill the build). Older torch
    (2.11, the GPU machine's) has that child `import torch`: ten children, ~3.5 s each, in
    every build (35 of a FLUX block's 60 s AOTInductor build on an H200:
    tests/gpu/RESULTS-build-speed.md) and in kilnd's toolchain probe at start. Newer torch
    (2.15 here: VecISA._probe_load) loads the library with libtorch on LD_LIBRARY_PATH
    instead; this gives older torch that child. The answer is the same ISA (the same library
    is loaded the same way), so packages do not change. Returns whether it changed anything;
    idempotent."""
    import sys

    import torch
    from torch._inductor import cpu_vec_isa

    isa = cpu_vec_isa.VecISA
    if not sys.platform.startswith("linux") or hasattr(isa, "_probe_load") or not hasattr(isa, "_avx_py_load"):
        return False
    if isa._avx_py_load == _FAST_ISA_PROBE:
        return True
    isa._avx_py_load = _FAST_ISA_PROBE
    lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    old = os.environ.get("LD_LIBRARY_PATH", "")
    os.environ["LD_LIBRARY_PATH"] = f"{lib}:{old}" if old else lib
    return True
