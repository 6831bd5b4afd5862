"""Loading AOTInductor packages in this process: the libstdc++ preload and the loader.

A Python process that loads an AOTI package can crash in std::regex inside the generated
wrapper .so unless the C++ compiler's libstdc++ is in the process's global symbol scope
(DESIGN.md, facts; the workers re-exec with LD_PRELOAD). A library cannot re-exec its
user's process, so this module puts that libstdc++ into the global scope in-process, by
dlopen with RTLD_GLOBAL, once, before the first package is loaded.

Loading goes through torch._C._aoti.AOTIModelPackageLoader(path, "model",
RUN_SINGLE_THREADED, 1, device_index): torch._inductor.aoti_load_package spends ~25 s of a
fresh process in a device check that runs compilers; a hit must run none.

Why run_single_threaded: with it off, AOTI's container keeps one model instance per runner
and, before each run, waits (cudaEventSynchronize) for the previous run of that instance to
finish on the GPU. kiln runs one package for every block of a class in a row (19 or 38 in
FLUX), so every block call became a host-GPU sync and the CPU never ran ahead of the GPU.
Package serializes its calls with its own lock (attach, then run), which is what the
single-threaded entry point asks of its caller; attaching user-managed constants swaps
tensor handles only (no copy, nothing the GPU work already queued depends on).
"""
import ctypes
import ctypes.util
import os
import threading

from ._weight_free import find_libstdcxx

_lock = threading.Lock()
_preloaded = None  # the path made global, once

# AOTIModelPackageLoader's run_single_threaded (see the module docstring).
RUN_SINGLE_THREADED = True


def ensure_libstdcxx_global():
    """Makes libstdc++ global in this process (idempotent, thread-safe); returns its path,
    or None when none was found (then loading may crash, as it would without kiln)."""
    global _preloaded
    with _lock:
        if _preloaded is None:
            path = find_libstdcxx()
            if path:
                ctypes.CDLL(path, mode=os.RTLD_GLOBAL | os.RTLD_NOW)
            _preloaded = path or ""
        return _preloaded or None


class Package:
    """One AOTI package loaded once for one device; every instance attaches its own weights.

    call(constants, args, kwargs): attaches `constants` (name -> tensor, user-managed: no
    copy, ~0.01 ms) unless the very same tensors are attached already, then runs the package
    on the call's tensors in the order of the package's own input spec, and rebuilds the
    output structure from its output spec. The caller has checked the call against the
    package's signature (AOTI itself checks nothing).
    Thread safety: calls are serialized by a lock (the loaded model holds one set of
    constants at a time, and the single-threaded run needs it).
    """

    def __init__(self, path, device_index):
        import torch
        from torch.utils import _pytree as pytree

        ensure_libstdcxx_global()
        self.single_threaded = RUN_SINGLE_THREADED
        try:
            self._loader = torch._C._aoti.AOTIModelPackageLoader(path, "model", self.single_threaded, 1, device_index)
        except Exception:
            if not self.single_threaded:
                raise
            self.single_threaded = False  # a torch without the single-threaded entry point
            self._loader = torch._C._aoti.AOTIModelPackageLoader(path, "model", False, 1, device_index)
        if hasattr(self._loader, "get_metadata"):
            check_metadata(dict(self._loader.get_metadata()), device_index)
        self.constant_names = list(self._loader.get_constant_fqns())
        # A plain tensor attribute of the block is the package's `_tensor_constant<n>`; the
        # worker recorded which attribute each is (schema/worker-protocol.md, aoti).
        self.constant_sources = read_constant_names(path)
        in_spec, out_spec = self._loader.get_call_spec()
        self._in_spec = pytree.treespec_loads(in_spec)
        self._out_spec = pytree.treespec_loads(out_spec)
        self._attached = None
        self._lock = threading.Lock()
        self._run = self._loader.boxed_run if hasattr(self._loader, "boxed_run") else self._loader.run

    def call(self, constants, args, kwargs):
        import torch
        from torch.export._tree_utils import reorder_kwargs
        from torch.utils import _pytree as pytree

        sources = self.constant_sources
        try:
            mine = {n: constants[sources.get(n, n)] for n in self.constant_names}
        except KeyError:
            missing = [n for n in self.constant_names if sources.get(n, n) not in constants]
            raise KeyError(f"the package wants constants the block does not have: {missing[:5]}") from None
        flat = flatten_as_exported(self._in_spec, (args, reorder_kwargs(kwargs, self._in_spec)))
        flat = [x for x in flat if isinstance(x, torch.Tensor)]
        token = tuple((n, t.data_ptr()) for n, t in mine.items())
        with self._lock:
            if token != self._attached:
                self._loader.load_constants(mine, False, False, True)
                self._attached = token
            out = self._run(flat)
        return pytree.tree_unflatten(out, self._out_spec)


def flatten_as_exported(in_spec, tree):
    """The leaves of a call, in the order the package takes them. A dict inside the call is
    read in the export's key order, not the caller's insertion order (the guard compares
    keys sorted, so a caller may build the same dict in another order; flattening it in
    its own order would hand the package its tensors swapped). Through the spec's
    flatten_up_to where torch has it; a call whose structure it refuses, and an older
    torch, are flattened in the call's own order, as before."""
    from torch.utils import _pytree as pytree

    if hasattr(in_spec, "flatten_up_to"):
        try:
            return in_spec.flatten_up_to(tree)
        except ValueError:
            pass
    return pytree.tree_flatten(tree)[0]


class PackageMismatch(RuntimeError):
    """The package records another GPU or host than this process's (torch itself would only
    log a warning and run it)."""


def check_metadata(metadata, device_index):
    """Refuses a package whose recorded compute capability, platform or machine (torch's
    AOTI_* metadata, written by codecache.get_device_information) differs from this
    process's, naming the field. Fields the package does not record are not checked."""
    import platform
    import sys

    import torch

    want = {"AOTI_PLATFORM": sys.platform, "AOTI_MACHINE": platform.machine()}
    if device_index is not None and device_index >= 0:
        major, minor = torch.cuda.get_device_capability(device_index)
        want["AOTI_COMPUTE_CAPABILITY"] = f"{major}{minor}"
    for name, value in want.items():
        got = metadata.get(name)
        if got and str(got) != value:
            raise PackageMismatch(f"the package was built for {name}={got}, this process has {value}")


def load_package(path, device_index):
    """The default loader: a Package for the file at `path` on cuda:`device_index` (-1: CPU)."""
    return Package(path, device_index)


CONSTANT_NAMES = "kiln/constant_names.json"


def read_constant_names(path):
    """{package constant name: the block's attribute path} the build worker recorded in the
    package (`<root>/kiln/constant_names.json`), {} when none; unreadable: {} (the call then
    names what is missing)."""
    import json
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            for name in z.namelist():
                if name.endswith("/" + CONSTANT_NAMES):
                    doc = json.loads(z.read(name))
                    return {str(k): str(v) for k, v in doc.items()} if isinstance(doc, dict) else {}
    except (OSError, zipfile.BadZipFile, ValueError):
        pass
    return {}
