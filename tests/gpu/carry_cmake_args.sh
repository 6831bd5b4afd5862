# Sourced (bash) by the scripts that build and run kiln on the GPU machine; needs ROOT. Sets
# the array CARRY_CMAKE_ARGS: what CMake needs on a machine without kiln's Debian packages;
# defines kiln_build_on_device and kiln_build_targets (below), which build with it,
# kiln_build_kilnd_warm, kiln_gpu_kilnd_toml, and kiln_start_kilnd, the one way the scripts
# start a kilnd with the real worker.
# The headers tests/gpu/prepare_carry.sh put in .carry/ (when they are there), the
# runtime libsqlite3 where the machine has no .so link to it, and no fuzz target where
# there is no clang++.
CARRY_CMAKE_ARGS=()
if [ -d "$ROOT/.carry/include" ]; then
  CARRY_CMAKE_ARGS+=(-DSQLite3_INCLUDE_DIR="$ROOT/.carry/include" -Dtomlplusplus_DIR="$ROOT/.carry/cmake"
                     -DCMAKE_CXX_FLAGS="-isystem $ROOT/.carry/include")
  [ -e /usr/lib/x86_64-linux-gnu/libsqlite3.so ] ||
    CARRY_CMAKE_ARGS+=(-DSQLite3_LIBRARY=/usr/lib/x86_64-linux-gnu/libsqlite3.so.0)
fi
command -v clang++ > /dev/null || CARRY_CMAKE_ARGS+=(-DKILN_CLANGXX=/bin/false)

# kiln_build_on_device SRC BUILD LOG TARGET...: configures SRC into BUILD (Ninja, Release, no
# tests, CARRY_CMAKE_ARGS, then the array KILN_EXTRA_CMAKE_ARGS if the script set one, e.g.
# tests on and torch's prefix), LOG written afresh, then builds the TARGETs
# (kiln_build_targets). If the configure fails it prints LOG's tail and exits the script with 1.
kiln_build_on_device() {
  local src=$1 build=$2 build_log=$3
  shift 3
  [ -n "${KILN_EXTRA_CMAKE_ARGS+x}" ] || KILN_EXTRA_CMAKE_ARGS=()
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=OFF "${CARRY_CMAKE_ARGS[@]}" \
    "${KILN_EXTRA_CMAKE_ARGS[@]}" > "$build_log" 2>&1 || { tail -40 "$build_log"; exit 1; }
  kiln_build_targets "$build" "$build_log" "$@"
}

# kiln_build_targets BUILD LOG TARGET...: builds the TARGETs of the configured BUILD, LOG
# appended. On a failure it prints LOG's errors and exits the script with 1.
kiln_build_targets() {
  local build=$1 build_log=$2
  shift 2
  cmake --build "$build" -j"$(nproc)" --target "$@" >> "$build_log" 2>&1 ||
    { grep -A6 "error" "$build_log" | head -80; exit 1; }
}

# kiln_build_kilnd_warm SRC BUILD LOG: builds kilnd (kiln_build_on_device) while torch's,
# Triton's and diffusers' files are read into the page cache in the background (from
# /tmp/pylib, where the scripts install the carried wheels): kilnd's worker probe (import
# torch, Triton's content hash) and the Python steps read them next. Prints the seconds.
kiln_build_kilnd_warm() {
  ( PYTHONPATH=/tmp/pylib python3 -c 'import torch, torch.export
from torch.utils._triton import triton_hash_with_backend; triton_hash_with_backend()
import diffusers' > /dev/null 2>&1 & )
  local t
  t=$(date +%s)
  kiln_build_on_device "$1" "$2" "$3" kilnd
  echo "kilnd built in $(( $(date +%s) - t )) s"
}

# kiln_gpu_kilnd_toml FILE SRC [SANDBOX]: the kilnd.toml of the GPU scripts: SRC's real
# worker under this machine's python3, by absolute path (kilnd looks a bare name up on the
# worker's fixed PATH, where a virtual environment's python is not), 1200 s builds, 4 at
# once per GPU, and `sandbox = SANDBOX` when one is given.
kiln_gpu_kilnd_toml() {
  {
    echo "[builds]"
    echo "worker = [\"$(command -v python3)\", \"$2/ops/workers/kiln_worker\"]"
    echo "build_timeout_s = 1200"
    echo "builds_per_gpu = 4"
    if [ -n "${3:-}" ]; then echo "sandbox = $3"; fi
  } > "$1"
}

# kiln_start_kilnd KILND WORK LOG BUILD_TIMEOUT_S: starts KILND on an empty store under WORK
# with the real worker (ops/workers) and that build timeout, its output in LOG; exports its
# socket as KILN_SOCKET, leaves its pid in KILND_PID (killed when the script exits) and
# returns once the socket is there, else prints LOG and exits the script with 1.
kiln_start_kilnd() {
  local kilnd=$1 work=$2 log=$3 timeout=$4
  cat > "$work/kilnd.toml" <<TOML
[builds]
worker = ["python3", "$ROOT/ops/workers/kiln_worker"]
build_timeout_s = $timeout
TOML
  export KILN_SOCKET=$work/kiln.sock
  "$kilnd" --socket "$KILN_SOCKET" --store "$work/store" --config "$work/kilnd.toml" > "$log" 2>&1 &
  KILND_PID=$!
  trap 'kill $KILND_PID 2>/dev/null || true' EXIT
  for _ in $(seq 1200); do [ -S "$KILN_SOCKET" ] && break; sleep 0.1; done
  [ -S "$KILN_SOCKET" ] || { cat "$log"; exit 1; }
}
