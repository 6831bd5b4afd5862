"""A package is loaded only by a process its key is for (issue 24, "load checks = key").

Packages stored in a real kilnd under keys that name another torch version, torch git
revision, CUDA, Triton, GPU or host than this process: kiln.torch's loader refuses each
before anything of the package is loaded, naming the field; the same package under this
process's own key reaches torch's loader. torch's loader is replaced by one that records
that it was called (a package kiln.torch refuses must never reach it).
"""
import io
import json
import platform
import sys
import zipfile

import pytest
import torch

import kiln
from kiln.torch import _aoti

META_MEMBER = "model/data/aotinductor/model/cabc123.wrapper_metadata.json"


class Loaded(Exception):
    """torch's loader was reached (the checks passed)."""


@pytest.fixture
def loader_calls(monkeypatch):
    calls = []

    def recording_loader(*args):
        calls.append(args)
        raise Loaded(args[0])

    monkeypatch.setattr(torch._C._aoti, "AOTIModelPackageLoader", recording_loader)
    return calls


def package(metadata):
    """A .pt2-shaped zip: the metadata member torch writes, and a wrapper .so (never loaded)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr(META_MEMBER, json.dumps(metadata))
        z.writestr("model/data/aotinductor/model/cabc123.wrapper.so", b"\x7fELF not a library")
    return buf.getvalue()


def host_isa():
    """An ISA string this CPU has (as torch writes them), and a name it lacks."""
    have = [n for n in ("avx2", "avx512", "avx512_vnni", "amx_tile") if _aoti._cpu_has(n, platform.machine())]
    lacks = next((n for n in ("amx_tile", "avx512_vnni", "avx512", "avx2") if n not in have), "zvector")
    return (have[-1] if have else "none"), lacks


def own_key(**over):
    """A CPU block's key with this process's node fields (as kiln.torch fills them)."""
    key = {"kind": "aoti", "model_hash": "ab" * 32, "region": "LoadCheckBlock", "dtype": "float32",
           "inputs": [{"shape": [2, 8], "dtype": "float32"}], **_aoti.this_process(-1), "cpu_isa": host_isa()[0]}
    key.update(over)
    return key


def own_metadata():
    return {"AOTI_PLATFORM": sys.platform, "AOTI_MACHINE": platform.machine(),
            "AOTI_CPU_ISA": host_isa()[0].upper()}


def other(value):
    return value + "-other"


def stored(client, key, data):
    client.put(key, data)
    art = client.get(key)
    assert art is not None
    return art


def test_the_process_own_key_passes_every_check_and_reaches_the_loader(client, loader_calls):
    with stored(client, own_key(), package(own_metadata())) as art:
        with pytest.raises(Loaded):
            _aoti.load_package(art.path, -1, key=art.key)
        assert loader_calls and loader_calls[0][0] == art.path


@pytest.mark.parametrize("field,value", [
    ("torch_version", lambda have: have.split("+")[0] + "+cu128"),  # same release, another CUDA build
    ("torch_git", lambda have: "0" * 40),
    ("cuda_version", lambda have: "12.8"),
    ("triton_version", lambda have: other(have)),
    ("gpu_arch", lambda have: "sm_90"),
    ("gpu_name", lambda have: "NVIDIA H200"),
    ("platform", lambda have: "darwin" if have != "darwin" else "linux"),
    ("machine", lambda have: "aarch64" if have != "aarch64" else "x86_64"),
])
def test_a_key_for_another_process_is_refused_before_anything_is_loaded(client, loader_calls, field, value):
    have = _aoti.this_process(-1)
    key = own_key(**{field: value(have[field])})
    assert key[field] != have[field]
    with stored(client, key, package({})) as art:
        assert art.key[field] == key[field]  # kilnd kept the field as given
        with pytest.raises(_aoti.PackageMismatch) as e:
            _aoti.load_package(art.path, -1, key=art.key)
    assert f"key.{field}" in str(e.value) and repr(have[field]) in str(e.value)
    assert loader_calls == []


def test_a_key_naming_an_instruction_set_this_cpu_lacks_is_refused(client, loader_calls):
    have, lacks = host_isa()
    with stored(client, own_key(cpu_isa=f"{have} {lacks}"), package({})) as art:
        with pytest.raises(_aoti.PackageMismatch) as e:
            _aoti.load_package(art.path, -1, key=art.key)
    assert "key.cpu_isa" in str(e.value) and lacks in str(e.value)
    assert loader_calls == []


def test_a_package_recording_another_host_than_its_key_is_refused_before_loading(tmp_path, loader_calls):
    """kilnd refuses to store such a package (its PUT check); a file outside kilnd is the
    way to reach the loader with one."""
    key = own_key()
    for name, value, field in (("AOTI_MACHINE", "aarch64" if platform.machine() != "aarch64" else "x86_64", None),
                               ("AOTI_CPU_ISA", host_isa()[1].upper(), None),
                               ("AOTI_COMPUTE_CAPABILITY", "90", None)):
        path = tmp_path / f"{name}.pt2"
        path.write_bytes(package(dict(own_metadata(), **{name: value})))
        with pytest.raises(_aoti.PackageMismatch) as e:
            _aoti.load_package(str(path), -1, key=key)
        assert name in str(e.value), e.value
    # The package agrees with this host but not with its key.
    path = tmp_path / "isa.pt2"
    path.write_bytes(package(dict(own_metadata(), AOTI_CPU_ISA="NONE")))
    with pytest.raises(_aoti.PackageMismatch) as e:
        _aoti.load_package(str(path), -1, key=key)
    assert "key.cpu_isa" in str(e.value) and "AOTI_CPU_ISA" in str(e.value)
    assert loader_calls == []


def test_a_key_of_another_kind_or_with_an_empty_field_is_refused():
    with pytest.raises(_aoti.PackageMismatch, match="key.kind"):
        _aoti.check_key(own_key(kind="megacache"), -1)
    with pytest.raises(_aoti.PackageMismatch, match="key.torch_git is empty"):
        _aoti.check_key(own_key(torch_git=""), -1)
    _aoti.check_key(own_key(), -1)


def test_kilnd_fills_the_key_it_serves_and_the_loader_reads_that_key(client):
    """The key a loader checks is the one kilnd stored the artifact under (Artifact.key),
    node fields included, not the one the caller asked with."""
    key = own_key()
    with stored(client, key, package({})) as art:
        assert {f: art.key[f] for f in _aoti.EXACT_FIELDS} == {f: key[f] for f in _aoti.EXACT_FIELDS}
        assert art.key_digest == kiln.Client.key_digest(key)
