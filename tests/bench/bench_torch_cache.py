"""kilnd's torch.compile cache listener beside Debian's redis-server, through the same client.

Starts redis-server (no persistence) and kilnd ([torch_cache] on a Unix socket) twice, once
with durability = "sync" (SET durable before +OK, the default) and once with "deferred"
(+OK once queued in memory), each on a fresh folder, and drives all three with redis-py
over Unix sockets exactly as torch does (Redis.from_url, set(key, value, ex=None),
get(key)), one request at a time. Not a test: run it by hand, commit its output to
RESULTS-torch-cache.md.

    /usr/bin/python3 tests/bench/bench_torch_cache.py --kilnd build/daemon/kilnd \
        [--kilnd-before /path/to/an/earlier/kilnd] [--kilnctl build/ops/kilnctl/kilnctl]

How it measures, per value size (4 KiB, 1.2 MB, 10 MB):
- SET: ROUNDS rounds; in each, every server in turn (the order rotates) takes n/ROUNDS SETs
  of new keys. The servers take turns so that all of them share the machine's noise over
  the run, where one server's phase after another's would not. After a deferred kilnd's
  turn its queue is waited out (kilnctl status, not timed), so its writer never runs
  under another server's turn, and each turn stays within deferred_max_bytes.
- GET: one untimed pass over each server's keys, then ROUNDS rounds as above (hits).
- Burst (10 MB only): BURST new 10 MB keys back to back to each server in turn: the time
  until the last +OK, and for a deferred kilnd also until all of it was stored. This is
  the one place where a deferred kilnd's queue can fill (400 MB against 256 MiB).
Keys are of torch's FX-graph form; values are shaped as torch's (JSON around base64).
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
ROUNDS = 5
BURST = 40  # 10 MB values, back to back


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
    """Waits until a deferred kilnd has stored everything it acknowledged (kilnctl status)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        out = subprocess.run([kilnctl, "--socket", kiln_sock, "status"], capture_output=True, text=True).stdout
        if ": 0 entries," in out or "deferred" not in out:
            return
        time.sleep(0.01)
    raise RuntimeError("kilnd's deferred queue did not drain within 300 s")


def torch_value(size):
    # torch's own value shape: JSON {"data": base64(pickle)}; random bytes stand for the pickle.
    prefix, suffix = b'{"data": "', b'"}'
    body = base64.b64encode(os.urandom(size))[: size - len(prefix) - len(suffix)]
    return prefix + body + suffix


class Server:
    def __init__(self, name, url, kiln_sock=None):
        self.name, self.kiln_sock = name, kiln_sock
        self.client = redis.Redis.from_url(url)
        self.client.ping()

    def settle(self, kilnctl):
        if self.kiln_sock and self.name != "sync":
            wait_written(kilnctl, self.kiln_sock)


def turns(servers, rounds):
    """(round, server) in the order the servers take their turns: the order rotates."""
    for r in range(rounds):
        k = r % len(servers)
        for s in servers[k:] + servers[:k]:
            yield r, s


def measure(servers, kilnctl, size, n):
    value = torch_value(size)
    per = n // ROUNDS
    keys = {s.name: ["pt2:fx-graph-v1::bench-%s-%d-%d:c1" % (s.name, size, i) for i in range(per * ROUNDS)]
            for s in servers}
    sets = {s.name: [] for s in servers}
    gets = {s.name: [] for s in servers}
    for r, s in turns(servers, ROUNDS):
        for k in keys[s.name][r * per:(r + 1) * per]:
            t = time.perf_counter()
            s.client.set(k, value)
            sets[s.name].append(time.perf_counter() - t)
        s.settle(kilnctl)
    for s in servers:  # the first read of each entry, not timed
        for k in keys[s.name]:
            assert len(s.client.get(k)) == size
    for r, s in turns(servers, ROUNDS):
        for k in keys[s.name][r * per:(r + 1) * per]:
            t = time.perf_counter()
            got = s.client.get(k)
            gets[s.name].append(time.perf_counter() - t)
            assert got is not None and len(got) == size
    us = 1e6
    return {s.name: {"set": (pct(sets[s.name], 50) * us, pct(sets[s.name], 99) * us),
                     "get": (pct(gets[s.name], 50) * us, pct(gets[s.name], 99) * us)} for s in servers}


def burst(servers, kilnctl):
    """BURST new 10 MB values back to back to each server: (seconds to the last +OK,
    seconds until stored: for a deferred kilnd, after its queue drained)."""
    value = torch_value(10_000_000)
    out = {}
    for s in servers:
        t = time.perf_counter()
        for i in range(BURST):
            s.client.set("pt2:fx-graph-v1::burst-%s-%d:c1" % (s.name, i), value)
        acked = time.perf_counter() - t
        s.settle(kilnctl)
        out[s.name] = (acked, time.perf_counter() - t)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kilnd", required=True, help="the kilnd to measure")
    ap.add_argument("--kilnd-before", default="", help="an earlier kilnd (deferred), measured in the same run")
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
            kilnds.append(("before", args.kilnd_before, "deferred"))
        servers = []
        wait_for_socket(redis_sock, rp, "redis-server")
        servers.append(Server("redis", "unix://" + redis_sock))
        for name, binary, durability in kilnds:
            d = os.path.join(work, name)
            os.mkdir(d)
            sock = os.path.join(d, "torch.sock")
            with open(os.path.join(d, "kilnd.toml"), "w") as f:
                # No builds: this measures serving, and a build worker's probe at start
                # (seconds on a GPU node) would only delay it.
                f.write('log_level = "warn"\n[builds]\nenabled = false\n[torch_cache]\nsocket = "%s"\n'
                        'durability = "%s"\n' % (sock, durability))
            kp = subprocess.Popen([binary, "--config", os.path.join(d, "kilnd.toml"), "--socket",
                                   os.path.join(d, "kiln.sock"), "--store", os.path.join(d, "store")],
                                  stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "kilnd.log"), "w"))
            procs.append(kp)
            wait_for_socket(sock, kp, name)
            servers.append(Server(name, "unix://" + sock, os.path.join(d, "kiln.sock")))
        redis_version = subprocess.run([args.redis_server, "--version"], capture_output=True, text=True).stdout.split()
        rows = [(label, n, measure(servers, kilnctl, size, n)) for label, size, n in SIZES]
        bursts = burst(servers, kilnctl)

        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        print("# kilnd torch cache (Redis protocol) beside redis-server\n")
        print("%s; %s; %d CPUs; Linux %s; load average %.1f at the end" % (
            now, args.machine or platform.processor() or platform.machine(), os.cpu_count(), platform.release(),
            os.getloadavg()[0]))
        print("Client: redis-py %s, one request at a time, over Unix sockets. redis-server %s "
              "--save '' --appendonly no. kilnd: default settings but the [torch_cache] socket and its "
              "durability: `sync` (SET durable, fsynced, before +OK; the default), `deferred` (+OK once "
              "queued in memory; deferred_max_bytes 256 MiB). Servers take turns, %d rounds each; a "
              "deferred kilnd's queue is waited out after its turn (not timed). SET: new keys. GET: "
              "hits, after one untimed pass.\n" % (redis.__version__, " ".join(redis_version[2:3]), ROUNDS))
        names = [s.name for s in servers[1:]]
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
        print("\nBurst: %d SETs of 10 MB (%d MB) back to back, seconds to the last +OK / until stored:\n"
              % (BURST, BURST * 10))
        print("| " + " | ".join(s.name for s in servers) + " |")
        print("|" + "---|" * len(servers))
        print("| " + " | ".join("%.2f / %.2f" % bursts[s.name] if s.kiln_sock else "%.2f / (memory only)" %
                                bursts[s.name][0] for s in servers) + " |")
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
