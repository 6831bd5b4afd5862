#!/usr/bin/env bash
# kilnd beside redis-server on a GPU node (the machine kilnd is for), in one device call:
# builds kilnd, kilnctl and kiln_bench_daemon (Release), then runs, in turns,
# `kiln_bench_daemon --quick` (4 KiB and 2.5 MB hits on kiln's socket) and
# bench_torch_cache.py (GET and SET over the Redis protocol) and the default io_poll_us
# against 0 (`kiln_bench_daemon --quick --before-config 'io_poll_us = 0'`: latency and CPU
# per request) RUNS times each, then the full kiln_bench_daemon once. Outputs under OUT:
# daemon.md, torch-cache.md, poll.md, daemon-full.md, build.log. Runs in about 5-7
# minutes on 16 cores.
#
#     tests/bench/node_bench.sh OUT [RUNS]      (RUNS 0: build only)
#
# Uses redis-server and redis-py from PATH and python3 when they are there, else the copies
# tests/gpu/prepare_carry.sh put in .carry/ (the GPU machine has neither).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${1:?usage: node_bench.sh OUT_DIR [RUNS]}
RUNS=${2:-3}
BUILD=$ROOT/build-node
mkdir -p "$OUT"
log() { echo "[node_bench.sh $(date -u +%H:%M:%S)] $*" >&2; }

. "$ROOT/tests/gpu/carry_cmake_args.sh"  # headers this machine lacks (tests/gpu/README.md)
command -v redis-server > /dev/null || export PATH=$ROOT/.carry/redis/bin:$PATH
python3 -c 'import redis' 2> /dev/null || export PYTHONPATH=$ROOT/.carry/pylib${PYTHONPATH:+:$PYTHONPATH}

log "building"
t=$(date +%s)
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release "${CARRY_CMAKE_ARGS[@]}" > "$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
cmake --build "$BUILD" -j"$(nproc)" --target kilnd kilnctl kiln_bench_daemon >> "$OUT/build.log" 2>&1 ||
  { grep -A6 "error" "$OUT/build.log" | head -80; exit 1; }
log "built in $(( $(date +%s) - t )) s"

machine=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
for i in $(seq "$RUNS"); do
  log "run $i of $RUNS"
  "$BUILD/tests/bench/kiln_bench_daemon" --quick >> "$OUT/daemon.md"
  echo >> "$OUT/daemon.md"
  python3 "$ROOT/tests/bench/bench_torch_cache.py" --kilnd "$BUILD/daemon/kilnd" \
    --kilnctl "$BUILD/ops/kilnctl/kilnctl" --redis-server "$(command -v redis-server)" --machine "$machine" \
    >> "$OUT/torch-cache.md"
  echo >> "$OUT/torch-cache.md"
  "$BUILD/tests/bench/kiln_bench_daemon" --quick --before-config 'io_poll_us = 0' >> "$OUT/poll.md"
  echo >> "$OUT/poll.md"
done
[ "$RUNS" -gt 0 ] || exit 0  # RUNS 0: build only
log "full daemon bench"
"$BUILD/tests/bench/kiln_bench_daemon" > "$OUT/daemon-full.md"
log "done"
