"""Where a build stands in kilnd's queue, for kiln.torch.status() (on_miss="eager" and
"compile" users see how long their blocks stay eager or JIT-compiled).

Computed on the client from BUILD_STATUS with no filter (every build kilnd knows of, with
its state and unix-second times: schema/protocol.md), so it needs nothing of kilnd beyond
what any reader may ask.
"""
import statistics


def estimate(builds, key_digest, now, concurrency=1):
    """{"position": builds queued ahead of `key_digest`'s (0 when it runs), "expected_s":
    seconds until it lands, or None without history} for the newest queued or running build
    of `key_digest` in `builds` (BUILD_STATUS's list); None when it has none.

    expected_s is the median duration of the builds kilnd finished (its own node's history:
    block builds of one model take alike long), less what a running build already ran,
    times the rounds of `concurrency` (kilnd's builds at once) the queue ahead takes."""
    mine = [b for b in builds if b.get("key_digest") == key_digest and b.get("state") in ("queued", "running")]
    if not mine:
        return None
    me = max(mine, key=lambda b: b.get("queued_at", 0))
    durations = [b["finished_at"] - b["started_at"] for b in builds
                 if b.get("state") == "done" and "started_at" in b and "finished_at" in b]
    typical = statistics.median(durations) if durations else None
    if me["state"] == "running":
        left = None if typical is None else max(0.0, typical - (now - me.get("started_at", now)))
        return {"position": 0, "expected_s": left}
    ahead = sum(1 for b in builds if b.get("state") == "queued" and b is not me
                and b.get("queued_at", 0) <= me.get("queued_at", 0))
    running = sum(1 for b in builds if b.get("state") == "running")
    if typical is None:
        return {"position": ahead, "expected_s": None}
    rounds = (ahead + running) // max(1, concurrency) + 1
    return {"position": ahead, "expected_s": float(rounds * typical)}
