#!/usr/bin/env bash
# tests/gpu/use_torch_cache_check.py in one device call: builds kilnd, kilnctl and
# libkiln.so, starts kilnd with [torch_cache] on a fresh store.  Usage: $0 OUT_DIR
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${1:?usage: use_torch_cache_run.sh OUT_DIR}
WORK=/tmp/kiln-utc-gpu BUILD=$ROOT/build-gpu
mkdir -p "$OUT"; rm -rf "$WORK" && mkdir -p "$WORK"
. "$ROOT/tests/gpu/carry_cmake_args.sh"
kiln_build_on_device "$ROOT" "$BUILD" "$OUT/build.log" kilnd kilnctl kiln_shared
printf '[builds]\nenabled = false\n[torch_cache]\nsocket = "%s"\n' "$WORK/tc.sock" > "$WORK/kilnd.toml"
"$BUILD/daemon/kilnd" --socket "$WORK/kiln.sock" --store "$WORK/store" --config "$WORK/kilnd.toml" > "$OUT/kilnd.log" 2>&1 &
trap "kill $! 2>/dev/null || true" EXIT
for _ in $(seq 300); do [ -S "$WORK/tc.sock" ] && break; sleep 0.1; done
KILN_SOCKET=$WORK/kiln.sock KILN_LIBRARY=$BUILD/client/libkiln.so PYTHONPATH=$ROOT/client/python:$ROOT/.carry/pylib \
  python3 "$ROOT/tests/gpu/use_torch_cache_check.py" "$WORK"
KILN_SOCKET=$WORK/kiln.sock "$BUILD/ops/kilnctl/kilnctl" status | grep "torch cache"
