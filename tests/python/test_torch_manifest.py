"""Prewarm from what a diffusers process asked for (issue "Prewarm a fleet for a diffusers
model"): a small diffusers FLUX (tests/families, loaded as users load it) runs through
kiln.torch on node A (a real kilnd building with the real worker on the CPU);
kiln.torch.manifest writes the manifest of its keys and their weight-free sources;
`kilnctl prewarm` builds them on node B, an empty node; a fresh process on node B then hits
from its first call (no eager call, no export, no build). `python -m kiln manifest` writes
the same keys from node A's store."""
import json
import os
import subprocess
import sys
import tomllib

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "families"))

import kiln  # noqa: E402
import kiln.torch  # noqa: E402
from kilnd_proc import _required_env, builds_by_key, running  # noqa: E402

RUN_FAMILY = os.path.join(ROOT, "tests", "families", "run_family.py")
PACKAGE = os.path.join(ROOT, "client", "python")
BUILD_WAIT_S = 1500
BLOCK = "FluxSingleTransformerBlock"


def test_a_manifest_from_a_diffusers_process_prewarms_another_node_for_a_first_call_hit(tmp_path):
    import families

    torch.set_num_threads(1)
    manifest = tmp_path / "out" / "flux.toml"
    with running(str(tmp_path / "a"), worker="real") as a:
        model = families.load_like_a_user("flux", str(tmp_path / "flux"), seed=0)
        kiln.torch.compile_repeated_blocks(model, block_classes=[BLOCK], socket=a.socket, on_miss="wait")
        with torch.no_grad():
            for scale in (1, 2):  # two sequence lengths: two signatures
                model(**families.FAMILIES["flux"].inputs(model, 0, scale=scale), return_dict=False)
        assert kiln.torch.wait(model, timeout=BUILD_WAIT_S)
        wrote = kiln.torch.manifest(model, str(manifest))
        assert wrote == {"keys": 2, "sources": 2}, wrote  # a model hash covers the input shapes: one each
        keys_a = {e["key_digest"] for e in kiln.torch.status(model)}
        kiln.torch.restore(model)
        from_store = tmp_path / "store-out" / "flux.toml"
        out = subprocess.run([sys.executable, "-m", "kiln", "manifest", str(from_store), "--socket", a.socket,
                              "--region", BLOCK], capture_output=True, text=True, timeout=300,
                             env=dict(os.environ, PYTHONPATH=PACKAGE))
        assert out.returncode == 0, out.stdout + out.stderr
        assert "2 key(s), 2 source(s)" in out.stdout, out.stdout

    doc = tomllib.loads(manifest.read_text())
    assert len(doc["source"]) == 2
    for source in doc["source"]:
        assert source["path"].startswith("sources/kiln-fp-") and (manifest.parent / source["path"]).is_file()
    assert {b["region"] for b in doc["build"]} == {BLOCK}
    assert all("gpu_arch" not in b and "torch_version" not in json.dumps(b) for b in doc["build"])
    # diffusers calls the block with joint_attention_kwargs=None: TOML's spelling of None.
    assert all(b["signature"][0]["call"]["kwargs"]["joint_attention_kwargs"] == {"const": {"none": True}}
               for b in doc["build"]), doc["build"]

    with running(str(tmp_path / "b"), worker="real") as b:
        out = subprocess.run([_required_env("KILN_TEST_KILNCTL"), "prewarm", str(manifest), "--socket", b.socket,
                              "--progress", "plain"], capture_output=True, text=True, timeout=BUILD_WAIT_S)
        assert out.returncode == 0, out.stdout + out.stderr
        built = builds_by_key(b.socket)
        assert set(built) == keys_a and all(n == 1 for n in built.values()), (built, keys_a)
        env = dict(os.environ, PYTHONPATH=PACKAGE)
        out = subprocess.run([sys.executable, RUN_FAMILY, "--socket", b.socket, "--family", "flux", "--seed", "1",
                              "--scales", "1,2", "--block-classes", BLOCK, "--hit-wait-s", "120"],
                             capture_output=True, text=True, timeout=BUILD_WAIT_S, env=env)
        assert out.returncode == 0, out.stderr[-4000:]
        fresh = json.loads(out.stdout.strip().splitlines()[-1])
        assert len(fresh["first_status"]) == 2, fresh["first_status"]
        for e in fresh["first_status"]:
            assert e["state"] == "hit" and e["calls"]["eager"] == 0 and e["calls"]["compiled"] > 0, e
        assert builds_by_key(b.socket) == built  # the fresh process built nothing more
