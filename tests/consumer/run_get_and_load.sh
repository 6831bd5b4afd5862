#!/bin/sh
# The get-and-load example against a real kilnd that builds through the test worker:
# registers a source, then the example's get builds on the miss and loads the artifact;
# a second run is a hit of the same key.
#   run_get_and_load.sh KILND KILNCTL TEST_WORKER GET_AND_LOAD WORK_DIR
set -eu
kilnd=$1 kilnctl=$2 worker=$3 example=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
sock_dir=$(mktemp -d /tmp/kiln-consumer-XXXXXX)
sock=$sock_dir/kiln.sock
trap 'kill $pid 2>/dev/null || true; rm -rf "$sock_dir"' EXIT
# The test node (its one copy: tests/support/test_node.toml) and one build slot of its GPU.
node=$(dirname "$0")/../support/test_node.toml
node_field() { sed -n "s/^$1 = //p" "$node"; }
cat > "$work/kilnd.toml" <<TOML
[builds]
worker = ["$worker"]
probe_gpus = false
[[builds.slots]]
name = "gpu0"
gpu_arch = $(node_field gpu_arch)
gpu_name = $(node_field gpu_name)
TOML
cat "$node" >> "$work/kilnd.toml"
"$kilnd" --socket "$sock" --store "$work/store" --config "$work/kilnd.toml" > "$work/kilnd.log" 2>&1 &
pid=$!
i=0
until "$kilnctl" --socket "$sock" status > /dev/null 2>&1; do
  i=$((i + 1))
  if [ $i -gt 300 ] || ! kill -0 $pid 2>/dev/null; then cat "$work/kilnd.log"; exit 1; fi
  sleep 0.1
done
printf '{"behavior": "ok"}' > "$work/source.txt"
hash=$(sha256sum "$work/source.txt" | cut -d' ' -f1)
"$kilnctl" --socket "$sock" source add "$work/source.txt" --model-hash "$hash" > /dev/null
first=$("$example" "$sock" "$hash")
second=$("$example" "$sock" "$hash")
echo "$first"
[ "$first" = "$second" ] || { echo "a hit differs from the build: $first / $second"; exit 1; }
case $first in "get_and_load ok "*) ;; *) echo "unexpected: $first"; exit 1 ;; esac
"$kilnctl" --socket "$sock" --json stats | tr -d " " | grep -q "\"misses\":1" || { "$kilnctl" --socket "$sock" stats; exit 1; }  # one build, then a hit
