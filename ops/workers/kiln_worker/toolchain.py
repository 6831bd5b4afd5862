"""The `toolchain` op: what this node's torch builds with, for the key's node fields, and
whether this worker (in kilnd's sandbox) can load the packages it would build."""
import os
import platform
import secrets
import shutil
import sys
import tempfile
import zipfile


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


def probe(with_cpu_isa=True):
    """The `toolchain` op: describe(), refused (WorkerError) where no AOTInductor package
    could be checked here, so that kilnd says "can build no" with the reason at its start
    instead of failing each build after its compile."""
    desc = describe(with_cpu_isa=with_cpu_isa)
    unpack = package_unpack_problem()
    if unpack:
        from report import WorkerError

        raise WorkerError(unpack_refusal(desc["toolchain"]["torch_version"], unpack))
    return desc


def unpack_refusal(torch_version, error):
    """Why a build cannot check its package here: the text kilnd shows as "can build no"
    and a failed build's error."""
    return (f"torch {torch_version}'s AOTInductor package loader cannot unpack a package in this worker, so no "
            "build could check its package: torch 2.11's loader unpacks into mkdtemp(\"/tmp/XXXXXX\") whatever "
            "TMPDIR says, and kilnd's worker sandbox lets the worker write its own folders only, with /tmp one of "
            "its own where kilnd can make a mount namespace (kilnd root with CAP_SYS_ADMIN; most containers "
            "refuse it). On this node: give kilnd CAP_SYS_ADMIN, set [builds] sandbox = false (SECURITY.md), or "
            f"use a torch whose loader honours TMPDIR (verbatim: {error})")


def package_unpack_problem():
    """None when torch's AOTInductor package loader can make its unpack folder in this
    process; else why not. Costs a few ms: the loader is given a one-file zip, which it
    unpacks (or fails to) and then refuses for having no model. Where the loader follows
    TMPDIR (torch >= 2.15) it is pointed at a folder of the probe's own, made where it would
    unpack, and whatever it leaves goes with that folder; where it writes /tmp whatever
    TMPDIR says (torch 2.11), its leftover is the folder holding the probe's token file.
    Nothing else in a shared /tmp is touched."""
    import torch

    loader = getattr(getattr(torch._C, "_aoti", None), "AOTIModelPackageLoader", None)
    if loader is None:  # torch_range.problem refuses such a torch first
        return None
    where = _torch_temp_dir()
    try:
        own = tempfile.TemporaryDirectory(prefix="kiln-unpack-probe-", dir=where)
    except OSError as ex:  # the loader could not make its folder there either
        return f"no temporary directory can be made in {where}: {ex}"
    token = f"kiln_unpack_probe_{secrets.token_hex(8)}.txt"
    before = set(_entries("/tmp"))
    saved = os.environ.get("TMPDIR")
    with own as d:
        path = os.path.join(d, "probe.pt2")
        with zipfile.ZipFile(path, "w") as z:
            # Both layouts torch has extracted from (with and without the archive's folder):
            # one is unpacked, so a leftover in /tmp can be told by this file.
            z.writestr(f"data/aotinductor/model/{token}", "kiln")
            z.writestr(f"probe/data/aotinductor/model/{token}", "kiln")
        os.environ["TMPDIR"] = d
        try:
            loader(path, "model", False, 1, -1)
        except RuntimeError as ex:  # expected: the zip holds no model
            if "temporary directory" in str(ex):
                return str(ex)
        finally:
            if saved is None:
                del os.environ["TMPDIR"]
            else:
                os.environ["TMPDIR"] = saved
            for name in set(_entries("/tmp")) - before:
                _remove_if_ours(os.path.join("/tmp", name), token)
    return None


def _torch_temp_dir():
    """Where c10's temporary folders go: the first of these variables that is set, used as
    it is (c10/util/tempfile.cpp), else /tmp. Python's tempfile instead skips unusable ones."""
    for var in ("TMPDIR", "TMP", "TEMP", "TEMPDIR"):
        if os.environ.get(var) is not None:
            return os.environ[var]
    return "/tmp"


def _entries(folder):
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _remove_if_ours(folder, token):
    """Removes a folder the loader left in /tmp: one holding the probe's token file and
    nothing else."""
    if not os.path.isdir(folder) or os.path.islink(folder):
        return
    files = [f for _, _, fs in os.walk(folder) for f in fs]
    if files and all(f == token for f in files):
        shutil.rmtree(folder, ignore_errors=True)
