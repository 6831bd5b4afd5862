"""The `toolchain` op: what this node's torch builds with, for the key's node fields."""
import platform
import sys


def cpu_isa():
    # The ISA torch records in AOTI packages (AOTI_CPU_ISA, upper case) and picks for CPU
    # kernels; the key writes it lower case (schema/key.md).
    try:
        from torch._inductor.cpu_vec_isa import pick_vec_isa

        import isa_probe

        isa_probe.faster_isa_probes()
        isa = str(pick_vec_isa()).lower()
        return isa or "none"
    except Exception:  # noqa: BLE001 - old torch or no vectorization support
        return "none"


def triton_version():
    """Triton's content hash as torch keys its own caches (a patched Triton that still
    says "3.6.0" is another Triton), else its version, else "none"."""
    try:
        from torch.utils._triton import triton_hash_with_backend
        return str(triton_hash_with_backend())
    except Exception:  # noqa: BLE001 - older torch, or Triton without a backend here
        pass
    try:
        import triton
        return triton.__version__
    except ImportError:
        return "none"


def describe(with_cpu_isa=True):
    """The node fields this worker builds for; WorkerError for a torch outside kiln's
    supported range (torch_range.py, kiln.torch's own), so that kilnd says "can build no"
    with the reason instead of failing every build."""
    import torch
    from torch_range import problem

    why = problem(torch.__version__, hasattr(torch, "export"),
                  hasattr(getattr(torch._C, "_aoti", None), "AOTIModelPackageLoader"))
    if why:
        from report import WorkerError

        raise WorkerError(f"the worker's {why}")
    gpus = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            gpus.append({"index": i, "name": p.name, "arch": f"sm_{p.major}{p.minor}",
                         "memory_bytes": int(p.total_memory)})
    return {
        "toolchain": {
            "torch_version": torch.__version__,
            "torch_git": torch.version.git_version,
            "cuda_version": torch.version.cuda or "none",
            "triton_version": triton_version(),
            "platform": sys.platform,
            "machine": platform.machine(),
            "cpu_isa": cpu_isa() if with_cpu_isa else None,
        },
        "gpus": gpus,
    }
