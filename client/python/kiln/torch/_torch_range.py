"""The torch versions kiln.torch and kiln's build worker support: ONE range, this file.

kiln.torch refuses another torch at compile_repeated_blocks (check_torch); the build
worker's toolchain probe refuses it too (ops/workers/kiln_worker/torch_range.py is this
file: a link in the source tree, a copy where it is installed), so a node whose worker has
such a torch says "can build no" with this message. client/python/pyproject.toml's `torch`
extra and the README state the same minimum. Pure Python, no torch import.
"""

# torch.export with its pytree call specs and AOTInductor's package loader.
MIN_TORCH = (2, 6)


def problem(version, has_export=True, has_loader=True):
    """Why a torch of `version` (torch.__version__) is outside the range, or None."""
    try:
        have = tuple(int(x) for x in version.split("+")[0].split(".")[:2])
    except ValueError:
        have = MIN_TORCH  # an unusual version string: judged by what it has
    missing = [name for name, ok in (("torch.export", has_export),
                                     ("torch._C._aoti.AOTIModelPackageLoader", has_loader)) if not ok]
    if have >= MIN_TORCH and not missing:
        return None
    return (f"torch {version} is older than kiln's supported range (torch >= {MIN_TORCH[0]}.{MIN_TORCH[1]}: "
            "torch.export and AOTInductor's package loader)" + (f"; it lacks {', '.join(missing)}" if missing else ""))
