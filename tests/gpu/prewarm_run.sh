#!/usr/bin/env bash
# Issue "Prewarm a fleet for a diffusers model", GPU proof in one device call: builds kilnd,
# kilnctl and libkiln.so from this working tree, starts two kilnds with the real worker
# (node A and node B: own sockets, own empty stores, `builds_per_gpu = 4`), and runs
# tests/gpu/prewarm_proof.py: (1) a FLUX process (FLUX.1-dev widths, 2 double + 4 single
# blocks, bf16, 1024x1024) misses on node A, waits for its builds and writes the manifest
# with kiln.torch.manifest; (2) `kilnctl prewarm` of that manifest on node B; (3) a fresh
# FLUX process on node B hits from its first call. Writes OUT_DIR/RESULTS-prewarm.md,
# prewarm.json, manifest/ (flux.toml and its sources), prewarm_run.log and
# prewarm-logs.tar.gz (each step's JSON and log, both kilnds' logs and configs, the build log).
#
#   tests/gpu/prewarm_run.sh OUT_DIR
#
# Through the device tool, kind nvidia-h200, carry [".carry/wheels", ".carry/include",
# ".carry/cmake"]: .carry/include and .carry/cmake from tests/gpu/prepare_carry.sh;
# .carry/wheels holds diffusers 0.42.1 and accelerate 1.15.0 (as for families_run.sh:
# `/opt/kiln/test-venv/bin/pip download --no-deps -d .carry/wheels diffusers==0.42.1
# accelerate==1.15.0`; the machine has no network):
#     tests/gpu/prewarm_run.sh $OUT      # ~7-8 min: kiln's build (~2 min), the probes, 2 x 2 FLUX builds
# KILN_PREWARM_CALL_S (default 560): the call's limit; prewarm_proof.py's steps are cut, and
# later ones left out, before it, and the report and tar are written before it.
# KILN_PREWARM_WORK (default /tmp/kiln-prewarm, emptied first): stores, sockets, logs.
# The result is committed as tests/gpu/RESULTS-prewarm.md (the date and GPU are in it).
# KILN_GPU_SANDBOX=false: kilnd's worker sandbox off. The device's torch 2.11 needs it: its
# AOTInductor loader unpacks into /tmp, which the sandbox does not let the worker write in
# that container (no mount namespace; tests/gpu/RESULTS-build-speed.md, 6 and 7); unset =
# kilnd's default (on), where kilnd refuses builds at start and says why.
set -uo pipefail
START=$(date +%s)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${1:?usage: prewarm_run.sh OUT_DIR}
WORK=${KILN_PREWARM_WORK:-/tmp/kiln-prewarm}
BUILD=$ROOT/build-gpu
CALL_S=${KILN_PREWARM_CALL_S:-560}
mkdir -p "$OUT"
rm -rf "$WORK" && mkdir -p "$WORK/a" "$WORK/b"
exec > >(tee -a "$OUT/prewarm_run.log") 2>&1
log() { echo "[prewarm_run.sh $(date -u +%H:%M:%S) +$(( $(date +%s) - START ))s] $*"; }
export KILN_PREWARM_COMMIT=${KILN_PREWARM_COMMIT:-"$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(
  [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ] && echo ' (working tree, edited)')"}
log "work $WORK; kiln from $KILN_PREWARM_COMMIT; call limit $CALL_S s"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader || true
echo "cpus $(nproc); $(free -g | awk '/Mem:/{print "mem " $2 " GiB"}')"

# diffusers and accelerate from the carried wheels (the machine has no network)
if [ ! -d /tmp/pylib/diffusers ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/pylib "$ROOT"/.carry/wheels/diffusers-*.whl \
    "$ROOT"/.carry/wheels/accelerate-*.whl || { log "pip install of .carry/wheels failed"; exit 1; }
fi
python3 -m pip list 2>/dev/null | grep -iE '^(torch|triton|huggingface[-_]hub|safetensors|numpy) ' | tr -s ' ' | paste -sd ';' -

. "$ROOT/tests/gpu/carry_cmake_args.sh"
log "building kilnd (torch's files read into the page cache meanwhile)"
t=$(date +%s)
built=$(kiln_build_kilnd_warm "$ROOT" "$BUILD" "$WORK/build.log") || { echo "$built"; exit 1; }
log "$built"

# Two nodes on this machine, same config: the real worker under this machine's python3
# (absolute path, as families_run.sh writes it); each kilnd keeps its compiler caches
# under its own store (builds/compiler-cache), so node B's builds start cold too.
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true' EXIT
for n in a b; do
  kiln_gpu_kilnd_toml "$WORK/$n/kilnd.toml" "$ROOT" "${KILN_GPU_SANDBOX:-}"
  "$BUILD/daemon/kilnd" --socket "$WORK/$n/kiln.sock" --store "$WORK/$n/store" --config "$WORK/$n/kilnd.toml" \
    > "$WORK/$n/kilnd.log" 2>&1 < /dev/null &
  PIDS+=("$!")
done
log "kilnd A and B starting (pids ${PIDS[*]}) on empty stores; they probe their workers meanwhile"
kiln_build_targets "$BUILD" "$WORK/build.log" kilnctl kiln_shared
log "kilnctl and libkiln.so built ($(( $(date +%s) - t )) s since the build began)"
for n in a b; do
  for _ in $(seq 300); do [ -S "$WORK/$n/kiln.sock" ] && break; sleep 0.1; done
  [ -S "$WORK/$n/kiln.sock" ] || { log "kilnd $n has no socket:"; tail -30 "$WORK/$n/kilnd.log"; exit 1; }
done

export KILN_LIBRARY=$BUILD/client/libkiln.so
export PYTHONPATH=$ROOT/client/python:/tmp/pylib:$ROOT/tests/gpu${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
unset KILN_WORKER KILN_FAMILIES_TINY KILN_SOCKET KILN_CACHE_DIR
export KILN_PREWARM_DEADLINE_UNIX=$(( START + CALL_S - 30 ))
left=$(( CALL_S - ($(date +%s) - START) - 20 ))
log "prewarm_proof.py: $left s at most"
[ "$left" -gt 30 ] || { log "no time left for the proof"; left=30; }
timeout "$left" python3 "$ROOT/tests/gpu/prewarm_proof.py" run "$OUT" --socket-a "$WORK/a/kiln.sock" \
  --socket-b "$WORK/b/kiln.sock" --kilnctl "$BUILD/ops/kilnctl/kilnctl" --work "$WORK/proof"
rc=$?
for n in a b; do
  echo "--- kilnd $n: $(grep -cE 'build [0-9a-f]{64} started' "$WORK/$n/kilnd.log") builds started"
  grep -E "builds:|error|warn" "$WORK/$n/kilnd.log" | tail -8
done
kill "${PIDS[@]}" 2>/dev/null
packed=(a/kilnd.log a/kilnd.toml b/kilnd.log b/kilnd.toml build.log)
[ -d "$WORK/proof" ] && packed+=(proof/steps proof/logs proof/config.json)
tar -czf "$OUT/prewarm-logs.tar.gz" -C "$WORK" "${packed[@]}"
log "done (prewarm_proof.py exit $rc)"
sed -n '/^| step | what/,/^\*\*Verdict/p' "$OUT/RESULTS-prewarm.md" 2>/dev/null
exit $rc
