#!/usr/bin/env bash
# Six diffusers families (FLUX.1-dev, Wan 2.1 1.3B, Qwen-Image, SD3.5-medium, LTX-Video,
# HunyuanVideo) at real widths and reduced depth on the GPU machine: eager, diffusers'
# regional compile cold, a kiln miss on an empty kilnd store, a kiln hit in a fresh process
# (tests/gpu/families_gpu.py says what each row measures; tests/gpu/families_gpu_configs.py
# the models and inputs). Writes OUT_DIR/RESULTS-families.md (tests/gpu/families_report.py),
# OUT_DIR/families-rows.tar.gz (every row's JSON and log, kilnd.log, build.log) and
# OUT_DIR/families_run.log.
#
#   tests/gpu/families_run.sh OUT_DIR [PHASES] [FAMILIES]
#     PHASES: comma list of eager, regional, miss, hit (default: all four, ~15 min: more
#     than one device call holds, so split it as below), and jit / variant (families_gpu.py
#     says what each row measures; variant after hit, on the store the misses built);
#     FAMILIES: comma list (default all)
#
# Through the device tool (carry [".carry"]; .carry/ from tests/gpu/prepare_carry.sh plus
# `/opt/kiln/test-venv/bin/pip download --no-deps -d .carry/wheels diffusers==0.42.1
# accelerate==1.15.0`, since that machine has no diffusers and no network; optionally
# `mkdir -p .carry/src && git archive HEAD | tar -x -C .carry/src && git rev-parse HEAD >
# .carry/src/COMMIT` to measure a commit, not the working tree):
#     KILN_FAMILIES_SRC=.carry/src tests/gpu/families_run.sh $OUT eager,regional  # call 1, 411 s
#     KILN_FAMILIES_SRC=.carry/src tests/gpu/families_run.sh $OUT miss,hit        # call 2, 479 s
# (H200, 2026-11-28; call 2 within ~30 s of call 1, so the machine, kilnd and its store stay.)
# tests/gpu/RESULTS-families.md came from the rows of both calls:
#     tar -xzf families-rows.tar.gz rows && python3 tests/gpu/families_report.py rows \
#       tests/gpu/RESULTS-families.md --notes-file NOTES.md
# State lives in KILN_FAMILIES_WORK (default /tmp/kiln-families): the store, rows done, the
# Wan from_pretrained folder. kilnd is started in a session of its own (setsid), so it and
# the store outlive a call while the device machine stays warm (~30 s after a call); a row
# whose result exists is not run again, so a later call goes on where the last stopped.
# On a fresh machine the script builds kiln again and starts kilnd on an empty store, or on
# the store saved by an earlier call: KILN_FAMILIES_STORE_OUT=1 saves it (kilnd stopped and
# restarted) as OUT_DIR/store.tar.part-* (auto, the default: when the misses ran and hit rows
# are left; 0: never); carry those back in .carry/families-store/ (or set
# KILN_FAMILIES_STORE_IN=DIR) and they are restored before kilnd starts.
# KILN_FAMILIES_SRC=DIR: build kilnd and libkiln, and take client/python and the worker, from
# DIR (e.g. .carry/src, a `git archive` of a commit, with its hash in DIR/COMMIT) instead of
# this working tree: a fixed tree while others edit this one. Default: this tree.
# Run from DIR itself (DIR/tests/gpu/families_run.sh, ROOT = DIR), carry DIR only in the
# first call of a warm machine: carrying it again replaces the machine's copy, build-gpu
# included, and the next call builds and starts kilnd afresh.
# KILN_FAMILIES_CALL_S (default 590): the call's limit; rows that would end past it are
# left out (and said so), the tar and report are written before it.
# KILN_FAMILIES_WHEEL=1: kiln as a serving container has it: the wheel that
# client/python/make_wheel.py makes of the libkiln.so built here, installed with
# `pip install --no-deps` into this machine's python3; the rows then run with no
# client/python on PYTHONPATH, no KILN_LIBRARY or KILN_CACHE_DIR, and no KILN_* variable but
# KILN_SOCKET (families_gpu.py hands its own settings to them as FAMILIES_*).
set -uo pipefail
START=$(date +%s)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${1:?usage: families_run.sh OUT_DIR [PHASES] [FAMILIES]}
PHASES=${2:-eager,regional,miss,hit}
FAMS=${3:-}
WORK=${KILN_FAMILIES_WORK:-/tmp/kiln-families}
SRC=$ROOT
[ -n "${KILN_FAMILIES_SRC:-}" ] && SRC=$(cd "$ROOT" && cd "$KILN_FAMILIES_SRC" && pwd)
BUILD=$ROOT/build-gpu
CALL_S=${KILN_FAMILIES_CALL_S:-590}
mkdir -p "$OUT" "$WORK/rows" "$WORK/logs"
exec > >(tee -a "$OUT/families_run.log") 2>&1
log() { echo "[families_run.sh $(date -u +%H:%M:%S) +$(( $(date +%s) - START ))s] $*"; }
if [ -f "$SRC/COMMIT" ]; then KILN_FAMILIES_COMMIT="$(cat "$SRC/COMMIT") ($SRC)"
else KILN_FAMILIES_COMMIT="working tree $SRC"; fi
export KILN_FAMILIES_COMMIT
log "phases $PHASES, work $WORK, kiln from $KILN_FAMILIES_COMMIT"

# What this machine kept from an earlier call (the device tool keeps a machine ~30 s).
if [ -f "$WORK/created" ]; then
  log "warm machine: work folder from $(cat "$WORK/created"); rows there: $(ls "$WORK/rows" | tr '\n' ' ')"
else
  date -u +%FT%TZ > "$WORK/created"
  log "fresh work folder"
fi
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader || true
echo "cpus $(nproc); $(free -g | awk '/Mem:/{print "mem " $2 " GiB, free " $4}')"

# diffusers and accelerate from the carried wheels (the machine has no network)
if [ ! -d /tmp/pylib/diffusers ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/pylib "$ROOT"/.carry/wheels/*.whl ||
    { log "pip install of .carry/wheels failed"; exit 1; }
fi
python3 -m pip list 2>/dev/null | grep -iE '^(torch|triton|huggingface[-_]hub|safetensors|regex|filelock|requests|pillow|accelerate|numpy) ' | tr -s ' ' | paste -sd ';' -

# kilnd: reuse the one an earlier call started (same socket, alive), else build and start.
export KILN_SOCKET=$WORK/kiln.sock
KILND_PID=$(cat "$WORK/kilnd.pid" 2>/dev/null || true)
if [ -n "$KILND_PID" ] && kill -0 "$KILND_PID" 2>/dev/null && [ -S "$KILN_SOCKET" ] && [ -f "$BUILD/client/libkiln.so" ]; then
  log "kilnd still running (pid $KILND_PID) with store $(du -sh "$WORK/store" 2>/dev/null | cut -f1)"
else
  . "$ROOT/tests/gpu/carry_cmake_args.sh"
  log "building kilnd and libkiln.so"
  t=$(date +%s)
  kiln_build_on_device "$SRC" "$BUILD" "$WORK/build.log" kilnd kiln_shared
  log "built in $(( $(date +%s) - t )) s"
  STORE_IN=${KILN_FAMILIES_STORE_IN:-$ROOT/.carry/families-store}
  if [ ! -d "$WORK/store" ] && ls "$STORE_IN"/store.tar.part-* > /dev/null 2>&1; then
    cat "$STORE_IN"/store.tar.part-* | tar -x -C "$WORK"
    log "store restored from $STORE_IN: $(du -sh "$WORK/store" | cut -f1)"
  fi
  kiln_gpu_kilnd_toml "$WORK/kilnd.toml" "$SRC" "${KILN_FAMILIES_SANDBOX:-}"
  rm -f "$KILN_SOCKET"
  # its own session: it outlives this call while the machine stays warm
  setsid "$BUILD/daemon/kilnd" --socket "$KILN_SOCKET" --store "$WORK/store" --config "$WORK/kilnd.toml" \
    >> "$WORK/kilnd.log" 2>&1 < /dev/null &
  KILND_PID=$!
  echo "$KILND_PID" > "$WORK/kilnd.pid"
  log "kilnd starting (pid $KILND_PID); it probes its worker meanwhile"
fi

if [ "${KILN_FAMILIES_WHEEL:-0}" = 1 ]; then
  rm -rf "$WORK/dist"
  whl=$(python3 "$SRC/client/python/make_wheel.py" --libkiln "$BUILD/client/libkiln.so" --out "$WORK/dist") &&
    python3 -m pip install -q --no-index --no-deps --force-reinstall "$whl" ||
    { log "the kiln wheel was not built or not installed"; exit 1; }
  unset KILN_LIBRARY KILN_CACHE_DIR
  log "kiln: $(basename "$whl"), pip install --no-deps; python3 imports $(cd / && env -u PYTHONPATH python3 -c \
    'import kiln, kiln._capi as c; c.lib(); print(kiln.__file__, "with", c.candidates()[0])')"
  export PYTHONPATH=/tmp/pylib:$ROOT/tests/gpu${PYTHONPATH:+:$PYTHONPATH}
else
  export KILN_LIBRARY=$BUILD/client/libkiln.so
  export KILN_CACHE_DIR=$WORK/kiln-cache
  export PYTHONPATH=$SRC/client/python:/tmp/pylib:$ROOT/tests/gpu${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
unset KILN_WORKER  # kilnd hashes sources itself; nothing of the worker in the user's process
left=$(( CALL_S - ($(date +%s) - START) ))
export KILN_FAMILIES_DEADLINE_S=$(( left - 25 ))
log "rows: $(( left - 25 )) s left for them"
timeout $(( left - 15 )) python3 "$ROOT/tests/gpu/families_gpu.py" run "$WORK" "$PHASES" "$FAMS"
rc=$?
kill -0 "$KILND_PID" 2>/dev/null || { log "kilnd is not running:"; tail -20 "$WORK/kilnd.log"; }
grep -E "builds:|error|warn" "$WORK/kilnd.log" | tail -15

python3 "$ROOT/tests/gpu/families_report.py" "$WORK/rows" "$OUT/RESULTS-families.md" > /dev/null ||
  log "the report failed"
packed=(rows logs kilnd.log created)
[ -f "$WORK/build.log" ] && packed+=(build.log)
tar -czf "$OUT/families-rows.tar.gz" -C "$WORK" "${packed[@]}"
# Save the store when asked (1), or (auto, the default) when the misses ran and some hit
# rows are still to do: a later call on a fresh machine then restores it.
want_store=${KILN_FAMILIES_STORE_OUT:-auto}
if [ "$want_store" = auto ]; then
  want_store=0
  if ls "$WORK"/rows/miss-*.json > /dev/null 2>&1; then
    for fam in $(echo "${FAMS:-flux,wan2.1,qwen-image,sd3.5-medium,ltx-video,hunyuan-video}" | tr ',' ' '); do
      [ -f "$WORK/rows/hit-$fam.json" ] || want_store=1
    done
  fi
fi
if [ "$want_store" = 1 ]; then
  kill "$KILND_PID" 2>/dev/null; for _ in $(seq 50); do kill -0 "$KILND_PID" 2>/dev/null || break; sleep 0.2; done
  tar -cf - -C "$WORK" store | split -b 15M - "$OUT/store.tar.part-"
  log "store saved: $(du -ch "$OUT"/store.tar.part-* | tail -1 | cut -f1)"
  setsid "$BUILD/daemon/kilnd" --socket "$KILN_SOCKET" --store "$WORK/store" --config "$WORK/kilnd.toml" \
    >> "$WORK/kilnd.log" 2>&1 < /dev/null &
  echo $! > "$WORK/kilnd.pid"
fi
log "done (driver exit $rc)"
sed -n '/^| family | path/,/^## The miss/p' "$OUT/RESULTS-families.md" 2>/dev/null
exit $rc
