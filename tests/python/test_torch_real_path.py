"""The user's whole path on the CPU, with nothing standing in: a real kilnd whose builds
run the real worker (ops/workers/kiln_worker) in the pinned environment, and kiln.torch on
a real diffusers FluxTransformer2DModel (a small config of FLUX's structure, loaded with
from_pretrained(torch_dtype=torch.bfloat16) as users load it; tests/families).

- A miss runs eager (outputs equal eager's exactly), the block is exported weight-free,
  registered, built by kilnd on the CPU; the compiled block takes over and matches eager
  within the bf16 tolerance.
- Two sequence lengths are two signatures: one build per block class and signature.
- A fresh process with other weights hits from its first call (no eager call at all).
- Eight processes at once on a cold node: one build per signature.
- kiln::torch::load_block (C++) on packages built here equals eager, a block's plain tensor
  attributes attached by the names the worker recorded.
"""
import json
import os
import subprocess
import sys
import time

import pytest
import torch  # noqa: F401  (the pinned environment has it)

import kiln  # noqa: E402
from kilnd_proc import builds_by_key, running  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FAMILIES = os.path.join(HERE, "..", "families")
RUN_FAMILY = os.path.join(FAMILIES, "run_family.py")
PACKAGE = os.path.join(HERE, "..", "..", "client", "python")
BF16_TOLERANCE = 2e-2  # the worker's check for bfloat16 (signature.TOLERANCE)
BUILD_WAIT_S = 1500


def run_family(socket, *args, timeout=BUILD_WAIT_S + 300):
    """run_family.py in a fresh process (the kiln package from the source tree); its JSON."""
    env = dict(os.environ, PYTHONPATH=PACKAGE)
    out = subprocess.run([sys.executable, RUN_FAMILY, "--socket", socket, "--hit-wait-s", "120", *args],
                         capture_output=True, text=True,
                         timeout=timeout, env=env)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with running(str(tmp_path_factory.mktemp("real-node")), worker="real") as d:
        yield d


def test_miss_builds_on_the_cpu_then_compiled_takes_over_and_a_fresh_process_hits(node):
    first = run_family(node.socket, "--family", "flux", "--seed", "0", "--scales", "1,2", "--wait-s",
                       str(BUILD_WAIT_S))
    # The miss: every call ran eager (so exactly eager's outputs), nothing failed.
    assert all(e["calls"]["compiled"] == 0 for e in first["first_status"]), first["first_status"]
    assert all(v == 0.0 for v in first["first_rel_err"].values()), first["first_rel_err"]
    assert first["waited"], first["final_status"]
    states = {(e["region"], e["signature"]): e["state"] for e in first["final_status"]}
    # Two block classes x two sequence lengths = four signatures, each a hit.
    assert sorted({r for r, _ in states}) == ["FluxSingleTransformerBlock", "FluxTransformerBlock"], states
    assert len(states) == 4 and set(states.values()) == {"hit"}, first["final_status"]
    assert all(e["calls"]["compiled"] > 0 for e in first["final_status"])
    assert all(v <= BF16_TOLERANCE for v in first["rel_err"].values()), first["rel_err"]
    built = builds_by_key(node.socket)
    digests = {e["key_digest"] for e in first["final_status"]}
    assert digests <= set(built) and all(built[d] == 1 for d in digests), built
    # The four builds compiled into the node's compiler cache (kilnd's build work folder).
    work = os.path.join(node.folder, "store", "builds")
    assert os.listdir(os.path.join(work, "compiler-cache", "inductor")), os.listdir(work)
    # with Inductor's precompiled headers, which torch keeps in the (per-build) TMPDIR
    headers = os.path.join(work, "compiler-cache", "inductor", "precompiled_headers")
    assert any(n.endswith(".gch") for n in os.listdir(headers)), os.listdir(headers)

    # A fresh process with other weights: a hit from its very first call, its own weights.
    fresh = run_family(node.socket, "--family", "flux", "--seed", "1", "--scales", "1,2")
    assert fresh["first_status"], fresh
    for e in fresh["first_status"]:
        assert e["state"] == "hit" and e["calls"]["eager"] == 0 and e["calls"]["compiled"] > 0, e
    assert all(v <= BF16_TOLERANCE for v in fresh["first_rel_err"].values()), fresh["first_rel_err"]
    assert builds_by_key(node.socket) == built  # nothing more was built


def test_eight_processes_at_once_cause_one_build_per_signature(make_kilnd):
    node = make_kilnd(name="cold", worker="real")
    node.start()
    env = dict(os.environ, PYTHONPATH=PACKAGE)
    argv = [sys.executable, RUN_FAMILY, "--socket", node.socket, "--family", "flux", "--scales", "3",
            "--block-classes", "FluxSingleTransformerBlock", "--on-miss", "wait", "--wait-s", str(BUILD_WAIT_S)]
    procs = [subprocess.Popen(argv + ["--seed", str(i)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for i in range(8)]
    results = []
    deadline = time.monotonic() + BUILD_WAIT_S + 600
    for p in procs:
        out, err = p.communicate(timeout=max(1, deadline - time.monotonic()))
        assert p.returncode == 0, err[-4000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    digests = set()
    for r in results:
        (entry,) = r["final_status"]
        assert entry["state"] == "hit" and entry["calls"]["compiled"] > 0, entry
        assert r["rel_err"]["3"] <= BF16_TOLERANCE, r["rel_err"]
        digests.add(entry["key_digest"])
    assert len(digests) == 1  # one signature, the same key in every process
    assert builds_by_key(node.socket) == {digests.pop(): 1}


def test_the_libtorch_helper_loads_a_cpu_package_with_other_weights(node, tmp_path):
    """kiln::torch::load_block (C++, libtorch from the pinned torch's wheel) on a package
    kilnd built for the CPU: attached with weights the source never had, run on a real
    call's inputs, equal to diffusers' eager block (kiln_gpu_bench load --device cpu)."""
    sys.path.insert(0, FAMILIES)
    sys.path.insert(0, os.path.join(HERE, "..", "gpu"))
    import families
    from prepare import write_tensors

    from kiln.torch import _aoti

    built = run_family(node.socket, "--family", "flux", "--seed", "0", "--scales", "1", "--wait-s", str(BUILD_WAIT_S))
    (digest,) = [e["key_digest"] for e in built["final_status"] if e["region"] == "FluxSingleTransformerBlock"]
    model = families.load_like_a_user("flux", str(tmp_path / "model"), seed=5)
    block = model.single_transformer_blocks[0]
    seen = {}
    hook = block.register_forward_pre_hook(lambda m, args, kwargs: seen.setdefault("call", (args, kwargs)),
                                           with_kwargs=True)
    with torch.no_grad():
        model(**families.FAMILIES["flux"].inputs(model, 5, scale=1), return_dict=False)
    hook.remove()
    args, kwargs = seen["call"]
    with torch.no_grad():
        expected = block(*args, **kwargs)
    with kiln.Client(node.socket) as c:
        (item,) = [i for i in c.ls({"region": "FluxSingleTransformerBlock"}) if i["key_digest"] == digest]
        art = c.get(item["key_digest"])
        loader = torch._C._aoti.AOTIModelPackageLoader(art.path, "model", False, 1, -1)
        in_spec = torch.utils._pytree.treespec_loads(loader.get_call_spec()[0])
        from torch.export._tree_utils import reorder_kwargs

        flat = [t for t in _aoti.flatten_as_exported(in_spec, (args, reorder_kwargs(kwargs, in_spec)))
                if isinstance(t, torch.Tensor)]
        del loader
        art.close()
    key_file = tmp_path / "key.json"
    key_file.write_text(json.dumps(item["key"]))
    write_tensors(str(tmp_path / "weights"), list(block.state_dict().items()))
    outs = [t for t in torch.utils._pytree.tree_leaves(expected) if isinstance(t, torch.Tensor)]
    write_tensors(str(tmp_path / "ref"), [(f"input{i}", t) for i, t in enumerate(flat)] +
                  [(f"output{i}", t) for i, t in enumerate(outs)])
    out = subprocess.run([os.environ["KILN_TORCH_BENCH"], "load", "--key", str(key_file), "--weights",
                          str(tmp_path / "weights"), "--ref", str(tmp_path / "ref"), "--device", "cpu", "--iters", "2"],
                         capture_output=True, text=True, timeout=600, env=dict(os.environ, KILN_SOCKET=node.socket))
    assert out.returncode == 0, out.stderr + out.stdout
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert not result["built"] and result["rel_err_vs_eager"] <= BF16_TOLERANCE, result



class ConstantsBlock(torch.nn.Module):
    """Two plain tensor attributes (neither parameter nor buffer), which the package names
    `_tensor_constant0` and `_tensor_constant1`: a loader that gave them by position, or
    swapped, would compute something else than eager."""

    def __init__(self, dim=16):
        super().__init__()
        self.proj = torch.nn.Linear(dim, dim)
        self.scale = torch.linspace(-1.0, 1.0, dim)
        self.shift = torch.linspace(0.5, 3.0, dim)

    def forward(self, hidden_states):
        return self.proj(hidden_states) * self.scale + self.shift


def test_the_libtorch_helper_attaches_a_blocks_plain_tensor_attributes_by_their_recorded_names(node, tmp_path):
    """kiln::torch::load_block on a package the real worker built from a block with plain
    tensor attributes: the caller names them by attribute ("scale", "shift"), the loader
    maps the package's `_tensor_constant<n>` to them through `kiln/constant_names.json`,
    and the output equals eager's (kiln_gpu_bench load --device cpu)."""
    sys.path.insert(0, os.path.join(HERE, "..", "gpu"))
    from prepare import write_tensors

    import kiln.torch
    from kiln.torch import _aoti

    torch.manual_seed(0)
    model = torch.nn.Sequential(ConstantsBlock()).eval()
    x = torch.randn(2, 4, 16)
    with torch.no_grad():
        expected = model[0](x)
    kiln.torch.compile_repeated_blocks(model, block_classes=[ConstantsBlock], socket=node.socket, on_miss="wait")
    with torch.no_grad():
        for _ in range(2):  # the first call waits for the build, the second runs it (Python's loader)
            assert torch.allclose(model(x), expected, atol=1e-5, rtol=1e-4)
    (entry,) = kiln.torch.status(model)
    assert entry["state"] == "hit", entry
    kiln.torch.restore(model)
    with kiln.Client(node.socket) as c:
        (item,) = [i for i in c.ls({"region": "ConstantsBlock"}) if i["key_digest"] == entry["key_digest"]]
        art = c.get(item["key_digest"])
        names = _aoti.read_constant_names(art.path)
        art.close()
    assert sorted(names.values()) == ["scale", "shift"], names  # the worker recorded them
    (tmp_path / "key.json").write_text(json.dumps(item["key"]))
    block = model[0]
    write_tensors(str(tmp_path / "weights"),
                  list(block.state_dict().items()) + [("scale", block.scale), ("shift", block.shift)])
    write_tensors(str(tmp_path / "ref"), [("input0", x), ("output0", expected)])
    out = subprocess.run([os.environ["KILN_TORCH_BENCH"], "load", "--key", str(tmp_path / "key.json"), "--weights",
                          str(tmp_path / "weights"), "--ref", str(tmp_path / "ref"), "--device", "cpu", "--iters", "2"],
                         capture_output=True, text=True, timeout=600, env=dict(os.environ, KILN_SOCKET=node.socket))
    assert out.returncode == 0, out.stderr + out.stdout
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert not result["built"] and result["rel_err_vs_eager"] <= 1e-5, result
