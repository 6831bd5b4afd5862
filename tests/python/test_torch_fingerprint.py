"""The fingerprint (schema/python-fingerprint.md): equal for what must share a graph
(another instance, other weights, another process), different for anything a graph
depends on (shapes, constants baked in, attributes such as eps, train/eval, call
structure, strides, dtypes, code)."""
import copy
import json
import os
import subprocess
import sys

import pytest

import torch  # noqa: E402  (the pinned environment has it: tests/python-requirements.txt)

from kiln.torch import _fingerprint  # noqa: E402
from kiln.torch._signature import capture  # noqa: E402

CPU = torch.device("cpu")


class Block(torch.nn.Module):
    def __init__(self, dim=8, eps=1e-6):
        super().__init__()
        self.norm = torch.nn.LayerNorm(dim, eps=eps)
        self.proj = torch.nn.Linear(dim, dim)
        self.register_buffer("scale", torch.ones(dim))
        self.register_buffer("table", torch.arange(dim, dtype=torch.float32), persistent=False)

    def forward(self, hidden_states, temb=None, extra=None):
        x = self.proj(self.norm(hidden_states)) * self.scale + self.table
        return (x if temb is None else x + temb,)


def fp(block, *args, **kwargs):
    return _fingerprint.fingerprint(block, capture(args, kwargs), CPU)


def x(*shape):
    return torch.randn(*shape)


def test_same_for_other_instances_and_other_weights():
    a, b = Block(), Block()
    with torch.no_grad():
        b.proj.weight.mul_(3)
        b.scale.mul_(2)  # a persistent buffer is a weight: attached at load time
    assert fp(a, x(1, 4, 8)) == fp(b, x(1, 4, 8))
    assert len(fp(a, x(1, 4, 8))) == 64


def test_different_for_what_the_graph_depends_on():
    base = fp(Block(), x(1, 4, 8))
    baked = Block()
    baked.table.add_(1)  # non-persistent: baked into the graph as a constant
    trained = Block().train(True)
    trained.training = True
    evaled = Block().eval()
    others = [fp(Block(dim=16), x(1, 4, 16)), fp(Block(eps=1e-5), x(1, 4, 8)), fp(baked, x(1, 4, 8)),
              fp(Block(), x(1, 5, 8)), fp(Block(), x(1, 4, 8).double()), fp(Block(), x(1, 8, 4).transpose(1, 2)),
              fp(Block(), x(1, 4, 8), temb=x(1, 1, 8)), fp(Block(), x(1, 4, 8), extra=None),
              fp(Block(), hidden_states=x(1, 4, 8)), fp(Block().to(torch.float64), x(1, 4, 8))]
    assert base not in others and len(set(others)) == len(others)
    assert fp(trained, x(1, 4, 8)) != fp(evaled, x(1, 4, 8))


def test_a_size_one_dimension_stride_does_not_split_a_fingerprint():
    # diffusers' FLUX: the first single-stream block gets fresh tensors, the others slices
    # of a concatenation (batch stride 6*8 against 4*8 here). One graph serves both.
    whole = x(1, 6, 8)
    sliced = whole[:, 2:]
    assert sliced.stride() == (48, 8, 1)
    fresh = sliced.contiguous()
    assert fp(Block(), sliced) == fp(Block(), fresh)
    sig = capture((sliced,), {"temb": sliced, "extra": [sliced]})
    assert sig.guard == capture((fresh,), {"temb": fresh, "extra": [fresh]}).guard
    view = sig.args[0]
    assert view.stride() == (32, 8, 1) and view.data_ptr() == sliced.data_ptr() and torch.equal(view, sliced)
    assert sig.kwargs["temb"].stride() == (32, 8, 1) and sig.kwargs["extra"][0].stride() == (32, 8, 1)
    assert list(sig.kwargs) == ["temb", "extra"]  # the caller's order, for the block
    # A real stride difference still splits it.
    assert fp(Block(), x(1, 8, 4).transpose(1, 2)) != fp(Block(), x(1, 4, 8))


def test_an_attribute_object_of_another_class_changes_it():
    class ProcA:
        def __call__(self, x):
            return x

    class ProcB(ProcA):
        pass

    a, b = Block(), Block()
    a.processor, b.processor = ProcA(), ProcB()
    assert fp(a, x(1, 4, 8)) != fp(b, x(1, 4, 8))
    c = Block()
    c.processor = ProcA()
    assert fp(a, x(1, 4, 8)) == fp(c, x(1, 4, 8))


def test_equal_in_another_process():
    here = fp(Block(), x(1, 4, 8))
    code = ("import sys, torch\nsys.path[:0] = sys.argv[1:3]\nimport test_torch_fingerprint as t\n"
            "print(t.fp(t.Block(), t.x(1, 4, 8)))\n")
    env = dict(os.environ, PYTHONHASHSEED="123")
    tests = os.path.dirname(os.path.abspath(__file__))
    pkg = os.path.join(tests, "..", "..", "client", "python")
    out = subprocess.run([sys.executable, "-c", code, tests, pkg], capture_output=True, text=True, env=env,
                         timeout=120, cwd=tests)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == here


def test_description_is_cached_per_instance_and_ignores_kiln_hooks():
    b = Block()
    first = fp(b, x(1, 4, 8))
    from kiln.torch import _hooks

    _hooks.install(b, lambda blk, orig, a, k: orig(*a, **k))
    try:
        assert fp(copy.copy(b), x(1, 4, 8)) == first
    finally:
        _hooks.remove(b)
    assert json.dumps(first)


def test_lora_blocks_of_one_class_share_a_fingerprint_and_a_scale_changes_it():
    """PEFT's tuner layers keep their module path (kwargs["target_name"]): that must not make
    each LoRA'd block its own fingerprint (one export per block, 57 in FLUX, found on the
    GPU), while what the graph bakes in (the scaling) must change it."""
    import diffusers
    from peft import LoraConfig

    torch.manual_seed(0)
    model = diffusers.FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=2,
                                             attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                             pooled_projection_dim=32, axes_dims_rope=(4, 6, 6))
    model.add_adapter(LoraConfig(r=4, target_modules=["to_q", "to_k", "to_v"]))
    a, b = model.single_transformer_blocks
    sig = capture((), {"hidden_states": torch.zeros(1, 8, 32), "temb": torch.zeros(1, 32)})
    device = torch.device("cpu")
    assert _fingerprint.fingerprint(a, sig, device) == _fingerprint.fingerprint(b, sig, device)
    before = _fingerprint.fingerprint(a, sig, device)
    a.attn.to_q.scaling["default"] = 0.5
    _fingerprint.forget(a)
    assert _fingerprint.fingerprint(a, sig, device) != before


# ---- one fingerprint, one graph: what the audit found sharing a fingerprint ----------------

def helper_scale(y):
    """A module-level function a block's forward reads as a global (replaced below)."""
    return y * 2


class GlobalReader(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, hidden_states):
        return helper_scale(self.proj(hidden_states))


class WithAttr(torch.nn.Module):
    """A block whose forward reads self.setting (any value the audit tried)."""

    def __init__(self, setting):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.setting = setting

    def forward(self, hidden_states):
        return self.proj(hidden_states)


def fresh_fp(block, *args, **kwargs):
    _fingerprint.forget(block)
    return fp(block, *args, **kwargs)


def test_attributes_are_described_by_what_they_compute_not_by_their_name():
    import functools

    import numpy as np
    import torch.nn.functional as F

    pairs = [
        (functools.partial(F.gelu, approximate="tanh"), functools.partial(F.gelu, approximate="none")),
        (lambda t: t * 2, lambda t: t * 3),  # same qualname "<lambda>", other code
        ({1, 2}, {1, 3}),
        (frozenset({"a"}), frozenset({"b"})),
        (np.float32(0.5), np.float32(0.25)),
        (np.int64(1), np.int32(1)),
        ({1: "a"}, {2: "a"}),  # a dict with int keys
        (b"\x00", b"\x01"),
        ((((((1,),),),),), (((((2,),),),),)),  # deep tuples
    ]
    for one, other in pairs:
        a, b = WithAttr(one), WithAttr(other)
        assert fp(a, x(1, 4, 8)) != fp(b, x(1, 4, 8)), (one, other)
    # Equal values, equal fingerprints (sets in any order, new but equal lambdas).
    assert fp(WithAttr({3, 1, 2}), x(1, 4, 8)) == fp(WithAttr({2, 3, 1}), x(1, 4, 8))
    assert fp(WithAttr(lambda t: t * 2), x(1, 4, 8)) == fp(WithAttr(lambda t: t * 2), x(1, 4, 8))


def test_a_closure_and_defaults_are_part_of_a_callables_description():
    def make(k):
        return lambda t: t * k

    def with_default(t, k=2):
        return t * k

    def with_other_default(t, k=3):
        return t * k

    with_other_default.__name__ = with_other_default.__qualname__ = "with_default"
    assert fp(WithAttr(make(2)), x(1, 4, 8)) != fp(WithAttr(make(3)), x(1, 4, 8))
    assert fp(WithAttr(with_default), x(1, 4, 8)) != fp(WithAttr(with_other_default), x(1, 4, 8))


def test_what_cannot_be_described_fails_closed_naming_where():
    class Holder:
        def __init__(self, t):
            self.t = t

    import threading

    for value, words in [(threading.Lock(), "lock"), (list(range(5000)), "5000 items"),
                         (Holder(torch.zeros(1 << 19)), "bytes held outside")]:
        with pytest.raises(_fingerprint.Undescribable) as got:
            fp(WithAttr(value), x(1, 4, 8))
        assert "WithAttr.setting" in str(got.value) and words in str(got.value).lower(), got.value
    nested = WithAttr(None)
    obj = nested
    for _ in range(5):  # objects inside objects deeper than the describer reads
        inner = type("Holder", (), {})()
        obj.setting = inner
        obj = inner
    obj.setting = 1
    with pytest.raises(_fingerprint.Undescribable):
        fp(nested, x(1, 4, 8))


def test_a_replaced_global_the_forward_reads_is_another_fingerprint_even_after_the_first_call():
    global helper_scale
    block = GlobalReader()
    before = fresh_fp(block, x(1, 4, 8))
    saved = helper_scale
    try:
        helper_scale = lambda y: y * 3  # noqa: E731  (a monkey-patch after the first fingerprint)
        assert _fingerprint.refresh() > 0 or True
        assert _fingerprint._describer.changed() is False  # refresh() took the change in
        assert fresh_fp(block, x(1, 4, 8)) != before
    finally:
        helper_scale = saved
    _fingerprint.refresh()
    assert fresh_fp(block, x(1, 4, 8)) == before


def test_a_monkey_patched_sdpa_and_a_patched_processor_call_change_it():
    """SageAttention-style: F.scaled_dot_product_attention replaced for the process; or an
    attention processor class's __call__ replaced. The code that runs is described, not
    the file it came from."""
    import torch.nn.functional as F
    from diffusers.models.attention_processor import Attention, AttnProcessor2_0

    class AttnBlock(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = Attention(query_dim=8, heads=2, dim_head=4, processor=AttnProcessor2_0())

        def forward(self, hidden_states):
            return self.attn(hidden_states)

    block = AttnBlock()
    base = fresh_fp(block, x(1, 4, 8))
    original = F.scaled_dot_product_attention
    try:
        F.scaled_dot_product_attention = lambda q, k, v, **kw: original(q, k, v, **kw) * 0.5
        _fingerprint.refresh()
        patched = fresh_fp(block, x(1, 4, 8))
    finally:
        F.scaled_dot_product_attention = original
    _fingerprint.refresh()
    assert patched != base and fresh_fp(block, x(1, 4, 8)) == base
    call = AttnProcessor2_0.__call__
    try:
        AttnProcessor2_0.__call__ = lambda self, attn, hidden_states, *a, **k: call(self, attn, hidden_states) * 2
        _fingerprint.refresh()
        assert fresh_fp(block, x(1, 4, 8)) not in (base, patched)
    finally:
        AttnProcessor2_0.__call__ = call
    _fingerprint.refresh()
    assert fresh_fp(block, x(1, 4, 8)) == base


def flux_single_block():
    from diffusers.models.transformers.transformer_flux import FluxSingleTransformerBlock

    torch.manual_seed(0)
    block = FluxSingleTransformerBlock(dim=32, num_attention_heads=2, attention_head_dim=16)
    sig = capture((), {"hidden_states": torch.zeros(1, 8, 32), "encoder_hidden_states": torch.zeros(1, 4, 32),
                       "temb": torch.zeros(1, 32)})
    return block, sig


def test_an_instance_forward_the_default_dtype_and_diffusers_attention_backend_enter_it():
    from diffusers.models.attention_dispatch import attention_backend

    block = GlobalReader()
    sig = capture((x(1, 4, 8),), {})
    base = _fingerprint.fingerprint(block, sig, CPU)
    doubled = _fingerprint.fingerprint(block, sig, CPU, forward=lambda h: GlobalReader.forward(block, h) * 2)
    halved = _fingerprint.fingerprint(block, sig, CPU, forward=lambda h: GlobalReader.forward(block, h) / 2)
    assert len({base, doubled, halved}) == 3
    saved = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        assert _fingerprint.fingerprint(block, sig, CPU) != base
    finally:
        torch.set_default_dtype(saved)
    # diffusers' global attention backend: read by the attention code a FLUX block reaches.
    flux, fsig = flux_single_block()
    _fingerprint.refresh()
    native = _fingerprint.fingerprint(flux, fsig, CPU)
    with attention_backend("_native_math"):
        _fingerprint.refresh()  # what kiln.torch does at every model call
        assert _fingerprint.fingerprint(flux, fsig, CPU) != native
    _fingerprint.refresh()
    assert _fingerprint.fingerprint(flux, fsig, CPU) == native


def test_a_diffusers_block_is_equal_in_a_process_that_imported_less():
    """Nothing of the process's own state (sys.modules, os.environ, what else is imported)
    may enter a fingerprint: found on the GPU, where a PEFT layer's code reading `sys` made
    sys.modules (4757 entries there) part of the description."""
    import peft  # noqa: F401  (more imported here than in the child)

    block, sig = flux_single_block()
    here = _fingerprint.fingerprint(block, sig, CPU)
    code = ("import sys, torch\nsys.path[:0] = sys.argv[1:3]\nimport test_torch_fingerprint as t\n"
            "b, s = t.flux_single_block()\nprint(t._fingerprint.fingerprint(b, s, t.CPU))\n")
    tests = os.path.dirname(os.path.abspath(__file__))
    pkg = os.path.join(tests, "..", "..", "client", "python")
    out = subprocess.run([sys.executable, "-c", code, tests, pkg], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONHASHSEED="7", SOME_VARIABLE="x"), timeout=300, cwd=tests)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == here


def test_autocast_is_refused_by_name():
    from kiln.torch import _state

    assert _state.autocast_problem() is None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert "autocast" in _state.autocast_problem()
