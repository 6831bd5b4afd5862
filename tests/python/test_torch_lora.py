"""A hit is never wrong under diffusers' LoRA API (issue "A hit is never wrong"): a small
diffusers FLUX transformer (tests/families, loaded as users load it) with a PEFT LoRA,
through kiln.torch against a real kilnd building with the real worker on the CPU. Every
call is compared with an eager twin that goes through the same state changes: LoRA at
scale 1, a per-call scale of 0.5 (joint_attention_kwargs, PEFT's scale_layer), fused,
unfused, disabled, unloaded. Each state is its own key (one build each, asked for once);
a state seen before hits without a build."""
import copy
import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "families"))

import kiln  # noqa: E402
import kiln.torch  # noqa: E402
from kilnd_proc import done_builds, running  # noqa: E402

BF16_TOLERANCE = 2e-2  # the worker's check for bfloat16
BUILD_WAIT_S = 1500
BLOCK = "FluxSingleTransformerBlock"  # one class: one build per state keeps the test short


def rel_err(a, b):
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with running(str(tmp_path_factory.mktemp("lora-node")), worker="real") as d:
        yield d


def with_lora(tmp_path):
    import families
    from peft import LoraConfig

    torch.set_num_threads(1)
    model = families.load_like_a_user("flux", str(tmp_path / "flux"), seed=0)
    model.add_adapter(LoraConfig(r=4, lora_alpha=4, target_modules=["to_q", "to_k", "to_v", "proj_out"]))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # PEFT starts lora_B at zero: a LoRA that changes nothing proves nothing
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_((torch.randn(p.shape, generator=g) * 0.5).to(p.dtype))
    return model, copy.deepcopy(model), families.FAMILIES["flux"].inputs(model, 0)


def test_lora_scaled_fused_disabled_and_unloaded_always_gives_eagers_output(node, tmp_path):
    model, twin, inputs = with_lora(tmp_path)
    kiln.torch.compile_repeated_blocks(model, block_classes=[BLOCK], socket=node.socket, on_miss="wait")

    def both(**extra):
        with torch.no_grad():
            want = twin(**{**inputs, **extra}, return_dict=False)[0]
            got = model(**{**inputs, **extra}, return_dict=False)[0]
        return rel_err(got, want)

    def compiled_calls():
        return sum(e["calls"]["compiled"] for e in kiln.torch.status(model))

    steps = [
        ("lora at scale 1", lambda m: None, {}),
        ("lora at scale 0.5 per call", lambda m: None, {"joint_attention_kwargs": {"scale": 0.5}}),
        ("fused", lambda m: m.fuse_lora(), {}),
        ("unfused", lambda m: m.unfuse_lora(), {}),
        ("disabled", lambda m: m.disable_lora(), {}),
        ("enabled again", lambda m: m.enable_lora(), {}),  # a state seen before: a hit, no build
        ("unloaded", lambda m: m.unload_lora(), {}),
    ]
    seen_builds = []
    for name, change, extra in steps:
        change(model)
        change(twin)
        first = both(**extra)   # on_miss="wait": a new state runs eager and waits for its build at the call's end
        before = compiled_calls()
        second = both(**extra)  # compiled
        assert compiled_calls() > before, (name, kiln.torch.status(model))
        assert first <= BF16_TOLERANCE and second <= BF16_TOLERANCE, (name, first, second)
        seen_builds.append((name, len(done_builds(node.socket))))
    failed = [e for e in kiln.torch.status(model) if e["state"] in ("failed", "unsupported")]
    assert not failed, failed
    counts = dict(seen_builds)
    # Each new state one build; the state seen before (enabled again = lora at scale 1) none.
    assert counts["lora at scale 1"] == 1
    assert counts["lora at scale 0.5 per call"] == 2
    assert counts["enabled again"] == counts["disabled"], seen_builds
    done = done_builds(node.socket)
    assert len(set(done)) == len(done)  # never a key built twice
    kiln.torch.restore(model)


def test_a_state_change_between_the_miss_and_its_export_is_never_filed_under_the_old_state(node, tmp_path):
    """on_miss="eager": the export runs at the start of the next model call, after the user
    changed the scale. The export sees another state than the call that missed and gives
    up ('stale'); the next call in that state asks again. Outputs stay eager's throughout."""
    model, twin, inputs = with_lora(tmp_path)
    kiln.torch.compile_repeated_blocks(model, block_classes=[BLOCK], socket=node.socket)
    for scale in (0.25, 0.75, 0.25, 0.75):
        extra = {"joint_attention_kwargs": {"scale": scale}}
        with torch.no_grad():
            assert rel_err(model(**{**inputs, **extra}, return_dict=False)[0],
                           twin(**{**inputs, **extra}, return_dict=False)[0]) <= BF16_TOLERANCE
    assert kiln.torch.wait(model, timeout=BUILD_WAIT_S)
    for scale in (0.25, 0.75):
        extra = {"joint_attention_kwargs": {"scale": scale}}
        with torch.no_grad():
            assert rel_err(model(**{**inputs, **extra}, return_dict=False)[0],
                           twin(**{**inputs, **extra}, return_dict=False)[0]) <= BF16_TOLERANCE
    assert not [e for e in kiln.torch.status(model) if e["state"] == "failed"], kiln.torch.status(model)
    kiln.torch.restore(model)
