#!/usr/bin/env bash
# How soon kilnd serves after it starts on a GPU node, against how long its build service
# probes the GPUs and the real build worker (which imports torch): one device call.
# Starts kilnd on a fresh store with the default [builds] (the worker in ops/workers) and
# [torch_cache], then polls: the first STATUS answered, the first torch cache PING
# answered, and the first STATUS no longer saying builds_probing. Writes the three times
# and kilnd's log lines about builds to OUT/startup.txt.
#
#     tests/gpu/startup_check.sh OUT
#
# Needs kilnd and kilnctl built in build-node/ (tests/bench/node_bench.sh) or build-gpu/.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${1:?usage: startup_check.sh OUT_DIR}
BUILD=$ROOT/build-node
[ -x "$BUILD/daemon/kilnd" ] || BUILD=$ROOT/build-gpu
mkdir -p "$OUT"
python3 - "$ROOT" "$BUILD" "$OUT/startup.txt" <<'PY'
import datetime, json, os, shutil, socket, subprocess, sys, tempfile, time
root, build, out = sys.argv[1:]
work = tempfile.mkdtemp(prefix="kiln-startup-")
with open(os.path.join(work, "kilnd.toml"), "w") as f:
    f.write('[builds]\nworker = ["python3", "%s/ops/workers/kiln_worker"]\n[torch_cache]\nsocket = "%s/torch.sock"\n'
            % (root, work))
kiln_sock, torch_sock = os.path.join(work, "kiln.sock"), os.path.join(work, "torch.sock")
t0 = time.monotonic()
log = open(os.path.join(work, "kilnd.log"), "w")
kilnd = subprocess.Popen([os.path.join(build, "daemon/kilnd"), "--config", os.path.join(work, "kilnd.toml"),
                          "--socket", kiln_sock, "--store", os.path.join(work, "store")], stdout=log, stderr=log)
status_at = ping_at = probed_at = None
try:
    while probed_at is None and time.monotonic() - t0 < 300 and kilnd.poll() is None:
        if ping_at is None:
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.settimeout(2)
                    s.connect(torch_sock)
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        ping_at = time.monotonic()
            except OSError:
                pass
        try:
            r = subprocess.run([os.path.join(build, "ops/kilnctl/kilnctl"), "--socket", kiln_sock, "--json", "status"],
                               capture_output=True, text=True, timeout=5)
        except subprocess.TimeoutExpired:
            r = None
        if r is not None and r.returncode == 0:
            status_at = status_at or time.monotonic()
            if not json.loads(r.stdout).get("builds_probing"):
                probed_at = time.monotonic()
        time.sleep(0.05)
finally:
    kilnd.terminate()
    kilnd.wait(60)
fmt = lambda t: "%.2f s" % (t - t0) if t else "never"
gpu = ""
if shutil.which("nvidia-smi"):
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True).stdout
lines = ["%s; %s; %d CPUs" % (datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                              gpu.strip().splitlines()[0] if gpu.strip() else "no GPU", os.cpu_count()),
         "first STATUS answered: " + fmt(status_at),
         "first torch cache PING answered: " + fmt(ping_at),
         "build service probed (STATUS without builds_probing): " + fmt(probed_at)]
lines += [l.rstrip()[:300] for l in open(os.path.join(work, "kilnd.log")) if "builds:" in l or "listening" in l]
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
shutil.rmtree(work, ignore_errors=True)
PY
