"""Request parsing and dispatch for the kiln worker (schema/worker-protocol.md): the top of
the worker, which nothing imports but __main__. It imports the ops lazily (toolchain,
sources, aoti, megacache); imports point one way, down: ops -> signature ->
model_hash -> spelling, and every module -> report."""
import json
import sys
import time
import traceback

from report import WorkerError, log

PROTOCOL_VERSION = 1



def _dispatch(request):
    op = request.get("op")
    if op == "toolchain":
        import toolchain
        # The CPU ISA probe runs compilers (~25 s); kilnd detects it itself and says "host": false.
        return toolchain.probe(with_cpu_isa=bool(request.get("host", True)))
    if op == "hash":
        import sources
        return sources.describe_source(_required(request, "source"))
    if op == "strip":
        import sources
        return sources.strip_source(_required(request, "source"), _required(request, "output"))
    if op == "build":
        key = _required(request, "key")
        kind = key.get("kind")
        if kind == "aoti":
            import aoti
            return aoti.build(request)
        if kind == "megacache":
            import megacache
            return megacache.build(request)
        raise WorkerError(f"key.kind {kind!r} is not a kind this worker builds (aoti, megacache)")
    raise WorkerError(f"unknown op {op!r} (expected toolchain, hash, strip or build)")


def _required(request, name):
    if name not in request:
        raise WorkerError(f"request lacks field {name!r}")
    return request[name]


def _warm_up():
    """Imports torch before the request is read: kilnd writes the request only when the
    build's source is ready, and copies it while this import runs."""
    try:
        import torch  # noqa: F401
    except Exception as e:  # noqa: BLE001 - reported by the op that needs torch
        log(f"cannot import torch: {type(e).__name__}: {e}")


def serve(stdin, result_out):
    started = time.monotonic()
    _warm_up()
    ready = time.monotonic() - started
    text = stdin.read()
    # Both times let a reader see whether the worker waited for kilnd (the source copy).
    log(f"ready for the request after {ready:.3f} s; request read after {time.monotonic() - started:.3f} s")
    try:
        request = json.loads(text)
        if not isinstance(request, dict):
            raise WorkerError("request is not a JSON object")
        if request.get("protocol") != PROTOCOL_VERSION:
            raise WorkerError(f"protocol {request.get('protocol')!r} not spoken (this worker: {PROTOCOL_VERSION})")
        result = _dispatch(request)
        result.update({"protocol": PROTOCOL_VERSION, "ok": True})
        code = 0
    except WorkerError as e:
        log("error:", e)
        result = {"protocol": PROTOCOL_VERSION, "ok": False, "error": str(e)}
        code = 1
    except Exception as e:  # noqa: BLE001 - every failure becomes a result line
        traceback.print_exc(file=sys.stderr)
        result = {"protocol": PROTOCOL_VERSION, "ok": False, "error": f"{type(e).__name__}: {e}"}
        code = 1
    result["worker_seconds"] = round(time.monotonic() - started, 3)
    result_out.write(json.dumps(result, sort_keys=True) + "\n")
    result_out.flush()
    return code
