"""torch.compile's caches across the fleet, on the real diffusers FLUX transformer: process 1
compiles the repeated blocks cold against node A's kilnd; once A has signed and pushed the
entries to the registry, process 2 runs against node B's kilnd (EMPTY store, another node's
view) with an EMPTY local Inductor cache, and warm-starts from the registry; process 3
runs against B again (B's store now holds the entries) with another empty local cache.
Each row a fresh process; hits counted by torch's own counters, lookups by B's metrics.

    python3 tests/gpu/torch_cache_fleet.py OUT_DIR URL_A URL_B KILNCTL SOCKET_A METRICS_B
"""
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_cache_flux import REMOTE  # noqa: E402


def fleet_of(kilnctl, socket):
    out = subprocess.run([kilnctl, "--socket", socket, "--json", "status"], capture_output=True, text=True)
    return json.loads(out.stdout).get("fleet") or {}


def lookups(metrics_url):
    page = urllib.request.urlopen(metrics_url).read().decode()
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r'kiln_torch_cache_fleet_lookups_total\{outcome="(\w+)"\} (\d+)', page)}


def main():
    out, url_a, url_b, kilnctl, sock_a, metrics_b = sys.argv[1:7]
    os.makedirs(out, exist_ok=True)
    flux = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_cache_flux.py")
    rows = []
    for mode, url, cache in (("node A, cold (kilnd A as torch's remote cache)", url_a, "cache-1"),
                             ("node B, EMPTY store and local cache: from the registry", url_b, "cache-2"),
                             ("node B again, EMPTY local cache: B's store", url_b, "cache-3")):
        path = os.path.join(out, f"fleet-{len(rows)}.json")
        env = dict(os.environ, **REMOTE, TORCHINDUCTOR_REDIS_URL=url, TORCHINDUCTOR_CACHE_DIR=os.path.join(out, cache))
        before = lookups(metrics_b)
        p = subprocess.run([sys.executable, flux, "child", mode, path], env=env)
        row = json.load(open(path)) if p.returncode == 0 else {"mode": mode, "returncode": p.returncode}
        after = lookups(metrics_b)
        row["b_lookups"] = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        rows.append(row)
        if len(rows) == 1:  # A's entries in the registry before B is asked
            t = time.monotonic()
            while True:
                f = fleet_of(kilnctl, sock_a)
                if f.get("pending_pushes", 1) == 0 and f.get("pushes", 0) > 0:
                    break
                if time.monotonic() - t > 120:
                    print("A's pushes did not drain:", f)
                    break
                time.sleep(0.5)
            row["pushed_s"] = time.monotonic() - t
            row["a_fleet"] = {k: f.get(k) for k in ("pushes", "bytes_pushed", "pending_pushes", "failing_pushes")}
    json.dump(rows, open(os.path.join(out, "torch-cache-fleet.json"), "w"), indent=1)
    print("| process | TTR s | first call s | FX graph hits / misses | AOTAutograd hits | B's registry lookups |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r.get('ttr_s', float('nan')):.1f} | {r.get('first_call_s', float('nan')):.2f} | "
              f"{r.get('fxgraph_cache_hit')} / {r.get('fxgraph_cache_miss')} | {r.get('aotautograd_cache_hit')} | "
              f"{r.get('b_lookups')} |")
    print("A's pushes:", rows[0].get("a_fleet"), f"drained {rows[0].get('pushed_s', 0):.1f} s after process 1")


if __name__ == "__main__":
    main()
