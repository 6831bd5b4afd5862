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

import io  # noqa: E402
import json  # noqa: E402

import bytecode  # noqa: E402
import protocol  # noqa: E402

# Before torch is imported (protocol.serve does first): its bytecode from the node's cache
# where its installation has none.
if bytecode.use_node_cache():
    from report import log
    log(f"torch has no bytecode beside its sources; Python's goes to {bytecode.ENV}")

# `kiln_worker hash FILE`: the hash op from the command line, for registering a source by
# hand (kilnctl's PUT_SOURCE needs the model hash): prints the result line.
request_in = sys.stdin
if len(sys.argv) == 3 and sys.argv[1] == "hash":
    request_in = io.StringIO(json.dumps({"protocol": protocol.PROTOCOL_VERSION, "op": "hash", "source": sys.argv[2]}))
# `kiln_worker strip IN OUT`: a weight-free copy of a source (schema/sources.md).
if len(sys.argv) == 4 and sys.argv[1] == "strip":
    request_in = io.StringIO(json.dumps({"protocol": protocol.PROTOCOL_VERSION, "op": "strip", "source": sys.argv[2],
                                         "output": sys.argv[3]}))
sys.exit(protocol.serve(request_in, result_out))
