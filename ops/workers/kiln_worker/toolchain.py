"""The `toolchain` op: what this node's torch builds with, for the key's node fields."""
import platform


def cpu_isa():
    # The ISA torch records in AOTI packages (AOTI_CPU_ISA) and picks for CPU kernels.
    try:
        from torch._inductor.cpu_vec_isa import pick_vec_isa
        isa = str(pick_vec_isa())
        return isa or "none"
    except Exception:  # noqa: BLE001 - old torch or no vectorization support
        return "none"


def describe(with_cpu_isa=True):
    import torch
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = "none"
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
            "triton_version": triton_version,
            "platform": platform.system().lower(),
            "machine": platform.machine(),
            "cpu_isa": cpu_isa() if with_cpu_isa else None,
        },
        "gpus": gpus,
    }
