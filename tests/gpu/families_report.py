"""The rows of tests/gpu/families_gpu.py -> tests/gpu/RESULTS-families.md.

    python3 tests/gpu/families_report.py ROWS_DIR [OUT.md] [--note TEXT]... [--notes-file FILE]

ROWS_DIR holds <mode>-<family>.json (and kilnd-builds.json, skipped-*.json), as
families_run.sh leaves them in WORK/rows and packs them into OUT_DIR/families-rows.tar.gz
(`tar -xzf families-rows.tar.gz rows` and point this at rows/). Prints the Markdown, and
writes it to OUT.md when given. --note adds a line under the header (how the run was split
over device calls, say); --notes-file appends FILE (Markdown: what the run showed) before
the list of failures.
"""
import datetime
import glob
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
FAMILIES = ["flux", "wan2.1", "qwen-image", "sd3.5-medium", "ltx-video", "hunyuan-video"]
TITLES = {"flux": "FLUX.1-dev", "wan2.1": "Wan 2.1 T2V 1.3B (from_pretrained, bf16 + fp32 modules)",
          "qwen-image": "Qwen-Image", "sd3.5-medium": "SD3.5-medium", "ltx-video": "LTX-Video 0.9",
          "hunyuan-video": "HunyuanVideo"}
NUMBERS = {1: "One", 2: "Two", 3: "Three", 4: "Four", 5: "Five", 6: "Six"}
PATHS = [("eager", "eager"), ("regional", "diffusers `compile_repeated_blocks()`, cold"),
         ("miss", "kiln miss, empty store"), ("hit", "kiln hit, fresh process")]


def f(v, fmt="{:.2f}"):
    return "—" if v is None else fmt.format(v)


def e(v):
    return "—" if v is None else f"{v:.2e}"


def load(rows_dir):
    rows = {}
    for p in glob.glob(os.path.join(rows_dir, "*-*.json")):
        name = os.path.basename(p)[:-5]
        if name.startswith(("kilnd-", "skipped-")):
            continue
        r = json.load(open(p))
        rows[(r.get("mode"), r.get("family"))] = r
    builds = None
    if os.path.exists(os.path.join(rows_dir, "kilnd-builds.json")):
        builds = json.load(open(os.path.join(rows_dir, "kilnd-builds.json")))
    skipped = []
    for p in sorted(glob.glob(os.path.join(rows_dir, "skipped-*.json"))):
        skipped += json.load(open(p))
    # a row left out by one call and run by a later one is not left out
    skipped = [x for x in skipped if (x.get("mode"), x.get("family")) not in rows]
    return rows, builds, skipped


def short_sig(sig, n=70):
    sig = sig or ""
    return sig if len(sig) <= n else sig[:n] + "…"


def states_text(r):
    st = r.get("status_after_wait") or r.get("status") or []
    if not st:
        return "—"
    by = {}
    for x in st:
        by.setdefault(x["state"], []).append(x)
    return ", ".join(f"{len(v)} {k}" for k, v in by.items())


def failed_details(r):
    """Failed / unsupported entries of a kiln row, with their detail verbatim."""
    out, seen = [], set()
    for x in (r.get("status_after_wait") or []) + (r.get("status") or []):
        if x["state"] in ("failed", "unsupported"):
            k = (x["region"], x.get("signature"), x["detail"])
            if k not in seen:
                seen.add(k)
                out.append(x)
    return out


def hit_times(r):
    """Per block class and signature: seconds from process start at which it turned hit."""
    out = {}
    for t in r.get("transitions") or []:
        if t["state"] in ("hit", "failed"):
            out[t.get("fingerprint") or (t["region"], t["signature"])] = (t["state"], t["t_s"])
    return out



def jit_section(rows, w):
    """The jit rows (on_miss="compile", forwards back to back): when compiled speed came
    (the first forward within 1.15 x the regional row's step) against regional's TTR, how
    many forwards ran slower before it, and when kiln's package took over."""
    jit = [(fam, rows[("jit", fam)]) for fam in FAMILIES if ("jit", fam) in rows]
    if not jit:
        return
    w('## on_miss="compile": torch.compile in the background, then kiln\'s package')
    w("")
    w("Forwards back to back from the first; no forward waits for a compiler. *Compiled speed at* = the "
      "end of the first forward within 1.15 × the regional row's step, seconds from process start "
      "(regional's own: its TTR, the end of its first call).")
    w("")
    w("| family | first call s | forwards before compiled speed (their median ms) | compiled speed at s "
      "| regional TTR s | ratio | compile ready at s | kiln package at s | jit-phase forward ms (median) |")
    w("|---|---|---|---|---|---|---|---|---|")
    for fam, r in jit:
        reg = rows.get(("regional", fam)) or {}
        calls = r.get("calls") or []
        limit = (reg.get("step_ms") or 0) * 1.15 / 1000
        fast = next((i for i, (_, d) in enumerate(calls) if limit and d <= limit), None)
        at = None if fast is None else calls[fast][0] + calls[fast][1]
        slow = sorted(d for _, d in calls[:fast if fast is not None else len(calls)])
        ready = next((t["t_s"] for t in r.get("transitions") or [] if "jit ready" in str(t.get("state"))), None)
        done = [d for t0, d in calls[fast:] if r.get("takeover_s") is None or t0 < r["takeover_s"]] if fast is not None else []
        done.sort()
        ratio = f"{at / reg['ttr_s']:.2f}×" if at is not None and reg.get("ttr_s") else "—"
        w(f"| {TITLES[fam]} | {f(r.get('first_call_s'), '{:.3f}')} | {len(slow) + 1 if calls else '—'} "
          f"({f(slow[len(slow) // 2] * 1000 if slow else None, '{:.1f}')}) | {f(at, '{:.1f}')} | "
          f"{f(reg.get('ttr_s'), '{:.1f}')} | {ratio} | {f(ready, '{:.1f}')} | {f(r.get('takeover_s'), '{:.1f}')} | "
          f"{f(done[len(done) // 2] * 1000 if done else None, '{:.1f}')} |")
    w("")

def variant_section(rows, w):
    """The variant rows (variants="auto"): each variant kilnd built in its idle time, its
    block's step against the default package's (kiln.torch's side-by-side timing), its error,
    what kiln.torch decided, and the model's step before and after against regional's."""
    var = [(fam, rows[("variant", fam)]) for fam in FAMILIES if ("variant", fam) in rows]
    if not var:
        return
    w('## variants="auto": faster packages built in kilnd\'s idle time')
    w("")
    w("A hit with `variants=\"auto\"`; kilnd builds each variant after the default package, "
      "`kiln.torch.wait(variants=True)` waits for the decision. *Block step* = kiln.torch's "
      "side-by-side timing of one block call, variant vs default package, same inputs; a variant "
      "serves only when it is faster by 3 % or more and within the default's error.")
    w("")
    w("| family | block class | variant | state | block step ms, variant / default (ratio) | error, variant "
      "| decided after s | model step ms: default → after (regional's) |")
    w("|---|---|---|---|---|---|---|---|")
    for fam, r in var:
        reg = rows.get(("regional", fam)) or {}
        model = (f"{f(r.get('step_ms_default'), '{:.1f}')} → {f(r.get('step_ms'), '{:.1f}')} "
                 f"({f(reg.get('step_ms'), '{:.1f}')})")
        if r.get("error"):
            w(f"| {TITLES[fam]} | — | — | row failed: `{str(r['error'])[:200]}` | | | | |")
            continue
        for v in r.get("variants") or []:
            st, ratio = v.get("step_s"), v.get("step_ratio")
            step = "—" if st is None else (f"{st * 1000:.2f} / {st / ratio * 1000:.2f} ({ratio:.3f}×)"
                                           if ratio else f"{st * 1000:.2f}")
            w(f"| {TITLES[fam]} | {v['region']} | `{json.dumps(v.get('compile_options'), sort_keys=True)}` | "
              f"{v.get('state')} | {step} | {e(v.get('rel_err'))} | {f(r.get('variant_wait_s'), '{:.0f}')} | {model} |")
    w("")


def report(rows_dir, notes=(), notes_file=None):
    rows, builds, skipped = load(rows_dir)
    fams = [fam for fam in FAMILIES if any(fa == fam for (_, fa) in rows)] or FAMILIES  # those the run has
    any_row = next((r for r in rows.values() if r.get("torch")), {})
    started = [r["started_unix"] for r in rows.values() if r.get("started_unix")]
    when = (datetime.datetime.fromtimestamp(min(started), datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
            + "–" + datetime.datetime.fromtimestamp(max(started), datetime.timezone.utc).strftime("%H:%M UTC")
            if started else "not run")
    L = []
    w = L.append
    w(f"# {NUMBERS.get(len(fams), len(fams))} diffusers families through kiln.torch on the GPU")
    w("")
    w(f"{when}, one {any_row.get('gpu', '?')} (the lent device), torch {any_row.get('torch', '?')}, diffusers "
      f"{any_row.get('diffusers', '?')} (the PyPI wheel, carried), Python {any_row.get('python', '?')}; kilnd built "
      "there from this tree, the real worker (`ops/workers/kiln_worker`), `builds_per_gpu = 4`, an empty store; "
      f"KILN_WORKER unset (kilnd hashes the sources itself); kiln from {any_row.get('kiln_commit') or '?'}. "
      "`tests/gpu/families_run.sh OUT` "
      "(tests/gpu/families_gpu.py: every row a fresh process).")
    w("")
    w("**Real widths, reduced depth, random weights** (real config values of each checkpoint's transformer; "
      "`torch.manual_seed(0)`; bf16, Wan loaded with `from_pretrained(folder, torch_dtype=torch.bfloat16)` so "
      "its `_keep_in_fp32_modules` stay fp32). Depth and input size per family:")
    w("")
    w("| family | checkpoint's config | blocks here (real) | input | params here |")
    w("|---|---|---|---|---|")
    import families_gpu_configs as cfg

    for fam in fams:
        g = cfg.FAMILIES[fam]
        p = next((r.get("params") for (m, fa), r in rows.items() if fa == fam and r.get("params")), None)
        dts = next((r.get("param_dtypes") for (m, fa), r in rows.items() if fa == fam and r.get("param_dtypes")), None)
        dtt = "" if not dts or len(dts) < 2 else " (" + ", ".join(f"{k} {v / 1e6:.1f} M" for k, v in dts.items()) + ")"
        w(f"| {TITLES[fam]} | {g.checkpoint} | {g.depth} ({g.real_depth}) | {g.size} | "
          f"{'—' if p is None else f'{p / 1e6:,.0f} M'}{dtt} |")
    w("")
    w("TTR = process start (before `import torch`) to the end of the first forward; step = median of 3 × 5 "
      "synced forwards after 3 warm-ups; error = relative L2 of the model output against the same process's eager "
      "output on the same inputs and weights (computed after the timed part, with the compiled forwards taken off "
      "again). \"Takes over\" = seconds from the miss process's start until `kiln.torch.status()` shows every "
      "block class and signature `hit` (the next call runs them all compiled). The "
      f"{sum(1 for (m, _) in rows if m == 'miss')} miss processes were "
      "started at once on the empty store, so kilnd built the families' blocks side by side, at most 4 at a time: "
      "a family's take-over includes waiting for other families' builds (the build table below separates queue and "
      "build time).")
    for n in notes:
        w("")
        w(n)
    w("")
    w("| family | path | TTR s | model built at s | first call s | step ms | error vs eager | takes over at s | "
      "kiln states |")
    w("|---|---|---|---|---|---|---|---|---|")
    for fam in fams:
        for mode, label in PATHS:
            r = rows.get((mode, fam))
            if r is None:
                w(f"| {TITLES[fam]} | {label} | not run | | | | | | |")
                continue
            if r.get("error") and r.get("first_call_s") is None:
                w(f"| {TITLES[fam]} | {label} | **failed**: `{r['error'][:200]}` | | | | | | |")
                continue
            if mode == "regional" and r.get("fullgraph") is False:
                label += " (fullgraph=False after fullgraph=True failed)"
            take = "—"
            if mode == "miss":
                if r.get("all_hit"):
                    take = f"**{f(r.get('takeover_s'), '{:.1f}')}**"
                elif r.get("takeover_timed_out"):
                    take = "not within the call"
                else:
                    take = "never (see below)"
            err = r.get("rel_err") if mode != "eager" else None
            w(f"| {TITLES[fam]} | {label} | {f(r.get('ttr_s'))} | {f(r.get('model_built_s'))} | "
              f"{f(r.get('first_call_s'), '{:.3f}')} | "
              f"{f(r.get('step_ms'), '{:.1f}')} | {e(err)} | {take} | "
              f"{states_text(r) if mode in ('miss', 'hit') else '—'} |")
    w("")

    # targets
    w("## Targets, per family")
    w("")
    w("| family | hit first call ≤ 0.5 s | hit TTR ≤ eager TTR | hit step ≤ 1.02 × regional's | "
      "hit error ≤ regional's | miss take-over vs regional cold |")
    w("|---|---|---|---|---|---|")
    for fam in fams:
        ea, rc, mi, hi = (rows.get((m, fam)) or {} for m in ("eager", "regional", "miss", "hit"))
        cells = []
        hit_ok = bool(hi.get("first_call_s") is not None and hi.get("states") and set(hi["states"]) == {"hit"})
        tag = "" if hit_ok or not hi else " (not every block hit)"
        v = hi.get("first_call_s")
        cells.append("not run" if v is None else f"{v:.3f} s: {'met' if v <= 0.5 and hit_ok else 'not met'}{tag}")
        a, b = hi.get("ttr_s"), ea.get("ttr_s")
        cells.append("not run" if a is None or b is None else
                     f"{a:.2f} vs {b:.2f} s: {'met' if a <= b and hit_ok else 'not met'}{tag}")
        a, b = hi.get("step_ms"), rc.get("step_ms")
        cells.append("not run" if a is None or b is None else
                     f"{a:.1f} vs {b:.1f} ms = {a / b:.3f}×: {'met' if a <= 1.02 * b and hit_ok else 'not met'}{tag}")
        a, b = hi.get("rel_err"), rc.get("rel_err")
        cells.append("not run" if a is None or b is None else
                     f"{a:.4e} vs {b:.4e}: {'met' if a <= b and hit_ok else 'not met'}{tag}")
        t, fc, ttr = mi.get("takeover_s"), rc.get("first_call_s"), rc.get("ttr_s")
        if mi and not mi.get("all_hit"):
            cells.append("no take-over: " + (states_text(mi) if mi else "not run"))
        elif t is None or fc is None:
            cells.append("not run")
        else:
            built = mi.get("model_built_s")
            since = f"; {t - built:.1f} s after its model was built: {(t - built) / fc:.1f}×" if built else ""
            cells.append(f"{t:.1f} s vs first call {fc:.1f} s = **{t / fc:.1f}×** (vs its TTR {ttr:.1f} s: "
                         f"{t / ttr:.1f}×{since})")
        w(f"| {TITLES[fam]} | " + " | ".join(cells) + " |")
    w("")

    # per block class: when each turned hit in the miss process
    w("## The miss processes: first call, and when each block class took over")
    w("")
    w("| family | first call s (eager's) | block class [signature] | state | at s from process start |")
    w("|---|---|---|---|---|")
    for fam in fams:
        mi, ea = rows.get(("miss", fam)), rows.get(("eager", fam)) or {}
        if not mi:
            continue
        ht = hit_times(mi)
        first = f"{f(mi.get('first_call_s'), '{:.3f}')} ({f(ea.get('first_call_s'), '{:.3f}')})"
        for x in mi.get("status_after_wait") or []:
            st, at = ht.get(x.get("fingerprint") or (x["region"], x["signature"]), (x["state"], None))
            w(f"| {TITLES[fam]} | {first} | {x['region']} [{short_sig(x['signature'])}] "
              f"(fp {(x.get('fingerprint') or '')[:8]}) | {x['state']} | "
              f"{f(at, '{:.1f}')} |")
            first = ""
    w("")

    jit_section(rows, w)
    variant_section(rows, w)

    # builds
    blist = (builds or {}).get("builds") or []
    if blist:
        names = {}
        for (m, fam), r in rows.items():
            for x in (r.get("status_after_wait") or []) + (r.get("status") or []):
                if x.get("key_digest"):
                    names[x["key_digest"]] = (fam, x["region"])
        t0 = min((b.get("queued_at") or b.get("started_at") or 0) for b in blist) or 0
        w("## kilnd's builds")
        w("")
        w("| family | block class | state | queued at s | waited s | built s | error |")
        w("|---|---|---|---|---|---|---|")
        for b in sorted(blist, key=lambda b: (b.get("queued_at") or 0, b.get("started_at") or 0)):
            fam, region = names.get(b.get("key_digest"), ("?", "?"))
            q, s, fin = b.get("queued_at") or 0, b.get("started_at") or 0, b.get("finished_at") or 0
            err = (b.get("error") or "").strip().splitlines()
            w(f"| {TITLES.get(fam, fam)} | {region} | {b.get('state')} | {q - t0 if q else '—'} | "
              f"{s - q if s and q else '—'} | {fin - s if fin and s else '—'} | "
              f"{('`' + err[-1][:300] + '`') if err else ''} |")
        w("")

    # failures, verbatim
    fails = []
    for fam in fams:
        for mode, label in PATHS:
            r = rows.get((mode, fam))
            if not r:
                continue
            if r.get("error"):
                fails.append(f"- {TITLES[fam]}, {label}: `{r['error'][:1500]}`")
                tail = (r.get("log_tail") or r.get("traceback") or "").strip().splitlines()[-6:]
                if tail:
                    fails.append("  ```\n" + "\n".join("  " + t for t in tail) + "\n  ```")
            if r.get("fullgraph_error"):
                fails.append(f"- {TITLES[fam]}, {label}, fullgraph=True: `{r['fullgraph_error'][-800:]}`")
            for x in failed_details(r):
                fails.append(f"- {TITLES[fam]}, {label}: {x['region']} [{short_sig(x.get('signature'), 200)}] "
                             f"**{x['state']}**: `{x['detail']}`")
            for d, rec in (r.get("failed_build_logs") or {}).items():
                lines = [t for t in str(rec.get("log") or rec.get("error") or "").strip().splitlines() if t.strip()]
                if lines:
                    fails.append(f"  build log of {d[:16]} (last lines):\n  ```\n" +
                                 "\n".join("  " + t[:400] for t in lines[-8:]) + "\n  ```")
    if notes_file:
        w(open(notes_file).read().rstrip())
        w("")
    if fails:
        w("## What failed, verbatim")
        w("")
        L.extend(fails)
        w("")
    if skipped:
        w("Left out for time: " + "; ".join(f"{s['mode']} {s['family']} ({s['why']})" for s in skipped))
        w("")
    return "\n".join(L)


def main():
    args = sys.argv[1:]
    notes, notes_file = [], None
    while "--note" in args:
        i = args.index("--note")
        notes.append(args[i + 1])
        del args[i:i + 2]
    if "--notes-file" in args:
        i = args.index("--notes-file")
        notes_file = args[i + 1]
        del args[i:i + 2]
    if not args:
        sys.exit(__doc__)
    text = report(args[0], notes, notes_file)
    print(text)
    if len(args) > 1:
        with open(args[1], "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
