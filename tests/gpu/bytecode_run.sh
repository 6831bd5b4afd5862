#!/usr/bin/env bash
# The worker's bytecode on the GPU machine, whose torch (uv-installed) has no .pyc files and
# runs with PYTHONDONTWRITEBYTECODE=1 (ops/workers/kiln_worker/bytecode.py):
#  1. the real worker's hash op on a small export, as kilnd runs it (its allowlisted
#     environment), three ways: torch compiled from source in every process (no folder,
#     nothing written: what a sandboxed worker did), then with KILN_WORKER_PYCACHE cold and
#     warm;
#  2. kilnd with its default config (sandbox on) started twice on one work folder: the
#     toolchain probe's time with the node's bytecode folder cold, then warm, and what kilnd
#     says of building on this container (torch 2.11's loader cannot unpack in the sandbox:
#     RESULTS-build-speed.md, 7).
#   tests/gpu/bytecode_run.sh OUT_DIR      (carry .carry/include and .carry/cmake; ~4 min)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${1:?usage: bytecode_run.sh OUT_DIR}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/bytecode_run.log") 2>&1
W=$(mktemp -d /tmp/kiln-bytecode-XXXXXX)
PY=$(command -v python3)
echo "python3 $PY; PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-unset}; $(nvidia-smi --query-gpu=name --format=csv,noheader)"
"$PY" - "$W/linear.pt2" <<'PYEOF'
import sys, torch
ep = torch.export.export(torch.nn.Linear(64, 64), (torch.randn(8, 64),))
torch.export.save(ep, sys.argv[1])
print("torch", torch.__version__, "pyc beside torch/__init__:",
      __import__("os").path.exists(__import__("importlib").util.cache_from_source(torch.__file__)))
PYEOF

# kilnd's allowlist (worker_process.hpp): PATH, LANG, HOME, TMPDIR, then kilnd's own settings
hash_op() {  # LABEL [VAR=VALUE ...]
  local label=$1 t0 t1
  shift
  t0=$(date +%s%N)
  env -i PATH="$PATH" LANG=C.UTF-8 HOME="$HOME" TMPDIR=/tmp "$@" "$PY" "$ROOT/ops/workers/kiln_worker" hash \
    "$W/linear.pt2" > "$W/hash.out" 2> "$W/hash.err"
  local rc=$?
  t1=$(date +%s%N)
  printf 'hash op, %-44s %6d ms  rc %d  %s\n' "$label" "$(( (t1 - t0) / 1000000 ))" "$rc" \
    "$(grep -o '"model_hash": *"[0-9a-f]\{12\}' "$W/hash.out")"
  grep "bytecode" "$W/hash.err" | head -2
}
hash_op "warm-up (page cache), no folder" PYTHONDONTWRITEBYTECODE=1
for i in 1 2; do hash_op "no folder, nothing written (before) $i" PYTHONDONTWRITEBYTECODE=1; done
hash_op "KILN_WORKER_PYCACHE, cold" KILN_WORKER_PYCACHE="$W/pycache"
for i in 1 2; do hash_op "KILN_WORKER_PYCACHE, warm $i" KILN_WORKER_PYCACHE="$W/pycache"; done
echo "bytecode folder: $(du -sh "$W/pycache" | cut -f1), $(find "$W/pycache" -name '*.pyc' | wc -l) files"

. "$ROOT/tests/gpu/carry_cmake_args.sh"
t=$(date +%s)
kiln_build_on_device "$ROOT" "$ROOT/build-gpu" "$OUT/build.log" kilnd
echo "kilnd built in $(( $(date +%s) - t )) s"
kiln_gpu_kilnd_toml "$W/kilnd.toml" "$ROOT"   # the default: sandbox on
for run in cold warm; do
  "$ROOT/build-gpu/daemon/kilnd" --socket "$W/kiln.sock" --store "$W/store" --config "$W/kilnd.toml" \
    > "$W/kilnd-$run.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 240); do
    grep -q "builds: probed in\|builds: ready after\|builds: the probe" "$W/kilnd-$run.log" && break
    sleep 0.5
  done
  kill "$pid"; wait "$pid" 2>/dev/null
  echo "--- kilnd, default config, bytecode folder $run:"
  grep -E "sandbox|builds: probed|builds: ready|refused|toolchain" "$W/kilnd-$run.log" | cut -c1-700
done
echo "node bytecode folder: $(du -sh "$W/store/builds/compiler-cache/python" 2>/dev/null | cut -f1)"
cp "$W"/kilnd-*.log "$OUT/" 2>/dev/null
