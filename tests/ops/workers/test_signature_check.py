"""The worker's checks: a built package against eager (ops/workers/kiln_worker/signature.py,
`compare`): constant outputs such as SD3's last block's `(None, hidden_states)` pass when
eager returns the same constant, and fail, naming the output, when they differ; and the
toolchain probe's refusal of a torch outside kiln's range (toolchain.py)."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "ops", "workers", "kiln_worker"))

import signature  # noqa: E402
from report import WorkerError  # noqa: E402


def test_a_none_output_that_eager_returns_too_is_no_error():
    t = torch.randn(2, 3)
    check = signature.compare([None, t], [None, t.clone()], "float32")
    assert check["passed"] and check["rel_err"] == 0.0 and check["outputs"] == 2


def test_a_constant_where_eager_has_a_tensor_fails_naming_the_output():
    t = torch.randn(2, 3)
    with pytest.raises(WorkerError, match="output 0"):
        signature.compare([None, t], [t, t], "float32")
    with pytest.raises(WorkerError, match="output 1"):
        signature.compare([t, 3], [t, 4], "float32")


def test_a_compiled_output_beyond_the_tolerance_fails():
    t = torch.ones(4)
    with pytest.raises(WorkerError, match="differs from eager"):
        signature.compare([t * 1.1], [t], "float32")


def test_a_worker_with_a_torch_outside_the_range_refuses_its_toolchain_probe(monkeypatch):
    """The worker's probe refuses what kiln.torch refuses (one range: torch_range.py is
    kiln.torch's _torch_range.py), so kilnd says "can build no" with the reason."""
    import toolchain

    assert toolchain.describe(with_cpu_isa=False)["toolchain"]["torch_version"] == torch.__version__
    monkeypatch.setattr(torch, "__version__", "1.13.1")
    with pytest.raises(WorkerError, match="the worker's torch 1.13.1 is older than kiln's supported range"):
        toolchain.describe(with_cpu_isa=False)
    worker = os.path.join(os.path.dirname(__file__), "..", "..", "..", "ops", "workers", "kiln_worker")
    package = os.path.join(os.path.dirname(__file__), "..", "..", "..", "client", "python", "kiln", "torch")
    assert os.path.samefile(os.path.join(worker, "torch_range.py"), os.path.join(package, "_torch_range.py"))


def test_a_weight_aotinductor_folds_into_the_package_is_found_by_name(tmp_path):
    """BriaFibo2's injection blocks use a parameter only as tanh(cross_attn_gate):
    AOTInductor folds it at compile time, so a weight-free package would run with the
    builder's value. folded_weights names every such weight, and none the package takes."""

    class Gated(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(4, 4)
            self.gate = torch.nn.Parameter(torch.zeros(1))

        def forward(self, x):
            return self.proj(x) * torch.tanh(self.gate)

    with torch.no_grad():
        ep = torch.export.export(Gated(), (torch.randn(2, 4),))
        path = torch._inductor.aoti_compile_and_package(ep, package_path=str(tmp_path / "p.pt2"),
                                                         inductor_configs={"aot_inductor.package_constants_in_so": False})
    fqns = list(torch._C._aoti.AOTIModelPackageLoader(path, "model", False, 1, -1).get_constant_fqns())
    weights, _ = signature.package_constant_names(ep, signature.perturbed_weights(ep, device="cpu"), fqns)
    assert "proj.weight" in fqns and "gate" not in fqns  # torch 2.15 folds the gate: the case guarded against
    # Every used weight the package does not take, and only those (here torch also folds
    # proj.bias into the gated product).
    assert signature.folded_weights(ep, weights, fqns) == sorted({"gate", "proj.bias", "proj.weight"} - set(fqns))


def test_the_isa_probe_child_loads_without_importing_torch(tmp_path, monkeypatch):
    """isa_probe.faster_isa_probes on a torch whose ISA probe child imports torch (VecISA without
    _probe_load): the child it installs dlopens a probe library that needs libtorch's
    libraries through LD_LIBRARY_PATH, without `import torch`; without that path it falls
    back to importing torch; a library that is not there still fails the probe."""
    import subprocess

    import isa_probe
    from torch._inductor import cpu_vec_isa

    if hasattr(cpu_vec_isa.VecISA, "_probe_load"):
        monkeypatch.delattr(cpu_vec_isa.VecISA, "_probe_load")
    monkeypatch.setattr(cpu_vec_isa.VecISA, "_avx_py_load", "import torch", raising=False)
    monkeypatch.setenv("LD_LIBRARY_PATH", "/nonexistent")
    assert isa_probe.faster_isa_probes()
    assert cpu_vec_isa.VecISA._avx_py_load == isa_probe._FAST_ISA_PROBE
    lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    assert os.environ["LD_LIBRARY_PATH"] == f"{lib}:/nonexistent"
    # A probe library as Inductor's: it needs libc10 and has no rpath to find it.
    probe = tmp_path / "probe.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-x", "c++", "-", "-o", str(probe), f"-L{lib}",
                    "-Wl,--no-as-needed", "-lc10"], input="int kiln_probe() { return 1; }", text=True, check=True)

    def child(path, env):
        code = isa_probe._FAST_ISA_PROBE.replace("__lib_path__", str(path))
        code += "\nimport sys\nsys.exit(3 if 'torch' in sys.modules else 0)\n"
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True).returncode

    assert child(probe, dict(os.environ)) == 0  # loaded, torch never imported
    assert child(probe, {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}) == 3  # the fallback
    assert child(tmp_path / "missing.so", dict(os.environ)) not in (0, 3)
