#!/usr/bin/env bash
# The kiln Python package on the real diffusers FLUX transformer, in one device call:
# builds kilnd and libkiln.so here, starts kilnd with the real workers on an empty store,
# and runs tests/gpu/python_flux.py (every row of issue 11's table; see that file). kilnd
# probes its worker's toolchain before it listens (~75 s on a fresh machine); the rows that
# do not use it run meanwhile, so this script does not wait for it.
# KILN_GPU_STORE_IN=tar: start from that store instead of an empty one (what
# KILN_GPU_STORE_OUT=tar wrote at the end of an earlier call: kilnd stopped, the store
# tarred), so hit measurements need not rebuild the packages.
#
#   tests/gpu/python_run.sh OUT_DIR
#
# Needs torch 2.11 with CUDA in python3, a C++ toolchain, and diffusers' source at
# .carry/diffusers/src (a snapshot of github.com/huggingface/diffusers; never committed).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${1:?usage: python_run.sh OUT_DIR}
WORK=${KILN_GPU_WORK:-/tmp/kiln-py-gpu}
BUILD=$ROOT/build-gpu
mkdir -p "$OUT"
rm -rf "$WORK" && mkdir -p "$WORK"
log() { echo "[python_run.sh $(date -u +%H:%M:%S)] $*" >&2; }

. "$ROOT/tests/gpu/carry_cmake_args.sh"  # headers this machine lacks (tests/gpu/README.md)
log "building kilnd and libkiln.so"
t=$(date +%s)
kiln_build_on_device "$ROOT" "$BUILD" "$OUT/build.log" kilnd kiln_shared
built_s=$(( $(date +%s) - t ))
log "built in $built_s s"
# The rows must end inside the device call's 600 s: later hit variants are left out (and said so).
export KILN_FLUX_DEADLINE_S=${KILN_FLUX_DEADLINE_S:-$(( 530 - built_s ))}

cat > "$WORK/kilnd.toml" <<TOML
[builds]
worker = ["python3", "$ROOT/ops/workers/kiln_worker"]
build_timeout_s = 1200
builds_per_gpu = ${KILN_BUILDS_PER_GPU:-4}
TOML
export KILN_SOCKET=$WORK/kiln.sock
if [ -n "${KILN_GPU_STORE_IN:-}" ]; then
  tar -xf "$KILN_GPU_STORE_IN" -C "$WORK"
  log "store restored from $KILN_GPU_STORE_IN: $(du -sh "$WORK/store" | cut -f1)"
fi
"$BUILD/daemon/kilnd" --socket "$KILN_SOCKET" --store "$WORK/store" --config "$WORK/kilnd.toml" > "$OUT/kilnd.log" 2>&1 &
KILND_PID=$!
trap 'kill $KILND_PID 2>/dev/null || true; cp -r "$WORK"/*.json "$OUT"/ 2>/dev/null || true' EXIT
log "kilnd starting (pid $KILND_PID)"

export KILN_LIBRARY=$BUILD/client/libkiln.so
unset KILN_WORKER  # kilnd hashes the sources: nothing of the worker in the user's process
export PYTHONPATH=$ROOT/client/python:$ROOT/.carry/diffusers/src${PYTHONPATH:+:$PYTHONPATH}
rc=0
python3 "$ROOT/tests/gpu/python_flux.py" "$OUT" 2>&1 | tee "$OUT/python_flux.out" || rc=$?
kill -0 "$KILND_PID" 2>/dev/null || { log "kilnd exited early:"; tail -20 "$OUT/kilnd.log"; }
if [ -n "${KILN_GPU_STORE_OUT:-}" ]; then
  kill "$KILND_PID" && wait "$KILND_PID" || true
  tar -cf "$KILN_GPU_STORE_OUT" -C "$WORK" store
  log "store saved to $KILN_GPU_STORE_OUT: $(du -sh "$KILN_GPU_STORE_OUT" | cut -f1)"
fi
exit $rc
