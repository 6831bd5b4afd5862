#!/usr/bin/env bash
# Issue "A hit is never wrong", GPU proof in one device call (two GPUs): builds kiln from
# this working tree, starts kilnd with the real worker (builds_per_gpu = 4, empty store),
# then runs tests/gpu/lora_devices.py's two parts side by side, each a process of its own:
#   (a) lora     a FLUX (FLUX.1-dev widths, 1 double + 2 single blocks, bf16, random
#                weights) with a PEFT LoRA through diffusers' API on cuda:0: scale 1,
#                per-call scale 0.5, fuse_lora(), unfuse_lora(), each call against an eager twin
#   (b) devices  a FLUX (2 double + 2 single) split over cuda:0 and cuda:1 (pre-hooks moving activations): kiln
#                entries per device, all hit, outputs against the eager split model
# and writes OUT_DIR/RESULTS-lora-devices.md, lora.json, devices.json, lora_devices_run.log
# and lora-devices-logs.tar.gz (both parts' logs, kilnd.log, kiln's build log).
#
#   tests/gpu/lora_devices_run.sh OUT_DIR
#
# Through the device tool, kind nvidia-h100-x2 (or nvidia-h200-x2), carry
# [".carry/wheels", ".carry/include", ".carry/cmake"]: .carry/include and .carry/cmake from
# tests/gpu/prepare_carry.sh; .carry/wheels holds diffusers 0.42.1 and accelerate 1.15.0
# (as for families_run.sh) and peft 0.21.2
# (`/opt/kiln/test-venv/bin/pip download --no-deps -d .carry/wheels peft==0.21.2`; its
# other needs are in the machine's image):
#     tests/gpu/lora_devices_run.sh $OUT        # ~8 min: kiln's build, kilnd's probe, 3 rounds of builds
# KILN_LORA_PARTS=lora: part (a) alone (one GPU is enough; kind nvidia-h200).
# KILN_LORA_CALL_S (default 540): the call's limit; the parts' waits for builds end before
# it, the report is written before it. KILN_LORA_DEPTH_LORA / KILN_LORA_DEPTH_DEVICES
# (defaults "1,2" and "2,2"): double,single blocks of each part's model (lora_devices.py says
# why (a) has one double block). KILN_LORA_WORK (default /tmp/kiln-lora-devices): store,
# socket, logs. kilnd is built and started first, libkiln.so built while kilnd probes its
# worker, and torch/Triton's files read once during the build (page cache) for that probe.
# KILN_GPU_SANDBOX=false: kilnd's worker sandbox off. The device's torch 2.11 needs it: its
# AOTInductor loader unpacks into /tmp, which the sandbox does not let the worker write in
# that container (no mount namespace; tests/gpu/RESULTS-build-speed.md, 6 and 7); unset =
# kilnd's default (on), where kilnd refuses builds at start and says why.
set -uo pipefail
START=$(date +%s)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${1:?usage: lora_devices_run.sh OUT_DIR}
WORK=${KILN_LORA_WORK:-/tmp/kiln-lora-devices}
BUILD=$ROOT/build-gpu
CALL_S=${KILN_LORA_CALL_S:-540}
mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/lora_devices_run.log") 2>&1
log() { echo "[lora_devices_run.sh $(date -u +%H:%M:%S) +$(( $(date +%s) - START ))s] $*"; }
export KILN_LORA_TREE=${KILN_LORA_TREE:-"the working tree at $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"}
log "work $WORK; kiln from $KILN_LORA_TREE"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader || true
echo "cpus $(nproc); $(free -g | awk '/Mem:/{print "mem " $2 " GiB"}')"

# diffusers + accelerate (as families_run.sh), peft apart (lora_devices.py falls back to the
# image's peft if the carried one does not import)
python3 -m pip install -q --no-index --no-deps --target /tmp/pylib "$ROOT"/.carry/wheels/diffusers-*.whl \
  "$ROOT"/.carry/wheels/accelerate-*.whl || { log "pip install of diffusers/accelerate failed"; exit 1; }
python3 -m pip install -q --no-index --no-deps --target /tmp/peftlib "$ROOT"/.carry/wheels/peft-*.whl ||
  log "pip install of peft failed (the image's peft is used)"
python3 -m pip list 2>/dev/null | grep -iE '^(torch|triton|peft|transformers|accelerate|huggingface[-_]hub|safetensors) ' | tr -s ' ' | paste -sd ';' -

. "$ROOT/tests/gpu/carry_cmake_args.sh"
log "building kilnd (torch's files read into the page cache meanwhile)"
built=$(kiln_build_kilnd_warm "$ROOT" "$BUILD" "$WORK/build.log") || { echo "$built"; exit 1; }
log "$built"

kiln_gpu_kilnd_toml "$WORK/kilnd.toml" "$ROOT" "${KILN_GPU_SANDBOX:-}"
export KILN_SOCKET=$WORK/kiln.sock
rm -rf "$WORK/store" "$KILN_SOCKET"
setsid "$BUILD/daemon/kilnd" --socket "$KILN_SOCKET" --store "$WORK/store" --config "$WORK/kilnd.toml" \
  >> "$WORK/kilnd.log" 2>&1 < /dev/null &
KILND_PID=$!
log "kilnd starting (pid $KILND_PID) on an empty store; it probes its worker meanwhile"
kiln_build_targets "$BUILD" "$WORK/build.log" kiln_shared
log "libkiln.so built"

export KILN_LIBRARY=$BUILD/client/libkiln.so
export KILN_CACHE_DIR=$WORK/kiln-cache
export KILN_LORA_PEFT_PATH=/tmp/peftlib
export PYTHONPATH=$ROOT/client/python:/tmp/pylib:$ROOT/tests/gpu${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
unset KILN_WORKER KILN_FAMILIES_TINY
export KILN_LORA_DEADLINE_UNIX=$(( START + CALL_S - 30 ))
left=$(( CALL_S - ($(date +%s) - START) - 20 ))
PARTS=${KILN_LORA_PARTS:-lora,devices}
log "parts $PARTS side by side, $left s at most"
timeout "$left" python3 "$ROOT/tests/gpu/lora_devices.py" lora "$WORK" "$OUT/lora.json" > "$WORK/lora.log" 2>&1 &
PA=$!
rb=skipped
: > "$WORK/devices.log"
if [[ ,$PARTS, == *,devices,* ]]; then
  timeout "$left" python3 "$ROOT/tests/gpu/lora_devices.py" devices "$WORK" "$OUT/devices.json" > "$WORK/devices.log" 2>&1 &
  PB=$!
  wait $PB; rb=$?
fi
log "part (b) ended (exit $rb)"
wait $PA; ra=$?
log "part (a) ended (exit $ra)"
echo "--- lora.log (tail)"; tail -25 "$WORK/lora.log"
echo "--- devices.log (tail)"; tail -25 "$WORK/devices.log"
kill -0 "$KILND_PID" 2>/dev/null || { log "kilnd is not running:"; tail -20 "$WORK/kilnd.log"; }
grep -E "builds:|error|warn" "$WORK/kilnd.log" | tail -20

python3 "$ROOT/tests/gpu/lora_devices.py" report "$OUT" "$OUT/RESULTS-lora-devices.md" || log "the report failed"
kill "$KILND_PID" 2>/dev/null
tar -czf "$OUT/lora-devices-logs.tar.gz" -C "$WORK" lora.log devices.log kilnd.log kilnd.toml build.log
log "done (parts: a exit $ra, b exit $rb)"
cat "$OUT/RESULTS-lora-devices.md" 2>/dev/null | head -60
exit 0
