#!/bin/sh
# The fleet tier's benchmark: a cold node's first hit of a 2.5 MB and a 256 MB artifact
# pulled from the registry, against a local hit and a rebuild; push throughput. Debian's
# docker-registry on loopback (TLS, htpasswd) and two kilnd nodes whose builds run the test
# worker (a "rebuild" is kiln's build pipeline around a worker that compiles nothing; a
# real block build is 3.6-36.6 s, DESIGN.md). Not run by ctest.
#   tests/bench/fleet_bench.sh BUILD_DIR > tests/bench/RESULTS-fleet.md
set -eu
B=$(cd "${1:?usage: fleet_bench.sh BUILD_DIR}" && pwd)
KILND=$B/daemon/kilnd KILNCTL=$B/ops/kilnctl/kilnctl WORKER=$B/tests/kiln_test_worker
T=$(mktemp -d /tmp/kiln-fleet-bench-XXXXXX)
PIDS=""
cleanup() { for p in $PIDS; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$T"; }
trap cleanup EXIT
now() { date +%s.%N; }
ms() { echo "$1 $2" | awk '{printf "%.1f", ($2 - $1) * 1000}'; }

cd "$T"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=ca -keyout ca.key -out ca.crt 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 -keyout s.key -out s.csr 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' > san.ext
openssl x509 -req -in s.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 -extfile san.ext -out s.crt 2>/dev/null
htpasswd -Bbc htpasswd kiln bench 2>/dev/null
echo kiln:bench > auth
PORT=$(( 20000 + $$ % 20000 ))
cat > reg.yml <<EOC
version: 0.1
log: {level: error}
storage: {filesystem: {rootdirectory: $T/data}}
http: {addr: "127.0.0.1:$PORT", tls: {certificate: $T/s.crt, key: $T/s.key}}
auth: {htpasswd: {realm: bench, path: $T/htpasswd}}
EOC
/usr/bin/docker-registry serve reg.yml > reg.log 2>&1 & PIDS="$PIDS $!"
"$KILNCTL" keygen builder >/dev/null
TRUST=$(cat builder.pub)
for n in a b; do
  mkdir -p $n
  cat > $n/kilnd.toml <<EOC
[builds]
worker = ["$WORKER"]
probe_gpus = false
[[builds.slots]]
name = "gpu0"
gpu_arch = "sm_test"
gpu_name = "Test GPU"
[fleet]
registry = "https://127.0.0.1:$PORT"
basic_auth_file = "$T/auth"
ca_file = "$T/ca.crt"
push = $([ $n = a ] && echo true || echo false)
$([ $n = a ] && echo "signing_key_file = \"$T/builder.pem\"")
trusted_keys = ["$TRUST"]
push_retry_max_s = 1
EOC
  "$KILND" --config $n/kilnd.toml --socket $T/$n.sock --store $T/$n/store --log-level warn 2> $n/log & PIDS="$PIDS $!"
done
for s in a b; do i=0; while [ ! -S $T/$s.sock ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; done

echo "# kiln fleet benchmark"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); Debian docker-registry $(dpkg-query -W -f '${Version}' docker-registry) on loopback with TLS and bcrypt htpasswd; kilnd defaults (zstd 3)."
echo "Times are one run each, milliseconds, measured around kilnctl (its process start included)."
echo
echo "| artifact | rebuild on A (test worker) | A's push until the queue is empty | push MB/s | B cold first hit (pull, verify, store, serve) | B local hit after | pull / local |"
echo "|---|---|---|---|---|---|---|"
for size in 2621440 268435456; do
  printf '{"behavior":"ok","pad_bytes":%s}' $size > src-$size.json
  H=$(sha256sum src-$size.json | cut -c1-64)
  "$KILNCTL" source add --socket $T/a.sock --model-hash $H src-$size.json >/dev/null
  K="--kind aoti --model-hash $H --region Block --dtype bfloat16 --input bfloat16:1x64"
  t0=$(now); "$KILNCTL" build --socket $T/a.sock $K >/dev/null; t1=$(now)
  while [ "$("$KILNCTL" fleet --json --socket $T/a.sock | sed 's/.*"pending_pushes":\([0-9]*\).*/\1/')" != 0 ]; do sleep 0.02; done
  t2=$(now)
  t3=$(now); "$KILNCTL" get --socket $T/b.sock $K -o $T/out1 >/dev/null; t4=$(now)
  t5=$(now); "$KILNCTL" get --socket $T/b.sock $K -o $T/out2 >/dev/null; t6=$(now)
  cmp -s $T/out1 $T/out2
  pull=$(ms $t3 $t4) hit=$(ms $t5 $t6) push=$(ms $t1 $t2)
  mbps=$(echo "$size $push" | awk '{printf "%.0f", $1 / 1e6 / ($2 / 1000)}')
  ratio=$(echo "$pull $hit" | awk '{printf "%.0fx", $1 / $2}')
  echo "| $(echo $size | awk '{printf "%.1f MB", $1/1e6}') | $(ms $t0 $t1) | $push | $mbps | $pull | $hit | $ratio |"
  rm -f $T/out1 $T/out2
done
