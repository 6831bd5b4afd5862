#!/usr/bin/env bash
# A consumer whose torch or GPU differs from a package's is refused, with the field named
# (issue "Sound keys", its GPU proof), in one device call:
#
#   tests/gpu/refusal_check.sh [OUT_DIR]
#
# 1. builds kilnd and kiln_gpu_bench with run.sh's own configure (KILN_GPU_BUILD_ONLY=1:
#    its .carry/ handling included), then libkiln.so for the Python client
# 2. starts kilnd with the real worker on an empty store
# 3. refusal_check.py: a tiny block exported and registered as kiln.torch does, its AOTI key
#    built by kilnd; `kiln_gpu_bench load` with the true key (loads, matches eager) and with
#    the same package PUT under keys edited to another gpu_name, torch_version and gpu_arch
#    (each must be refused, naming the field)
# Leaves refusal.json, build.log and kilnd.log in OUT_DIR; exits non-zero if any
# expectation failed.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${1:-${OUT:-$ROOT/build-gpu/out-refusal}}
WORK=${KILN_GPU_WORK:-/tmp/kiln-gpu-refusal}
BUILD=$ROOT/build-gpu
mkdir -p "$OUT"
log() { echo "[refusal_check.sh $(date -u +%H:%M:%S)] $*" >&2; }

# ---- 1. build --------------------------------------------------------------------------
t=$(date +%s)
KILN_GPU_WORK=$WORK KILN_GPU_BUILD_ONLY=1 bash "$ROOT/tests/gpu/run.sh" "$OUT"
. "$ROOT/tests/gpu/carry_cmake_args.sh"
kiln_build_targets "$BUILD" "$OUT/build.log" kiln_shared
log "kilnd, kiln_gpu_bench and libkiln.so built in $(( $(date +%s) - t )) s"
rm -rf "$WORK" && mkdir -p "$WORK"

# ---- 2. kilnd with the real worker, empty store ------------------------------------------
# kilnd takes cpu_isa from its worker's toolchain probe (torch's pick_vec_isa, what torch
# records in every package, e.g. "avx512 avx512_vnni amx_tile" on the H100 machine;
# schema/key.md), so no [node] table is needed. The first run found kilnd filling it with
# its own coarse probe ("avx512") and storing packages that load_block then refused.
kiln_start_kilnd "$BUILD/daemon/kilnd" "$WORK" "$OUT/kilnd.log" 600
log "kilnd up"

# ---- 3. the check ------------------------------------------------------------------------
export KILN_LIBRARY=$BUILD/client/libkiln.so
export KILN_WORKER=$ROOT/ops/workers/kiln_worker
export PYTHONPATH=$ROOT/client/python:$ROOT/.carry/pylib${PYTHONPATH:+:$PYTHONPATH}
rc=0
python3 "$ROOT/tests/gpu/refusal_check.py" --work "$WORK" --out "$OUT" --bench "$BUILD/tests/gpu/kiln_gpu_bench" || rc=$?
log "done (exit $rc)"
exit $rc
