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
kiln.torch's prefetch starts it at compile_repeated_blocks(); a thread that needs it
meanwhile waits for that computation instead of running a second one beside it.
"""
import functools
import platform
import sys
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

        triton = triton_hash_with_backend()
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


def numerics():
    """compile_options["numerics"]: the flags a compiled graph's numbers depend on, read now
    (a process may change them between calls; each call's key uses the current ones)."""
    import torch

    cuda_matmul = torch.backends.cuda.matmul

    def flag(name):  # an older torch raises (not AttributeError) for a flag it lacks: its default
        try:
            return bool(getattr(cuda_matmul, name))
        except Exception:
            return True

    return {
        "deterministic": bool(torch.are_deterministic_algorithms_enabled()),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "bf16_reduced_precision_reduction": flag("allow_bf16_reduced_precision_reduction"),
        "fp16_reduced_precision_reduction": flag("allow_fp16_reduced_precision_reduction"),
    }
