"""kiln.torch.use_torch_cache(): torch.compile's own caches pointed at the node's kilnd
from Python (schema/torch-cache.md), against a real kilnd with [torch_cache] and redis-py,
torch's own client, with the pinned torch (tests/python-requirements.txt); a torch without
remote caches must make the switch refuse clearly and change nothing (the GPU proof,
tests/gpu/RESULTS-torch-cache.md, is torch 2.11)."""
import importlib
import os
import tempfile

import pytest

import kiln
from kiln.torch import _torch_cache

import redis  # noqa: E402


@pytest.fixture
def torch_cache_kilnd(make_kilnd):
    folder = tempfile.mkdtemp(prefix="kiln-tc-", dir="/tmp")
    sock = os.path.join(folder, "torch-cache.sock")
    d = make_kilnd(f'[torch_cache]\nsocket = "{sock}"\n')
    d.start()
    yield d, sock
    os.rmdir(folder) if not os.listdir(folder) else None


def test_the_url_comes_from_kilnd_status_and_redis_py_uses_it(torch_cache_kilnd):
    d, sock = torch_cache_kilnd
    url = _torch_cache.torch_cache_url(d.socket)
    assert url == "unix://" + sock
    with kiln.Client(d.socket) as c:
        assert c.status()["torch_cache"] == {"socket": sock, "durability": "deferred",  # kilnd's default
                                             "queued": {"entries": 0, "bytes": 0},
                                             "fleet": False}  # no [fleet]: nothing leaves the node
    r = redis.Redis.from_url(url)
    key = "pt2:fx-graph-v1::kilnpythontest:c1"
    value = b'{"data": "' + b"A" * 4096 + b'"}'
    assert r.get(key) is None
    assert r.set(key, value)
    assert r.get(key) == value
    r.close()


def test_a_kilnd_without_a_torch_cache_says_how_to_serve_one(kilnd):
    with pytest.raises(kiln.Unsupported, match=r"\[torch_cache\] socket"):
        _torch_cache.torch_cache_url(kilnd.socket)
    with kiln.Client(kilnd.socket) as c:
        assert "torch_cache" not in c.status()


def test_switching_on_names_what_is_missing_and_changes_nothing(torch_cache_kilnd, monkeypatch):
    import torch
    d, sock = torch_cache_kilnd
    monkeypatch.delenv("TORCHINDUCTOR_REDIS_URL", raising=False)
    with pytest.raises(ValueError, match="unknown torch caches"):
        _torch_cache.use_torch_cache(d.socket, caches=("fx_graph", "pgo_of_my_own"))
    import importlib.util

    has_inductor = importlib.util.find_spec("torch._inductor") is not None
    if has_inductor and hasattr(importlib.import_module("torch._inductor.config"), "fx_graph_remote_cache"):
        import torch._inductor.config as inductor_config

        monkeypatch.setattr(inductor_config, "fx_graph_remote_cache", None)
        assert _torch_cache.use_torch_cache(d.socket, caches=("fx_graph",)) == "unix://" + sock
        assert inductor_config.fx_graph_remote_cache is True
        assert os.environ["TORCHINDUCTOR_REDIS_URL"] == "unix://" + sock
    else:
        with pytest.raises(RuntimeError, match=f"torch {torch.__version__} has no remote fx_graph cache"):
            _torch_cache.use_torch_cache(d.socket)
        assert "TORCHINDUCTOR_REDIS_URL" not in os.environ
