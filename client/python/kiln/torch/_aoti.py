"""Loading AOTInductor packages in this process: the libstdc++ preload and the loader.

A Python process that loads an AOTI package can crash in std::regex inside the generated
wrapper .so unless the C++ compiler's libstdc++ is in the process's global symbol scope
(DESIGN.md, facts; the workers re-exec with LD_PRELOAD). A library cannot re-exec its
user's process, so this module puts that libstdc++ into the global scope in-process, by
dlopen with RTLD_GLOBAL, once, before the first package is loaded.

Before anything of a package is loaded, its key (the one kilnd stored it under) and its own
AOTI metadata are compared with this process, field by field (check_key, check_metadata:
schema/key.md, "Node fields"); a package for another torch, CUDA, Triton, GPU or host is
refused naming the field (PackageMismatch).

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

    def __init__(self, path, device_index, key=None):
        import torch
        from torch.utils import _pytree as pytree

        # Every check runs before the package's .so is loaded: loading it runs its code.
        if key is not None:
            check_key(key, device_index)
        check_metadata(read_metadata(path), device_index, key)
        ensure_libstdcxx_global()
        self.single_threaded = RUN_SINGLE_THREADED
        try:
            self._loader = torch._C._aoti.AOTIModelPackageLoader(path, "model", self.single_threaded, 1, device_index)
        except Exception:
            if not self.single_threaded:
                raise
            self.single_threaded = False  # a torch without the single-threaded entry point
            self._loader = torch._C._aoti.AOTIModelPackageLoader(path, "model", False, 1, device_index)
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
    """The package is not for this process: its key or its own metadata names another torch,
    CUDA, Triton, GPU or host than this process's (torch itself would only log a warning and
    run it). The message names the field."""


# The spellings schema/key.md normalizes ("Canonical forms"): a key from kilnd is canonical
# already; this process's own values are put in the same spelling before comparing.
_PLATFORM_ALIASES = {"Linux": "linux", "linux2": "linux", "Darwin": "darwin", "macos": "darwin", "Windows": "win32"}
_MACHINE_ALIASES = {"amd64": "x86_64", "AMD64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}


def _canonical(field, value):
    value = str(value or "")
    if field == "platform":
        return _PLATFORM_ALIASES.get(value, value)
    if field == "machine":
        return _MACHINE_ALIASES.get(value, value)
    if field == "cpu_isa":
        return value.lower()
    if field == "gpu_arch":
        digits = value.lower().removeprefix("sm_").removeprefix("sm").removeprefix("compute_").replace(".", "")
        return f"sm_{digits}" if digits.isdigit() else value
    return value


# The node fields a loader compares exactly with this process's (_node.node_fields: the same
# values that made this process's own keys). cpu_isa is compared by instruction set below.
EXACT_FIELDS = ("gpu_arch", "gpu_name", "torch_version", "torch_git", "cuda_version", "triton_version", "platform",
                "machine")


def this_process(device_index):
    """The node fields of this process for a package run on cuda:`device_index` (-1 or None:
    the CPU), as kiln.torch keys its own calls (_node.node_fields)."""
    import torch

    from . import _node

    cpu = device_index is None or device_index < 0
    return _node.node_fields(torch.device("cpu") if cpu else torch.device("cuda", device_index))


# What this CPU has of the vector ISA names torch writes (str(pick_vec_isa()), lower case):
# torch's own cpuinfo queries, which run no compiler (pick_vec_isa itself test-compiles).
def _cpu_has(name, machine):
    import torch

    cpu = torch.cpu
    x86 = {"avx2": lambda: cpu._is_avx2_supported(), "avx512": lambda: cpu._is_avx512_supported(),
           "avx512_vnni": lambda: cpu._is_avx512_supported() and cpu._is_vnni_supported(),
           "amx_tile": lambda: cpu._is_amx_tile_supported()}
    if name in ("none", "invalid_vec_isa", "default"):
        return True  # no vector ISA: baseline code
    if machine == "x86_64" and name in x86:
        try:
            return bool(x86[name]())
        except Exception:
            return False
    # Advanced SIMD (NEON) is part of every AArch64 CPU.
    return machine == "aarch64" and name in ("asimd", "neon")


def check_cpu_isa(isa, what, machine=None):
    """Refuses (PackageMismatch) an ISA string (`avx512 avx512_vnni`) naming an instruction set
    this CPU lacks, or one this check cannot tell (it fails closed). `what` names the field."""
    import platform

    machine = _canonical("machine", machine or platform.machine())
    for name in _canonical("cpu_isa", isa).split():
        if not _cpu_has(name, machine):
            raise PackageMismatch(f"{what} is {isa!r} but this CPU ({machine}) has no {name} (or kiln cannot tell)")


def check_key(key, device_index):
    """Refuses (PackageMismatch, naming the field) the key of an artifact that is not for this
    process: another kind than aoti; a node field other than this process's own value
    (EXACT_FIELDS: torch's version with its local part and its git revision, CUDA, Triton's
    hash, GPU arch and name, platform, machine), or empty; a cpu_isa naming an instruction
    set this CPU lacks. `key` is the artifact's key as kilnd stored it (Artifact.key)."""
    if not isinstance(key, dict):
        raise PackageMismatch(f"the artifact's key is not a key object: {key!r}")
    if key.get("kind") != "aoti":
        raise PackageMismatch(f"key.kind is {key.get('kind')!r}: kiln.torch loads AOTInductor packages (aoti)")
    have = this_process(device_index)
    for field in EXACT_FIELDS:
        want = key.get(field)
        if not want:
            raise PackageMismatch(f"key.{field} is empty: the artifact does not say which {field} it is for")
        if _canonical(field, want) != _canonical(field, have[field]):
            raise PackageMismatch(f"this package is not for this process: key.{field} is {want!r} "
                                  f"but this process has {have[field]!r}")
    if not key.get("cpu_isa"):
        raise PackageMismatch("key.cpu_isa is empty: the artifact does not say which CPU it is for")
    check_cpu_isa(key["cpu_isa"], "key.cpu_isa", have["machine"])


CONSTANT_NAMES = "kiln/constant_names.json"
CHECK = "kiln/check.json"


def read_constant_names(path):
    """{package constant name: the block's attribute path} the build worker recorded in the
    package (`<root>/kiln/constant_names.json`), {} when none; unreadable: {} (the call then
    names what is missing)."""
    doc = _read_kiln_member(path, CONSTANT_NAMES)
    return {str(k): str(v) for k, v in doc.items()} if isinstance(doc, dict) else {}


def read_check(path):
    """The build worker's check of the package at `path` (`<root>/kiln/check.json`:
    rel_err, tolerance, step_s, compile_options; schema/worker-protocol.md) as a dict, or
    None when it records none or it cannot be read."""
    doc = _read_kiln_member(path, CHECK)
    return doc if isinstance(doc, dict) else None


def _read_kiln_member(path, member):
    """The JSON of the package's `<root>/<member>` (one the build worker added), or None
    when the package has none or it cannot be read."""
    import json
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            for name in z.namelist():
                if name.endswith("/" + member):
                    return json.loads(z.read(name))
    except (OSError, zipfile.BadZipFile, ValueError):
        pass
    return None


def read_metadata(path):
    """What the package at `path` records about where it may run (torch's
    `<name>/data/aotinductor/<model>/*_metadata.json`: AOTI_PLATFORM, AOTI_MACHINE, AOTI_CPU_ISA,
    AOTI_COMPUTE_CAPABILITY), read from the zip without loading anything; {} when it records
    none. A file that is no zip archive raises PackageMismatch (torch could not load it)."""
    import json
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            for name in z.namelist():
                if "/data/aotinductor/" in name and name.endswith("_metadata.json"):
                    doc = json.loads(z.read(name))
                    if not isinstance(doc, dict):
                        raise PackageMismatch(f"the package's {name} is not a JSON object")
                    return {k: v for k, v in doc.items() if isinstance(v, str)}
    except (OSError, zipfile.BadZipFile, ValueError) as ex:
        raise PackageMismatch(f"the package cannot be read as an AOTInductor archive: {ex}") from None
    return {}


def check_metadata(metadata, device_index, key=None):
    """Refuses a package whose recorded compute capability, platform, machine or CPU ISA
    (torch's AOTI_* metadata, written by codecache.get_device_information) differs from this
    process's (the ISA: names an instruction set this CPU lacks), or, given its `key`, from
    the key's gpu_arch / platform / machine / cpu_isa; naming the field. Fields the package
    does not record are not checked."""
    import platform
    import sys

    import torch

    want = {"AOTI_PLATFORM": ("platform", sys.platform), "AOTI_MACHINE": ("machine", platform.machine())}
    cpu = device_index is None or device_index < 0
    if not cpu:
        major, minor = torch.cuda.get_device_capability(device_index)
        want["AOTI_COMPUTE_CAPABILITY"] = ("gpu_arch", f"sm_{major}{minor}")
    for name, (field, value) in want.items():
        got = metadata.get(name)
        if got and _canonical(field, got) != _canonical(field, value):
            raise PackageMismatch(f"the package was built for {name}={got}, this process has {value}")
    if cpu and metadata.get("AOTI_COMPUTE_CAPABILITY"):
        raise PackageMismatch(f"the package was built for a GPU (AOTI_COMPUTE_CAPABILITY="
                              f"{metadata['AOTI_COMPUTE_CAPABILITY']}), this block runs on the CPU")
    if metadata.get("AOTI_CPU_ISA"):
        check_cpu_isa(metadata["AOTI_CPU_ISA"], "the package's AOTI_CPU_ISA")
    if key is not None:
        for name, field in (("AOTI_PLATFORM", "platform"), ("AOTI_MACHINE", "machine"), ("AOTI_CPU_ISA", "cpu_isa"),
                            ("AOTI_COMPUTE_CAPABILITY", "gpu_arch")):
            got = metadata.get(name)
            if got and _canonical(field, got) != _canonical(field, key.get(field)):
                raise PackageMismatch(f"key.{field} is {key.get(field)!r} but the package was built for "
                                      f"{name}={got}")


def load_package(path, device_index, key=None):
    """The default loader: a Package for the file at `path` on cuda:`device_index` (-1: CPU).
    Before anything of the package is loaded, `key` (the artifact's key, Artifact.key) is
    checked against this process (check_key) and the package's own metadata against this
    process and the key (check_metadata); PackageMismatch names the field that differs.
    Without a key only the package's metadata is checked."""
    return Package(path, device_index, key)
