"""kiln.torch's key builder against the format-2 spec (notes KEY-CALL; schema/key.md): the
`call` field, the canonical order of tensor leaves, numerics in compile_options, node
fields from this process. Unit tests: no daemon."""
import os
import platform
import sys

import pytest

import torch  # noqa: E402  (the pinned environment has it: tests/python-requirements.txt)

import kiln  # noqa: E402
from kiln.torch import _keys, _node  # noqa: E402
from kiln.torch._signature import Unsupported, canonical_json, capture  # noqa: E402

H = "ab" * 32


def diffusers_call():
    """The call diffusers makes to a FLUX double-stream block (DESIGN.md, facts)."""
    hs, ehs, temb = torch.zeros(1, 16, 8), torch.zeros(1, 4, 8), torch.zeros(1, 8)
    cos, sin = torch.zeros(20, 4), torch.ones(20, 4)
    kwargs = dict(hidden_states=hs, encoder_hidden_states=ehs, temb=temb, image_rotary_emb=(cos, sin),
                  joint_attention_kwargs=None)
    return kwargs, [ehs, hs, cos, sin, temb]


def test_call_numbers_tensor_leaves_args_first_then_kwargs_sorted_depth_first():
    kwargs, order = diffusers_call()
    sig = capture((), kwargs)
    assert canonical_json(sig.call) == (
        '{"args":[],"kwargs":{"encoder_hidden_states":{"tensor":0},"hidden_states":{"tensor":1},'
        '"image_rotary_emb":{"tuple":[{"tensor":2},{"tensor":3}]},"joint_attention_kwargs":{"const":null},'
        '"temb":{"tensor":4}}}')
    assert all(a is b for a, b in zip(sig.tensors, order)) and len(sig.tensors) == 5
    assert sig.inputs()[0] == {"shape": [1, 4, 8], "dtype": "float32", "layout": "strided"}


def test_positional_lists_dicts_and_constants():
    t = [torch.zeros(2) for _ in range(4)]
    sig = capture((t[0], [t[1], 3, "s"]), {"z": {"b": t[3], "a": t[2]}, "f": 0.5, "flag": True})
    assert sig.call == {
        "args": [{"tensor": 0}, {"list": [{"tensor": 1}, {"const": 3}, {"const": "s"}]}],
        "kwargs": {"f": {"const": {"float": "0.5"}}, "flag": {"const": True},
                   "z": {"dict": {"a": {"tensor": 2}, "b": {"tensor": 3}}}}}
    assert [id(x) for x in sig.tensors] == [id(t[0]), id(t[1]), id(t[2]), id(t[3])]


def test_a_call_that_differs_in_structure_or_constants_has_another_guard():
    kwargs, _ = diffusers_call()
    base = capture((), kwargs).guard
    variants = [dict(kwargs, joint_attention_kwargs={"scale": 1.0}),
                dict(kwargs, image_rotary_emb=list(kwargs["image_rotary_emb"])),
                {k: v for k, v in kwargs.items() if k != "joint_attention_kwargs"},
                dict(kwargs, hidden_states=torch.zeros(1, 32, 8)),
                dict(kwargs, hidden_states=torch.zeros(1, 16, 8, dtype=torch.float64)),
                dict(kwargs, hidden_states=torch.zeros(1, 8, 16).transpose(1, 2))]  # same shape, other strides
    guards = {capture((), v).guard for v in variants}
    assert base not in guards and len(guards) == len(variants)
    assert capture((), dict(kwargs)).guard == base


def test_objects_in_a_call_are_unsupported():
    class Thing:
        pass

    for bad in [Thing(), {1: torch.zeros(1)}, torch.Size([1])]:
        with pytest.raises(Unsupported):
            capture((bad,), {})
    with pytest.raises(Unsupported):
        capture((1 << 64,), {})
    with pytest.raises(Unsupported):
        capture((), {"text": "x" * 70000})
    deep = torch.zeros(1)
    for _ in range(40):
        deep = (deep,)
    with pytest.raises(Unsupported):
        capture((deep,), {})


def test_key_is_format_2_with_call_numerics_and_this_process_node_fields():
    kwargs, _ = diffusers_call()
    sig = capture((), kwargs)
    key = _keys.build_key(H, "FluxTransformerBlock", "bfloat16", sig, torch.device("cpu"), {"mode": "default"})
    assert key["format_version"] == 2 and key["kind"] == "aoti" and key["model_hash"] == H
    assert key["call"] == sig.call and key["inputs"] == sig.inputs()
    assert key["compile_options"] == {"mode": "default", "numerics": {
        "deterministic": False, "float32_matmul_precision": "highest", "cudnn_allow_tf32": True,
        "bf16_reduced_precision_reduction": True, "fp16_reduced_precision_reduction": True}}
    assert key["torch_version"] == torch.__version__ and key["torch_git"] == torch.version.git_version
    assert key["cuda_version"] == (torch.version.cuda or "none")
    assert key["platform"] == sys.platform and key["machine"] == platform.machine()
    assert key["gpu_arch"] == "cpu" and key["gpu_name"] == "cpu"
    assert "cpu_isa" not in key  # kilnd on this host fills it (schema/python-fingerprint.md)
    assert list(key) == ["kind", "model_hash", "region", "gpu_arch", "gpu_name", "torch_version", "torch_git",
                         "cuda_version", "triton_version", "platform", "machine", "dtype", "inputs", "call",
                         "compile_options", "format_version"]


def test_numerics_follow_the_process_flags():
    before = _node.numerics()
    torch.set_float32_matmul_precision("high")
    try:
        assert _node.numerics() == dict(before, float32_matmul_precision="high")
    finally:
        torch.set_float32_matmul_precision("highest")
    torch.use_deterministic_algorithms(True)
    try:
        assert _node.numerics()["deterministic"] is True
    finally:
        torch.use_deterministic_algorithms(False)


def test_wire_form_for_a_format_1_libkiln_drops_only_call_and_format_version():
    sig = capture((torch.zeros(2, 3),), {})
    key = _keys.build_key(H, "Block", "float32", sig, torch.device("cpu"))
    wire = _keys.to_wire(key, call_supported=False)
    assert set(key) - set(wire) == {"call", "format_version"}
    assert _keys.to_wire(key, call_supported=True) is key
    # The libkiln under test accepts one of the two forms (format 1 refuses `call` by name).
    complete = dict(wire, cpu_isa="x")
    assert len(kiln.Client.key_digest(complete)) == 64
    try:
        kiln.Client.key_digest(dict(key, cpu_isa="x"))
    except kiln.InvalidArgument as e:
        assert "call" in e.message or "format_version" in e.message


def test_block_dtype_is_the_dtype_of_most_parameter_elements():
    m = torch.nn.Linear(2, 2).to(torch.float64)
    assert _keys.block_dtype(m, capture((torch.zeros(2),), {})) == "float64"
    assert _keys.block_dtype(torch.nn.Identity(), capture((torch.zeros(2, dtype=torch.float16),), {})) == "float16"
    assert _keys.block_dtype(torch.nn.Identity(), capture((torch.zeros(2, dtype=torch.long),), {})) == "float32"


class _MixedBlock(torch.nn.Module):
    """A block as diffusers' from_pretrained(torch_dtype=bf16) leaves Wan's: an fp32 norm
    (a _keep_in_fp32_modules entry) FIRST, then the bf16 weights that do the work."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(8)
        self.register_buffer("table", torch.zeros(2, 8))
        self.proj = torch.nn.Linear(8, 8).to(torch.bfloat16)

    def forward(self, x):
        return self.proj(self.norm(x.float() + self.table[0]).to(torch.bfloat16))


def test_a_mixed_block_is_keyed_by_its_compute_dtype_and_the_worker_agrees():
    """One rule (kiln/torch/_dtype_rule.py), applied by the package to the module and by the
    worker (key_dtype.py is the same file) to the block's export: the same answer."""
    import importlib.util

    block = _MixedBlock()
    x = torch.randn(3, 8, dtype=torch.bfloat16)
    assert _keys.block_dtype(block, capture((x,), {})) == "bfloat16"  # not the first parameter's float32
    worker = os.path.join(os.path.dirname(__file__), "..", "..", "ops", "workers", "kiln_worker")
    assert os.path.samefile(os.path.join(worker, "key_dtype.py"),
                            os.path.join(os.path.dirname(_keys.__file__), "_dtype_rule.py"))
    sys.path.insert(0, worker)
    try:
        spec = importlib.util.spec_from_file_location("kiln_worker_signature", os.path.join(worker, "signature.py"))
        signature = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(signature)
        with torch.no_grad():
            ep = torch.export.export(block, (x,))
        assert signature.weight_dtype(ep) == "bfloat16"
        # Most elements in float32: both say float32.
        big = _MixedBlock()
        big.table = torch.zeros(64, 8)
        assert _keys.block_dtype(big, capture((x,), {})) == "float32"
        with torch.no_grad():
            assert signature.weight_dtype(torch.export.export(big, (x,))) == "float32"
    finally:
        sys.path.remove(worker)


def test_a_package_recorded_for_another_host_is_refused_by_name():
    import platform as pf

    from kiln.torch import _aoti

    _aoti.check_metadata({"AOTI_PLATFORM": sys.platform, "AOTI_MACHINE": pf.machine(), "AOTI_CPU_ISA": "AVX2"}, -1)
    _aoti.check_metadata({}, -1)  # nothing recorded, nothing to compare
    with pytest.raises(_aoti.PackageMismatch) as e:
        _aoti.check_metadata({"AOTI_MACHINE": "aarch64" if pf.machine() != "aarch64" else "x86_64"}, -1)
    assert "AOTI_MACHINE" in str(e.value)


def test_numerics_never_raise_under_the_new_tf32_api_and_key_it():
    """torch >= 2.9 refuses to read the legacy float32_matmul_precision once the new
    fp32_precision API set another value; kiln.torch must neither raise (every block would
    stay eager) nor lose the setting (a TF32 package would serve an IEEE process)."""
    matmul = torch.backends.cuda.matmul
    before = _node.numerics()
    old_legacy = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        matmul.fp32_precision = "tf32"
        try:
            legacy_readable = torch.get_float32_matmul_precision() is not None
        except RuntimeError:
            legacy_readable = False
        got = _node.numerics()
        assert got != before
        if not legacy_readable:
            assert got["fp32_precision"]["matmul"] == "tf32" and "float32_matmul_precision" not in got
        digest = kiln.Client.key_digest(dict(_keys.to_wire(_keys.build_key(
            "a" * 64, "Block", "float32", capture((torch.zeros(2),), {}), torch.device("cpu")), True), cpu_isa="x"))
        assert len(digest) == 64
    finally:
        matmul.fp32_precision = "ieee"
        torch.set_float32_matmul_precision(old_legacy)
    assert _node.numerics() == before


def test_flags_moved_from_torch_defaults_enter_the_numerics():
    cudnn = torch.backends.cudnn
    before = _node.numerics()
    assert "cudnn_deterministic" not in before  # at torch's default: not keyed
    cudnn.deterministic = True
    try:
        assert _node.numerics() == dict(before, cudnn_deterministic=True)
    finally:
        cudnn.deterministic = False


def test_an_export_that_names_no_other_gpu_is_saved_as_it_is():
    """on_device_zero() rewrites only an export naming cuda:N, N > 0 (a split model's second
    GPU, whose refusal tests/gpu/RESULTS-lora-devices.md records; the rewrite itself needs
    two GPUs to run); a CPU export passes through untouched."""
    from kiln.torch import _runtime

    block = torch.nn.Linear(4, 4)
    with torch.no_grad():
        ep = torch.export.export(block, (torch.zeros(2, 4),))
    assert _runtime.on_device_zero(ep) is ep
