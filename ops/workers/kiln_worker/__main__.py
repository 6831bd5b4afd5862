"""kiln build worker: one request on stdin, one result on stdout (schema/worker-protocol.md).

Run as `python3 ops/workers/kiln_worker`. The daemon starts one process per request in its
own process group; everything torch, Inductor and Triton print goes to stderr, which the
daemon keeps as the build log.
"""
import sys

import launcher

# Before anything imports torch: re-exec with libstdc++ preloaded, and move stdout aside
# so that only the result line ever reaches the daemon's result pipe.
launcher.ensure_libstdcxx_preloaded()
result_out = launcher.claim_stdout()

import protocol  # noqa: E402

sys.exit(protocol.serve(sys.stdin, result_out))
