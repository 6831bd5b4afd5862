"""The CI subset of the family sweep (families.CI: one family of each structure class),
each through kiln.torch on the CPU against one real kilnd building with the real worker
(sweep.run_one): a miss runs eager, kilnd builds every signature once, the compiled blocks
match eager within the bf16 tolerance, and a fresh process with other weights hits from
its very first call. The full sweep is tests/families/sweep.py (RESULTS.md)."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "client", "python"), os.path.join(ROOT, "tests", "python"), HERE]

import families  # noqa: E402
import sweep  # noqa: E402
from kilnd_proc import running  # noqa: E402


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with running(str(tmp_path_factory.mktemp("families")), worker="real") as d:
        yield d


@pytest.mark.parametrize("name", [n for n, f in families.FAMILIES.items() if f.ci])
def test_family_is_served(node, name, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "client", "python"), HERE]),
               KILN_CACHE_DIR=str(tmp_path / "kiln-cache"))
    row = sweep.run_one(name, node.socket, env)
    assert row["served"], (row["reason"], row.get("miss", {}).get("stderr", ""))
    assert row["signatures"] >= len(families.block_class_names(name))
    assert set(row["builds"].values()) == {1}, row["builds"]  # one build per key
    assert row["rel_err"] <= sweep.BF16_TOLERANCE and row["hit_rel_err"] <= sweep.BF16_TOLERANCE
