#!/usr/bin/env bash
# tests/gpu/use_torch_cache_check.py in one device call: builds kilnd, kilnctl and
# libkiln.so, starts kilnd with [torch_cache] on a fresh store.  Usage: $0 OUT_DIR
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${1:?usage: use_torch_cache_run.sh OUT_DIR}
WORK=/tmp/kiln-utc-gpu BUILD=$ROOT/build-gpu
mkdir -p "$OUT"; rm -rf "$WORK" && mkdir -p "$WORK"
. "$ROOT/tests/gpu/carry_cmake_args.sh"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=OFF "${CARRY_CMAKE_ARGS[@]}" > "$OUT/build.log" 2>&1
cmake --build "$BUILD" -j"$(nproc)" --target kilnd kilnctl kiln_shared >> "$OUT/build.log" 2>&1 || { grep -A6 error "$OUT/build.log" | head -40; exit 1; }
printf '[builds]\nenabled = false\n[torch_cache]\nsocket = "%s"\n' "$WORK/tc.sock" > "$WORK/kilnd.toml"
"$BUILD/daemon/kilnd" --socket "$WORK/kiln.sock" --store "$WORK/store" --config "$WORK/kilnd.toml" > "$OUT/kilnd.log" 2>&1 &
trap "kill $! 2>/dev/null || true" EXIT
for _ in $(seq 300); do [ -S "$WORK/tc.sock" ] && break; sleep 0.1; done
KILN_SOCKET=$WORK/kiln.sock KILN_LIBRARY=$BUILD/client/libkiln.so PYTHONPATH=$ROOT/client/python:$ROOT/.carry/pylib \
  python3 "$ROOT/tests/gpu/use_torch_cache_check.py" "$WORK"
KILN_SOCKET=$WORK/kiln.sock "$BUILD/ops/kilnctl/kilnctl" status | grep "torch cache"
