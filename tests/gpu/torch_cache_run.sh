#!/usr/bin/env bash
# torch.compile's caches from kilnd on the real FLUX transformer, in one device call:
# builds kilnd, starts it with [torch_cache] on a fresh store, runs torch_cache_flux.py.
#   tests/gpu/torch_cache_run.sh OUT_DIR
# Needs redis-py where torch can import it (.carry/pylib: Debian's python3-redis and
# packaging, pure Python) and diffusers at .carry/diffusers/src.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${1:?usage: torch_cache_run.sh OUT_DIR}
WORK=${KILN_GPU_WORK:-/tmp/kiln-tc-gpu}
BUILD=$ROOT/build-gpu
mkdir -p "$OUT"; rm -rf "$WORK" && mkdir -p "$WORK"
. "$ROOT/tests/gpu/carry_cmake_args.sh"
[ -x "$BUILD/daemon/kilnd" ] || kiln_build_on_device "$ROOT" "$BUILD" "$OUT/build.log" kilnd kilnctl
printf '[builds]\nenabled = false\n[torch_cache]\nsocket = "%s"\n' "$WORK/torch-cache.sock" > "$WORK/kilnd.toml"
"$BUILD/daemon/kilnd" --socket "$WORK/kiln.sock" --store "$WORK/store" --config "$WORK/kilnd.toml" > "$OUT/kilnd-tc.log" 2>&1 &
KILND_PID=$!
trap 'kill $KILND_PID 2>/dev/null || true' EXIT
for _ in $(seq 300); do [ -S "$WORK/torch-cache.sock" ] && break; sleep 0.1; done
export TORCHINDUCTOR_REDIS_URL=unix://$WORK/torch-cache.sock
export PYTHONPATH=$ROOT/.carry/diffusers/src:$ROOT/.carry/pylib${PYTHONPATH:+:$PYTHONPATH}
python3 "$ROOT/tests/gpu/torch_cache_flux.py" "$OUT" 2>&1 | grep -v "^W1124\|Warning" | tail -20
echo "torch_cache entries in the store: $(KILN_SOCKET=$WORK/kiln.sock "$BUILD/ops/kilnctl/kilnctl" ls --filter kind=torch_cache 2>/dev/null | tail -n +2 | wc -l)"
grep -c "closed:" "$OUT/kilnd-tc.log" | sed "s/^/torch cache connections closed on an error: /" || true
