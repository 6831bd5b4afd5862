#!/usr/bin/env bash
# A build nobody waits for any more stops, with the real workers on the GPU machine:
#
#   tests/gpu/cancel.sh [OUT_DIR]
#
# One client asks for the single-stream AOTI artifact and is SIGKILLed while the worker
# compiles. kilnd must kill the worker's whole process group (torch, Inductor's compile
# subprocesses, nvcc/ptxas) soon after, free the GPU, record the build as cancelled (not
# failed), and build it afresh for the next client. Prints a summary; leaves logs in OUT_DIR.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${1:-${OUT:-$ROOT/build-gpu/out-cancel}}
WORK=${KILN_GPU_WORK:-/tmp/kiln-gpu-cancel}
mkdir -p "$OUT"
rm -rf "$WORK" && mkdir -p "$WORK"
log() { echo "[cancel.sh $(date -u +%H:%M:%S)] $*" >&2; }

KILN_GPU_BUILD_ONLY=1 bash "$ROOT/tests/gpu/run.sh" "$OUT" > /dev/null
KILND=$ROOT/build-gpu/daemon/kilnd
BENCH=$ROOT/build-gpu/tests/gpu/kiln_gpu_bench
python3 "$ROOT/tests/gpu/prepare.py" --work "$WORK" > "$WORK/prepare.out"

. "$ROOT/tests/gpu/carry_cmake_args.sh"
kiln_start_kilnd "$KILND" "$WORK" "$OUT/kilnd.log" 900
h=$(python3 -c "import json;print(json.load(open('$WORK/prepare.json'))['single']['model_hash'])")
"$BENCH" register --hash "$h" --name single.pt2 "$WORK/sources/single.pt2" > /dev/null

worker_procs() { pgrep -f kiln_worker | wc -l; }
log "one client asks for single-aoti; SIGKILLed 20 s into the build"
"$BENCH" race --key "$WORK/keys/single-aoti.json" --clients 1 > /dev/null 2>&1 &
CLIENT=$!
sleep 20
before=$(worker_procs)
ps -eo pid,pgid,etimes,args | grep -E "kiln_worker|compile_worker|ptxas|nvcc|cc1" | grep -v grep > "$OUT/procs-before.txt" || true
gpu_before=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)
kill -9 $CLIENT
t0=$(date +%s%N)
gone_ms=-1
for _ in $(seq 300); do
  if [ "$(worker_procs)" = 0 ]; then gone_ms=$(( ($(date +%s%N) - t0) / 1000000 )); break; fi
  sleep 0.05
done
sleep 3
ps -eo pid,ppid,pgid,etimes,args | grep -E "kiln_worker|compile_worker|ptxas|nvcc|cc1|python" | grep -v grep > "$OUT/procs-after.txt" || true
gpu_after=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)
"$BENCH" builds > "$OUT/builds-after-cancel.json"

log "a new client asks again: a fresh build, not a remembered failure"
t=$(date +%s)
"$BENCH" race --key "$WORK/keys/single-aoti.json" --clients 2 > "$OUT/race-after.json"
rebuild_s=$(( $(date +%s) - t ))
started=$(grep -c "started on" "$OUT/kilnd.log" || true)

python3 - "$OUT" "$before" "$gone_ms" "$gpu_before" "$gpu_after" "$rebuild_s" "$started" <<'PY'
import json, sys
out, before, gone_ms, gpu_before, gpu_after, rebuild_s, started = sys.argv[1:]
builds = json.load(open(f"{out}/builds-after-cancel.json"))["builds"]
states = [b["state"] for b in builds]
after = [l for l in open(f"{out}/procs-after.txt") if "kiln_worker" in l or "compile_worker" in l]
race = json.load(open(f"{out}/race-after.json"))
summary = {
    "worker processes while building": int(before),
    "ms from client SIGKILL to no worker process": int(gone_ms),
    "worker/compile processes left 3 s later": len(after),
    "GPU compute processes before / after": [int(gpu_before), int(gpu_after)],
    "build states after the cancel": states,
    "next request: fresh build took s": int(rebuild_s),
    "builds started in total": int(started),
    "next request served": race,
}
print(json.dumps(summary, indent=1))
json.dump(summary, open(f"{out}/cancel-summary.json", "w"), indent=1)
ok = int(gone_ms) >= 0 and not after and "cancelled" in states and int(started) == 2
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
