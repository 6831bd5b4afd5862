#!/usr/bin/env bash
# torch.compile's caches shared through the fleet's registry, on the real FLUX transformer,
# in one device call: builds kilnd, starts Debian's docker-registry (carried: .carry/registry)
# on loopback over plain HTTP, node A (signs and pushes) and node B (pulls, trusts A), each
# with its own store and [torch_cache] socket, and runs torch_cache_fleet.py.
#   tests/gpu/torch_cache_fleet_run.sh OUT_DIR
# Needs .carry/pylib (redis-py), .carry/diffusers/src and .carry/registry/docker-registry.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${1:?usage: torch_cache_fleet_run.sh OUT_DIR}
WORK=${KILN_GPU_WORK:-/tmp/kiln-tcf-gpu}
BUILD=$ROOT/build-gpu
mkdir -p "$OUT"; rm -rf "$WORK" && mkdir -p "$WORK/registry"
. "$ROOT/tests/gpu/carry_cmake_args.sh"
[ -x "$BUILD/daemon/kilnd" ] && [ -x "$BUILD/ops/kilnctl/kilnctl" ] || kiln_build_on_device "$ROOT" "$BUILD" "$OUT/build.log" kilnd kilnctl
KILNCTL=$BUILD/ops/kilnctl/kilnctl
PORT=35000
printf 'version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:%s\n' \
  "$WORK/registry/data" "$PORT" > "$WORK/registry/config.yml"
"$ROOT/.carry/registry/docker-registry" serve "$WORK/registry/config.yml" > "$OUT/registry.log" 2>&1 &
PIDS=$!
trap 'kill $PIDS 2>/dev/null || true' EXIT
(cd "$WORK" && "$KILNCTL" keygen builder-a > "$WORK/trust-a.txt")
TRUST=$(grep -o 'builder-a:[A-Za-z0-9+/=]*' "$WORK/trust-a.txt" | head -1)
fleet() {  # push pull [signing key]
  printf '[fleet]\nregistry = "http://127.0.0.1:%s"\nrepository = "kiln/torch"\npush = %s\npull = %s\ntrusted_keys = ["%s"]\n' \
    "$PORT" "$1" "$2" "$TRUST"
  [ -n "${3:-}" ] && printf 'signing_key_file = "%s"\n' "$3"
  return 0
}
for n in a b; do
  mkdir -p "$WORK/$n"
  { printf 'metrics_listen = "127.0.0.1:0"\n[builds]\nenabled = false\n[torch_cache]\nsocket = "%s"\n' "$WORK/$n/tc.sock"
    if [ $n = a ]; then fleet true true "$WORK/builder-a.pem"; else fleet false true; fi; } > "$WORK/$n/kilnd.toml"
  "$BUILD/daemon/kilnd" --socket "$WORK/$n/kiln.sock" --store "$WORK/$n/store" --config "$WORK/$n/kilnd.toml" > "$OUT/kilnd-$n.log" 2>&1 &
  PIDS="$PIDS $!"
done
trap 'kill $PIDS 2>/dev/null || true' EXIT
for _ in $(seq 300); do [ -S "$WORK/a/tc.sock" ] && [ -S "$WORK/b/tc.sock" ] && break; sleep 0.1; done
METRICS_B=$(grep -o 'metrics http://[0-9.:]*/metrics' "$OUT/kilnd-b.log" | head -1 | cut -d' ' -f2)
export PYTHONPATH=$ROOT/.carry/diffusers/src:$ROOT/.carry/pylib${PYTHONPATH:+:$PYTHONPATH}
python3 "$ROOT/tests/gpu/torch_cache_fleet.py" "$OUT" "unix://$WORK/a/tc.sock" "unix://$WORK/b/tc.sock" \
  "$KILNCTL" "$WORK/a/kiln.sock" "$METRICS_B" 2>&1 | grep -v "^W1\|Warning" | tail -20
for n in a b; do
  echo "node $n: $(KILN_SOCKET=$WORK/$n/kiln.sock "$KILNCTL" ls --filter kind=torch_cache 2>/dev/null | tail -n +2 | wc -l) torch_cache entries;" \
       "origins: $(KILN_SOCKET=$WORK/$n/kiln.sock "$KILNCTL" --json ls --filter kind=torch_cache 2>/dev/null | grep -o '"origin":"[a-z_]*"' | sort | uniq -c | tr '\n' ' ')"
done
grep -c "closed:" "$OUT/kilnd-a.log" "$OUT/kilnd-b.log" | sed "s/^/torch cache connections closed on an error: /" || true
grep -i "refused\|warn" "$OUT/kilnd-b.log" | head -5 || true
