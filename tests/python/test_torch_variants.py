"""Faster variants built in kilnd's idle time (issue "Misses that reach compiled speed",
"Faster packages later"), on the user's whole path: a real kilnd building with the real
worker on the CPU, kiln.torch on a small diffusers FLUX transformer loaded as users load it,
every call compared with an eager twin.

The variant here is coordinate-descent tuning, a real Inductor option and its own key (on
the CPU it changes no kernel, so which package is faster is the machine's noise): the
switch itself is driven both ways by the decision's threshold (_variants.MIN_GAIN), and
with the shipped threshold the decision is checked against the timing it reports."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "families"))

import kiln  # noqa: E402
import kiln.torch  # noqa: E402
from kiln.torch import _aoti, _variants  # noqa: E402
from kilnd_proc import done_builds  # noqa: E402
from test_torch_never_wrong import BF16_TOLERANCE, BLOCK, Twin, flux, node  # noqa: E402,F401

VARIANT = {"inductor": {"coordinate_descent_tuning": True}}


def entry_of(model):
    entries = [e for e in kiln.torch.status(model) if e["state"] == "hit"]
    assert len(entries) == 1, kiln.torch.status(model)
    return entries[0]


def serve_with_variant(node, model, twin, inputs):
    """compile_repeated_blocks with the variant; the default settled (built once, serving);
    then waits for the variant's decision. Returns (Twin, status entry)."""
    kiln.torch.compile_repeated_blocks(model, block_classes=[BLOCK], socket=node.socket, on_miss="wait",
                                       variants=[VARIANT])
    t = Twin(model, twin, inputs)
    t.settle("default")
    assert kiln.torch.wait(model, timeout=900, variants=True), kiln.torch.status(model)
    return t, entry_of(model)


def test_the_decision_and_the_variant_key():
    check = {"rel_err": 1e-3, "tolerance": 2e-2, "step_s": 1e-3}
    assert _variants.choose(check, dict(check, rel_err=1.2e-3), 0.8)[0]
    slower = _variants.choose(check, check, 0.99)
    assert not slower[0] and "not faster" in slower[1]
    worse = _variants.choose(check, dict(check, rel_err=5e-3), 0.5)
    assert not worse[0] and "exceeds the default's" in worse[1]
    unknown = _variants.choose(None, check, 0.5)
    assert not unknown[0] and "records no check" in unknown[1]
    key = {"kind": "aoti", "compile_options": {"mode": "default", "inductor": {"a": 1}, "numerics": {"x": 1}}}
    got = _variants.variant_key(key, {"mode": "max-autotune-no-cudagraphs", "inductor": {"b": True}})
    assert got["compile_options"] == {"mode": "max-autotune-no-cudagraphs", "inductor": {"a": 1, "b": True},
                                      "numerics": {"x": 1}}
    assert key["compile_options"]["inductor"] == {"a": 1}  # the default's key is untouched
    assert _variants.resolve("auto", "cpu") == [] and _variants.resolve("auto", "cuda")
    for bad in ("fast", [{}], [{"dynamic": True}], {"mode": "max-autotune"}):
        with pytest.raises(ValueError):
            _variants.resolve(bad, "cuda")


def test_an_idle_build_is_never_waited_for(node):
    with kiln.Client(node.socket) as c:
        with pytest.raises(ValueError):
            c.build({"kind": "aoti"}, wait=True, idle=True)
        with pytest.raises(kiln.errors.InvalidArgument) as refused:
            c.request("BUILD", {"key": {"kind": "aoti", "model_hash": "0" * 64, "region": "R", "gpu_arch": "cpu",
                                        "dtype": "float32", "inputs": []}, "wait": True, "idle": True})
        assert "idle" in refused.value.message


def test_a_variant_serves_only_when_it_wins_and_outputs_stay_eager(node, flux, monkeypatch):
    model, twin, inputs = flux
    # Every variant wins: it must take over between two calls and compute what eager does.
    monkeypatch.setattr(_variants, "MIN_GAIN", 1e9)
    builds = len(done_builds(node.socket))
    t, e = serve_with_variant(node, model, twin, inputs)
    [v] = e["variants"]
    assert v["state"] == "serving", e
    assert v["key_digest"] != e["key_digest"] and v["step_ratio"] > 0 and v["step_s"] > 0, v
    done = done_builds(node.socket)
    assert len(done) >= builds + 1 and v["key_digest"] in done
    before = t.compiled()
    for _ in range(2):
        assert t.err() <= BF16_TOLERANCE
    assert t.compiled() > before
    # The package's own check travelled with it: error, tolerance, step, options.
    runtime_entry = next(iter(getattr(model, kiln.torch._STATE_ATTR).runtime.entries.values()))
    check = _aoti.read_check(runtime_entry.artifact.path)
    assert check["step_s"] > 0 and check["rel_err"] <= check["tolerance"]
    assert check["compile_options"]["inductor"] == VARIANT["inductor"]
    assert runtime_entry.variant == VARIANT and runtime_entry.check["step_s"] > 0
    kiln.torch.restore(model)

    # No variant wins: the default stays; the variant was built already, so no build.
    monkeypatch.setattr(_variants, "MIN_GAIN", 0.0)
    builds = len(done_builds(node.socket))
    t, e = serve_with_variant(node, model, twin, inputs)
    [v] = e["variants"]
    assert v["state"] == "kept default" and "not faster" in v["detail"], v
    assert len(done_builds(node.socket)) == builds
    assert t.err() <= BF16_TOLERANCE
    kiln.torch.restore(model)


def test_with_the_shipped_threshold_the_decision_follows_the_timing(node, flux):
    model, twin, inputs = flux
    t, e = serve_with_variant(node, model, twin, inputs)
    [v] = e["variants"]
    assert v["state"] in ("serving", "kept default"), v
    default_check = next(iter(getattr(model, kiln.torch._STATE_ATTR).runtime.entries.values())).check
    take, why = _variants.choose(default_check, {"rel_err": v["rel_err"]}, v["step_ratio"])
    assert (v["state"] == "serving") == take and v["detail"] == why, (v, default_check)
    assert t.err() <= BF16_TOLERANCE
    kiln.torch.restore(model)
