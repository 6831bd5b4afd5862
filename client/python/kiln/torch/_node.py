"""The node fields and numerics flags of THIS process (notes: KEY-CALL item 2 and 3).

Node fields describe the process that will load the artifact, not the daemon: a package
built for another torch or GPU must never reach this process. Values:
  gpu_arch  "sm_<major><minor>" of the block's device; "cpu" for a CPU block
  gpu_name  torch.cuda.get_device_name(device); "cpu" for a CPU block
  torch_version torch.__version__, torch_git torch.version.git_version
  cuda_version  torch.version.cuda ("none" for a build without CUDA)
  triton_version torch.utils._triton.triton_hash_with_backend() when torch has it (Triton's
                content hash, as torch keys it), else triton.__version__, else "none"
  platform sys.platform, machine platform.machine()
  cpu_isa   left empty: kilnd, on this same host, fills it with the exact ISA rule of
            schema/key.md (the host fields of the daemon and of its local clients agree).
Computed once per device per process; none of it runs a compiler. Triton's content hash
reads Triton's files (its libtriton.so is hundreds of MB: ~0.45 s on the H100 machine), so
it is kept between processes in a file (_triton_hash_cached), under a fingerprint of
everything it was computed from; kiln.torch's prefetch starts it at
compile_repeated_blocks(), and a thread that needs it meanwhile waits for that
computation instead of running a second one beside it.
"""
import functools
import hashlib
import importlib.util
import json
import os
import platform
import sys
import tempfile
import threading

_toolchain_lock = threading.Lock()


def _toolchain():
    with _toolchain_lock:  # one computation; later callers get the cached answer
        return _toolchain_once()


@functools.lru_cache(maxsize=None)
def _toolchain_once():
    import torch

    triton = "none"
    try:
        from torch.utils._triton import triton_hash_with_backend  # torch >= 2.5

        triton = _triton_hash_cached(triton_hash_with_backend)
    except Exception:
        try:
            import triton as _triton

            triton = _triton.__version__
        except Exception:
            pass
    return {
        "torch_version": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", None) or "unknown",
        "cuda_version": torch.version.cuda or "none",
        "triton_version": str(triton),
        "platform": sys.platform,
        "machine": platform.machine(),
    }


def _cache_dir():
    """Where kiln keeps per-user files between processes: $KILN_CACHE_DIR, else
    $XDG_CACHE_HOME/kiln, else ~/.cache/kiln."""
    d = os.environ.get("KILN_CACHE_DIR")
    if d:
        return d
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kiln")


# A file changed this recently may change again within the file system's timestamp
# granularity (a few ms) without its times moving: its fingerprint is not trusted yet
# (git's "racy" entries).
_SETTLE_NS = 2_000_000_000


def _tree_fingerprint(root, settled_before_ns=None):
    """Every file under `root` (links not followed) with its inode, size, mtime and ctime:
    a file's content cannot change without changing one of them (ctime cannot be set back
    by a user), so an unchanged fingerprint means unchanged files, as git's index assumes.
    None when a file's mtime or ctime is at or after `settled_before_ns` (default: two
    seconds ago): such a fingerprint could go stale, so nothing is cached under it."""
    import time

    if settled_before_ns is None:
        settled_before_ns = time.time_ns() - _SETTLE_NS
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if st.st_mtime_ns >= settled_before_ns or st.st_ctime_ns >= settled_before_ns:
                return None
            h.update(f"{os.path.relpath(path, root)}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\n"
                     .encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def _triton_fingerprint():
    """What torch's triton_hash_with_backend() depends on, without importing Triton: torch's
    own version, Triton's files (its Python, libtriton and the bundled ptxas), TRITON_*
    settings and the files they name, and the current GPU's compute capability (the
    backend's target). None when Triton is not installed or its files are not settled."""
    import torch

    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.submodule_search_locations:
        return None
    roots = sorted(os.path.realpath(p) for p in spec.submodule_search_locations)
    trees = {r: _tree_fingerprint(r) for r in roots}
    if None in trees.values():
        return None  # Triton's files changed moments ago: compute, cache nothing
    doc = {
        "torch": [torch.__version__, getattr(torch.version, "git_version", None), torch.__file__],
        "python": [sys.executable, sys.version],
        "triton": trees,
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("TRITON_")},
        "files": {},
        "capability": None,
    }
    for k, v in doc["env"].items():
        if v and os.path.isfile(v):
            st = os.stat(v)
            doc["files"][v] = [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    if torch.cuda.is_available():
        doc["capability"] = list(torch.cuda.get_device_capability(torch.cuda.current_device()))
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _triton_hash_cached(compute, fingerprint=None, cache_dir=None):
    """compute() (torch's triton_hash_with_backend), or the answer it gave in an earlier
    process whose fingerprint (_triton_fingerprint) was the same. A cache file that is
    missing, unreadable or for another fingerprint is recomputed and rewritten (atomically:
    a reader sees a whole file or none); a cache folder that cannot be written costs only
    the computation."""
    fp = fingerprint if fingerprint is not None else _triton_fingerprint()
    if fp is None:
        return compute()
    path = os.path.join(cache_dir or _cache_dir(), "triton-hash", fp + ".json")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if doc.get("fingerprint") == fp and isinstance(doc.get("hash"), str) and doc["hash"]:
            return doc["hash"]
    except (OSError, ValueError):
        pass
    value = str(compute())
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"fingerprint": fp, "hash": value}, f)
        os.replace(tmp, path)
    except OSError:
        pass
    return value


@functools.lru_cache(maxsize=None)
def _gpu(device_type, index):
    import torch

    if device_type != "cuda":
        return {"gpu_arch": device_type, "gpu_name": device_type}
    major, minor = torch.cuda.get_device_capability(index)
    return {"gpu_arch": f"sm_{major}{minor}", "gpu_name": torch.cuda.get_device_name(index)}


def node_fields(device):
    """The key's node fields for a block running on `device` (a torch.device)."""
    index = device.index if device.index is not None else 0
    fields = dict(_gpu(device.type, index))
    fields.update(_toolchain())
    return fields


# torch's own defaults of the fp32_precision properties (cuDNN's convolutions and RNNs
# allow TF32 by default); a value at its default is not keyed.
_FP32_PRECISION_DEFAULT = {"matmul": "ieee", "cudnn_conv": "tf32", "cudnn_rnn": "tf32", "mkldnn_matmul": "ieee"}


def numerics():
    """compile_options["numerics"]: the flags a compiled graph's numbers depend on, read now
    (a process may change them between calls; each call's key uses the current ones).
    Never raises: a flag this torch lacks, or refuses to read, is left out (torch >= 2.9
    raises on the legacy float32_matmul_precision getter once the new fp32_precision API
    was used; then the new API's values say it)."""
    import torch

    out = {}

    def put(name, read, cast=bool):
        try:
            out[name] = cast(read())
        except Exception:
            pass

    cuda = torch.backends.cuda
    put("deterministic", torch.are_deterministic_algorithms_enabled)
    put("float32_matmul_precision", torch.get_float32_matmul_precision, str)
    put("cudnn_allow_tf32", lambda: torch.backends.cudnn.allow_tf32)
    put("bf16_reduced_precision_reduction", lambda: cuda.matmul.allow_bf16_reduced_precision_reduction)
    put("fp16_reduced_precision_reduction", lambda: cuda.matmul.allow_fp16_reduced_precision_reduction)
    # Flags torch's defaults leave alone, keyed only when a process changed them (so every
    # key made before they were read stays the same).
    extra = {}
    for name, read, default in (
            ("fp16_accumulation", lambda: cuda.matmul.allow_fp16_accumulation, False),
            ("cudnn_deterministic", lambda: torch.backends.cudnn.deterministic, False),
            ("sdp_flash", cuda.flash_sdp_enabled, True),
            ("sdp_mem_efficient", cuda.mem_efficient_sdp_enabled, True),
            ("sdp_math", cuda.math_sdp_enabled, True),
            ("sdp_cudnn", getattr(cuda, "cudnn_sdp_enabled", lambda: True), True)):
        try:
            value = bool(read())
        except Exception:
            continue
        if value != default:
            extra[name] = value
    precision = {}
    for name, read in (("matmul", lambda: cuda.matmul.fp32_precision),
                       ("cudnn_conv", lambda: torch.backends.cudnn.conv.fp32_precision),
                       ("cudnn_rnn", lambda: torch.backends.cudnn.rnn.fp32_precision),
                       ("mkldnn_matmul", lambda: torch.backends.mkldnn.matmul.fp32_precision)):
        try:
            value = str(read())
        except Exception:
            continue
        if value not in ("none", _FP32_PRECISION_DEFAULT.get(name, "ieee")):
            precision[name] = value
    # The legacy flags, where readable, already say what the new API's matmul and cuDNN
    # values are (torch keeps the two in step): those are keyed once, under the old names.
    if "float32_matmul_precision" in out:
        precision.pop("matmul", None)
        precision.pop("mkldnn_matmul", None)
    if "cudnn_allow_tf32" in out:
        precision.pop("cudnn_conv", None)
        precision.pop("cudnn_rnn", None)
    if precision:
        extra["fp32_precision"] = precision
    out.update(extra)
    return out