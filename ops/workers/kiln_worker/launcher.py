"""Process set-up the worker needs before torch is imported.

A Python process that loads an AOTInductor package segfaults in std::regex inside the
generated wrapper .so unless the toolchain's libstdc++ is preloaded (DESIGN.md, facts).
The worker therefore re-executes itself once with LD_PRELOAD naming it.
"""
import os
import sys

from weight_free import find_libstdcxx

_MARK = "KILN_WORKER_PRELOADED"


def ensure_libstdcxx_preloaded():
    if os.environ.get(_MARK) == "1":
        return
    lib = find_libstdcxx()
    env = dict(os.environ)
    env[_MARK] = "1"
    if lib:
        preload = env.get("LD_PRELOAD", "")
        if lib not in preload.split(":"):
            env["LD_PRELOAD"] = f"{lib}:{preload}" if preload else lib
    else:
        print("kiln worker: no libstdc++ found to preload; loading AOTI packages may crash",
              file=sys.stderr)
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def claim_stdout():
    """Returns a text stream on the original stdout and points fd 1 at stderr."""
    sys.stdout.flush()
    result_fd = os.dup(1)
    os.set_inheritable(result_fd, False)
    os.dup2(2, 1)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    return os.fdopen(result_fd, "w")
