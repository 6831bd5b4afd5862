"""Weight-free exported programs (schema/sources.md) and the libstdc++ an AOTInductor
package needs in scope: ONE implementation each, this file. kiln.torch strips the exports
it registers and preloads libstdc++ before loading a package; the build worker strips a
source for `kilnctl source add --strip` and preloads libstdc++ before importing torch
(ops/workers/kiln_worker/weight_free.py is this file: a link in the source tree, a copy
where it is installed). Imports torch only inside strip_weights.
"""
import ctypes.util
import os
import shutil
import subprocess


def strip_weights(ep):
    """A weight-free copy of an exported program: parameters and persistent buffers become
    meta tensors of the same shapes, dtypes and strides; lifted constants and
    non-persistent buffers (ep.constants) keep their values; the example inputs are
    dropped. The user's weights and activations never leave the process, and the source
    is MBs, not the block's GBs."""
    import copy

    import torch

    out = copy.copy(ep)
    stripped = {}
    for name, t in ep.state_dict.items():
        m = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
        stripped[name] = torch.nn.Parameter(m, requires_grad=t.requires_grad) if isinstance(t, torch.nn.Parameter) else m
    out._state_dict = stripped
    # The example inputs are the user's activations (a prompt's embeddings), which must not
    # leave the process either; without them, two exports of one program are also the
    # same bytes (the model hash never covered them). A builder gives the program zeros of
    # its recorded input shapes (the worker's signature.materialize_example_inputs).
    if getattr(out, "_example_inputs", None) is not None:
        out._example_inputs = None
    return out


def find_libstdcxx():
    """Path of the libstdc++ AOTI wrappers are built against: $KILN_LIBSTDCXX, else the C++
    compiler's (`g++ -print-file-name`), else the system's by soname. None if none found."""
    override = os.environ.get("KILN_LIBSTDCXX")
    if override:
        return override
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if cxx:
        try:
            out = subprocess.run([cxx, "-print-file-name=libstdc++.so.6"], capture_output=True,
                                 text=True, timeout=30).stdout.strip()
            if os.path.isabs(out) and os.path.exists(out):
                return os.path.realpath(out)
        except (OSError, subprocess.SubprocessError):
            pass
    return ctypes.util.find_library("stdc++")
