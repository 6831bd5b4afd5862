"""Faster variants of a package, built in kilnd's idle time (compile_repeated_blocks(
variants=...)).

Once a block's default package serves (the entry is `hit`), kiln.torch asks kilnd for each
variant's key — the same key with more compile options (max-autotune GEMM templates,
coordinate-descent tuning) — as an idle build (BUILD "idle": started only on a build slot
that runs nothing else, set aside whenever another build needs it). A variant is its own
key, so one built for another GPU or toolchain is never served here.

When a variant lands, this process loads it and times it against the package it serves,
side by side: the two run in turns (ROUNDS rounds, each run synchronised) on zeros of the
default's recorded input layout (_layouts.py) with the block's own weights, and the ratio of
their medians is the variant's step against the default's (noise hits both alike; a ratio
taken from two builds' own timings, at other times and loads, would not be). The entry
switches to the variant (between two block calls, as a hit takes over) only when:

  - the ratio is at most MIN_GAIN (3% faster or better), and
  - the variant's checked error (its package's kiln/check.json, written by the build
    worker) is within the default's: at most ERR_SLACK times the default's error plus
    ERR_FLOOR of the tolerance (both passed the worker's tolerance already).

Otherwise the default stays, and status() says why. Everything here runs in a background
thread of the runtime ("kiln-variant"); a failure only leaves the default serving.
"""
import copy
import statistics
import time

# compile_repeated_blocks(variants="auto"): what is tried per device type.
AUTO = {
    "cuda": [{"mode": "max-autotune-no-cudagraphs", "inductor": {"coordinate_descent_tuning": True}}],
    "cpu": [],
}
MIN_GAIN = 0.97
ERR_SLACK = 1.5
ERR_FLOOR = 0.01
ROUNDS = 20
TIMING_BUDGET_S = 2.0


def resolve(variants, device_type):
    """The list of variant compile options for `variants` as compile_repeated_blocks takes
    it: None or [] (none), "auto" (AUTO for the device type), or a list of option dicts
    ({"mode": ..., "inductor": {...}}). ValueError for anything else."""
    if variants is None:
        return []
    if variants == "auto":
        return copy.deepcopy(AUTO.get(device_type, []))
    if isinstance(variants, (list, tuple)) and all(isinstance(v, dict) and v for v in variants):
        unknown = sorted({k for v in variants for k in v} - {"mode", "inductor"})
        if unknown:
            raise ValueError(f"a variant takes compile options \"mode\" and \"inductor\" only, not {unknown}")
        return copy.deepcopy(list(variants))
    raise ValueError('variants must be None, "auto" or a list of non-empty compile-option dicts')


def check_variants_arg(variants):
    """Validates compile_repeated_blocks' `variants` before anything is hooked."""
    resolve(variants, "cuda")


def variant_key(key, variant):
    """`key` (a default package's key, kiln.torch's dict) with `variant`'s compile options
    laid over its own: "mode" replaced, "inductor" merged, the numerics kept."""
    out = copy.deepcopy(key)
    options = dict(out.get("compile_options") or {})
    if "mode" in variant:
        options["mode"] = variant["mode"]
    if "inductor" in variant:
        options["inductor"] = {**(options.get("inductor") or {}), **variant["inductor"]}
    out["compile_options"] = options
    return out


def choose(default_check, variant_check, ratio):
    """(switch, why): whether a variant with `variant_check` (its kiln/check.json), timed at
    `ratio` of the default's step side by side, replaces the default with `default_check`."""
    if not variant_check or not default_check:
        which = "variant's" if not variant_check else "default's"
        return False, f"the {which} package records no check (kiln/check.json), so its error is unknown"
    try:
        v_err, d_err = float(variant_check["rel_err"]), float(default_check["rel_err"])
        tol = float(default_check["tolerance"])
    except (KeyError, TypeError, ValueError):
        return False, "a package's kiln/check.json lacks rel_err or tolerance"
    limit = ERR_SLACK * d_err + ERR_FLOOR * tol
    if v_err > limit:
        return False, f"its error {v_err:.2e} exceeds the default's {d_err:.2e} (at most {limit:.2e})"
    if ratio is None:
        return False, "not timed"
    if ratio > MIN_GAIN:
        return False, f"step {ratio:.3f}x the default's, not faster by {1 - MIN_GAIN:.0%}"
    return True, f"step {ratio:.3f}x the default's, error {v_err:.2e} (default's {d_err:.2e})"


def side_by_side(run_default, run_variant, sync):
    """The ratio of the medians of run_variant() and run_default(), run in turns (one
    untimed run each first; ROUNDS rounds, fewer when TIMING_BUDGET_S runs out, at least
    3), each run followed by sync()."""
    for run in (run_default, run_variant):
        run()
        sync()
    a, b, began = [], [], time.monotonic()
    while len(a) < ROUNDS and (len(a) < 3 or time.monotonic() - began < TIMING_BUDGET_S):
        for run, times in ((run_default, a), (run_variant, b)) if len(a) % 2 == 0 else \
                ((run_variant, b), (run_default, a)):
            t = time.perf_counter()
            run()
            sync()
            times.append(time.perf_counter() - t)
    return statistics.median(b) / max(statistics.median(a), 1e-9)
