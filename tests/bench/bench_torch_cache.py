"""kilnd's torch.compile cache listener beside Debian's redis-server, through the same client.

Starts redis-server (no persistence) and kilnd ([torch_cache] on a Unix socket) twice, once
with durability = "sync" (SET durable before +OK, the default) and once with "deferred"
(+OK once queued in memory), side by side, each on a fresh folder, and drives both with redis-py over Unix sockets exactly as
torch does (Redis.from_url, set(key, value, ex=None), get(key)), one request at a time.
Prints GET (hits) and SET p50/p99 in microseconds for 4 KiB, 1.2 MB and 10 MB values, and
the ratio kilnd/redis (below 1: kilnd is faster) for each kilnd. Keys are of torch's FX-graph form, each
SET a new key; values are shaped as torch's (JSON around base64). Not a test: run it by hand, commit its output to RESULTS-torch-cache.md.

    /usr/bin/python3 tests/bench/bench_torch_cache.py --kilnd build/daemon/kilnd \
        [--kilnd-before /path/to/an/earlier/kilnd] [--kilnctl build/ops/kilnctl/kilnctl]

After each size, the deferred kilnd's queue is waited out (kilnctl status), so its writer
does not run under the next measurement.
"""

import argparse
import base64
import datetime
import os
import platform
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import redis

SIZES = [("4 KiB", 4096, 2000), ("1.2 MB", 1_200_000, 200), ("10 MB", 10_000_000, 40)]


def wait_for_socket(path, proc, what):
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise RuntimeError(what + " exited")
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(path)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(what + " did not listen within 30 s")
            time.sleep(0.02)


def pct(samples, p):
    s = sorted(samples)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


def wait_written(kilnctl, kiln_sock):
    """Waits until a deferred kilnd has stored everything it acknowledged (kilnctl status),
    so its writer does not run under the next measurement."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        out = subprocess.run([kilnctl, "--socket", kiln_sock, "status"], capture_output=True, text=True).stdout
        if ": 0 entries," in out or "deferred" not in out:
            return
        time.sleep(0.05)
    raise RuntimeError("kilnd's deferred queue did not drain within 300 s")


def measure(url, label, size, n):
    r = redis.Redis.from_url(url)
    r.ping()
    # torch's own value shape: JSON {"data": base64(pickle)}; random bytes stand for the pickle.
    prefix, suffix = b'{"data": "', b'"}'
    body = base64.b64encode(os.urandom(size))[: size - len(prefix) - len(suffix)]
    value = prefix + body + suffix
    keys = ["pt2:fx-graph-v1::bench-%s-%d-%d:c1" % (label, size, i) for i in range(n)]
    sets, gets = [], []
    for k in keys:
        t = time.perf_counter()
        r.set(k, value)
        sets.append(time.perf_counter() - t)
    for _ in range(2):  # the first pass reads each entry once; the second is the warm hit
        gets = []
        for k in keys:
            t = time.perf_counter()
            got = r.get(k)
            gets.append(time.perf_counter() - t)
            assert got is not None and len(got) == size
    r.close()
    us = 1e6
    return {"set": (pct(sets, 50) * us, pct(sets, 99) * us), "get": (pct(gets, 50) * us, pct(gets, 99) * us)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kilnd", required=True, help="the kilnd to measure")
    ap.add_argument("--kilnd-before", default="", help="an earlier kilnd, measured in the same run (before/after)")
    ap.add_argument("--kilnctl", default="", help="kilnctl, to wait for deferred writes (default: beside --kilnd)")
    ap.add_argument("--redis-server", default="/usr/bin/redis-server")
    ap.add_argument("--machine", default="")
    args = ap.parse_args()

    kilnctl = args.kilnctl or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(args.kilnd))),
                                           "ops", "kilnctl", "kilnctl")
    work = tempfile.mkdtemp(prefix="kiln-bench-", dir="/tmp")
    procs = []
    try:
        redis_sock = os.path.join(work, "redis.sock")
        rp = subprocess.Popen([args.redis_server, "--port", "0", "--unixsocket", redis_sock, "--save", "",
                               "--appendonly", "no", "--dir", work], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
        procs.append(rp)
        kilnds = [("sync", args.kilnd, "sync"), ("deferred", args.kilnd, "deferred")]
        if args.kilnd_before:
            kilnds.append(("before", args.kilnd_before, ""))
        socks = {}
        for name, binary, durability in kilnds:
            d = os.path.join(work, name)
            os.mkdir(d)
            socks[name] = os.path.join(d, "torch.sock")
            with open(os.path.join(d, "kilnd.toml"), "w") as f:
                f.write('log_level = "warn"\n[torch_cache]\nsocket = "%s"\n' % socks[name])
                if durability:
                    f.write('durability = "%s"\n' % durability)
            kp = subprocess.Popen([binary, "--config", os.path.join(d, "kilnd.toml"), "--socket",
                                   os.path.join(d, "kiln.sock"), "--store", os.path.join(d, "store")],
                                  stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "kilnd.log"), "w"))
            procs.append(kp)
            wait_for_socket(socks[name], kp, name)
        wait_for_socket(redis_sock, rp, "redis-server")
        redis_version = subprocess.run([args.redis_server, "--version"], capture_output=True, text=True).stdout.split()
        rows = []
        for label, size, n in SIZES:
            res = {"redis": measure("unix://" + redis_sock, "redis", size, n)}
            for name, _, durability in kilnds:
                res[name] = measure("unix://" + socks[name], name, size, n)
                if durability == "deferred":
                    wait_written(kilnctl, os.path.join(work, name, "kiln.sock"))
            rows.append((label, n, res))

        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        print("# kilnd torch cache (Redis protocol) beside redis-server\n")
        print("%s; %s; %d CPUs; Linux %s" % (now, args.machine or platform.processor() or platform.machine(),
                                              os.cpu_count(), platform.release()))
        print("Client: redis-py %s (Debian), one request at a time, over Unix sockets. redis-server %s "
              "--save '' --appendonly no. kilnd: default settings (io_threads 2, store_threads 4, "
              "zstd 3, hot set 2 GiB), [torch_cache] socket; `sync`: durability \"sync\" (SET durable, "
              "fsynced, before +OK), `deferred`: durability \"deferred\" (+OK once queued in memory; "
              "deferred_max_bytes 256 MiB). redis: in memory. SET: a new key each time. GET: hits, second "
              "pass over the keys.\n"
              % (redis.__version__, " ".join(redis_version[2:3])))
        names = [name for name, _, _ in kilnds]
        head = "| value | n | op | redis p50 / p99 us | " + " | ".join(
            "%s p50 / p99 us | %s/redis p50 | %s/redis p99" % (n_, n_, n_) for n_ in names) + " |"
        print(head)
        print("|" + "---|" * (4 + 3 * len(names)))
        for label, n, res in rows:
            for op in ("get", "set"):
                red = res["redis"][op]
                cells = ["%.0f / %.0f | %.2fx | %.2fx" % (res[k][op][0], res[k][op][1], res[k][op][0] / red[0],
                                                          res[k][op][1] / red[1]) for k in names]
                print("| %s | %d | %s | %.0f / %.0f | %s |" % (label, n, op.upper(), red[0], red[1], " | ".join(cells)))
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
