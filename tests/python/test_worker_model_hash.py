"""The worker's model hash (ops/workers/kiln_worker/model_hash.py, schema/sources.md) on
FX graphs made by hand or by symbolic tracing (the rules, one at a time; exported blocks go
through it on every real-path test), Triton
kernels and torch's kernel side table stood in for by small objects. The hash must name
devices by type (never index), and user code (Triton kernels, custom ops' Python) by
content, never by process-local indexes. tests/gpu/model_hash_triton_check.py checks the
same on torch 2.11 with real Triton kernels."""
import os
import sys
import types

import pytest

import torch  # noqa: E402  (the pinned environment has it: tests/python-requirements.txt)
import torch.fx  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "ops", "workers", "kiln_worker"))
import model_hash  # noqa: E402


def describe_ones(device):
    """The description of `x + torch.ones(3, device=device)`, built as FX records it (the
    graph is not run: no GPU needed)."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    ones = g.call_function(torch.ones, (3,), {"device": device})
    g.output(g.call_function(torch.add, (x, ones)))
    return model_hash.graph_description(torch.fx.GraphModule(torch.nn.Module(), g))


def test_a_device_index_never_enters_the_graph_description_but_its_type_does():
    first = describe_ones("cuda:0")
    for dev in ("cuda:3", torch.device("cuda", 2), torch.device("cuda:0"), "cuda"):
        assert describe_ones(dev) == first, dev
    assert "cuda:" not in str(first) and "index" not in str(first)
    assert describe_ones("cpu") != first
    assert describe_ones(torch.device("cpu")) == describe_ones("cpu")


def test_an_operators_device_argument_given_as_text_is_hashed_by_type():
    op = torch.ops.aten.ones.default  # schema: (..., Device? device=None, ...)
    a, b = torch.fx.Graph(), torch.fx.Graph()
    for g, dev in ((a, "cuda:0"), (b, "cuda:5")):
        g.output(g.call_function(op, ([3],), {"device": dev}))
    da = model_hash.graph_description(torch.fx.GraphModule(torch.nn.Module(), a))
    db = model_hash.graph_description(torch.fx.GraphModule(torch.nn.Module(), b))
    assert da == db and "cuda:" not in str(da)
    # Positionally too, by the schema's position of `device`.
    to = torch.ops.aten.to.device  # (Tensor self, Device device, ScalarType dtype, ...)
    args, _ = model_hash.normalize_device_args(to, ("x", "cuda:4", torch.float32), {})
    assert args == ("x", torch.device("cuda:4"), torch.float32)
    assert model_hash._canon(args[1], {}) == {"device": "cuda"}


class FakeJIT:
    """Stands in for triton.JITFunction: `src`, `arg_names`, `fn`."""

    def __init__(self, fn, src):
        self.fn, self.src, self.arg_names = fn, src, ["x_ptr", "BLOCK"]


class FakeAutotuner:
    def __init__(self, fn, configs):
        self.fn, self.configs = fn, configs


class FakeConfig:
    def __init__(self, **kw):
        self.kw = kw

    def all_kwargs(self):
        return self.kw


def relu_kernel(x_ptr, BLOCK):  # noqa: N803 - the shape of a triton kernel
    pass


def gelu_kernel(x_ptr, BLOCK):  # noqa: N803
    pass


RELU = FakeJIT(relu_kernel, "def relu_kernel(x_ptr, BLOCK):\n    tl.store(x_ptr, tl.maximum(tl.load(x_ptr), 0))\n")
GELU = FakeJIT(gelu_kernel, "def gelu_kernel(x_ptr, BLOCK):\n    tl.store(x_ptr, gelu(tl.load(x_ptr)))\n")


def test_triton_kernels_are_described_by_their_source_and_tuning():
    a = model_hash.triton_kernel_description(RELU)
    assert a == model_hash.triton_kernel_description(FakeJIT(relu_kernel, RELU.src))  # another object, same code
    assert a != model_hash.triton_kernel_description(GELU)
    tuned = model_hash.triton_kernel_description(FakeAutotuner(RELU, [FakeConfig(BLOCK=128)]))
    assert tuned["source_sha256"] == a["source_sha256"]
    assert tuned != model_hash.triton_kernel_description(FakeAutotuner(RELU, [FakeConfig(BLOCK=256)]))
    assert "0x" not in str(a)


def triton_wrapper_functional(**kwargs):
    """Stands in for torch.ops.higher_order.triton_kernel_wrapper_functional (by name)."""


@pytest.fixture
def side_table(monkeypatch):
    """torch's kernel side table (torch._higher_order_ops.triton_kernel_wrap), stood in for."""
    table = types.SimpleNamespace(kernels={}, constants={})
    table.get_kernel = lambda i: table.kernels[i]
    table.get_constant_args = lambda i: table.constants[i]
    mod = types.ModuleType("torch._higher_order_ops.triton_kernel_wrap")
    mod.kernel_side_table = table
    monkeypatch.setitem(sys.modules, "torch._higher_order_ops", types.ModuleType("torch._higher_order_ops"))
    monkeypatch.setitem(sys.modules, "torch._higher_order_ops.triton_kernel_wrap", mod)
    return table


def triton_graph(kernel_idx, constant_args_idx):
    g = torch.fx.Graph()
    x = g.placeholder("x")
    triton_wrapper_functional.__name__ = "triton_kernel_wrapper_functional"
    out = g.call_function(triton_wrapper_functional, (), {
        "kernel_idx": kernel_idx, "constant_args_idx": constant_args_idx, "grid": [(4, 1, 1)],
        "tma_descriptor_metadata": {}, "kwargs": {"x_ptr": x}, "tensors_to_clone": ["x_ptr"]})
    g.output(out)
    return model_hash.graph_description(torch.fx.GraphModule(torch.nn.Module(), g))


def test_a_triton_call_is_hashed_by_the_kernel_it_runs_never_by_side_table_index(side_table):
    side_table.kernels.update({0: RELU, 7: RELU, 1: GELU})
    side_table.constants.update({0: {"BLOCK": 128}, 9: {"BLOCK": 128}, 1: {"BLOCK": 256}})
    first = triton_graph(0, 0)
    # The same kernel exported again in the process: new indexes, the same description.
    assert triton_graph(7, 9) == first
    # Another kernel, or other constant arguments: another description.
    assert triton_graph(1, 0) != first
    assert triton_graph(0, 1) != first
    assert "kernel_idx" in str(first) and "triton_kernel" in str(first)


def launch_relu(x):
    RELU_GLOBAL[(1,)](x, 128)


def launch_gelu(x):
    GELU_GLOBAL[(1,)](x, 128)


RELU_GLOBAL, GELU_GLOBAL = RELU, GELU


def test_a_python_implementation_is_described_with_the_triton_kernels_it_calls():
    a = model_hash.function_description(launch_relu)
    b = model_hash.function_description(launch_gelu)
    assert a["triton_kernels"] == [model_hash.triton_kernel_description(RELU)]
    assert b["triton_kernels"] == [model_hash.triton_kernel_description(GELU)]
    assert a != b

    def wrapper(*args):  # torch.library.triton_op's backend closes over the user's function
        return fn(*args)

    fn = launch_relu
    assert model_hash.function_description(wrapper)["calls"] == [a]


def test_torch_operators_and_plain_callables_carry_no_implementation():
    assert model_hash.custom_op_description(torch.ops.aten.relu.default) is None
    import operator

    assert model_hash.custom_op_description(operator.getitem) is None
