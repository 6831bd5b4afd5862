"""kiln.torch's cache of Triton's content hash between processes (_node._triton_hash_cached,
_node._tree_fingerprint): a hit never runs the computation, and any change to the files it
was computed from, or a damaged cache file, computes it again. Unit tests: no daemon, no
Triton needed (the computation is a counter)."""
import os
import time

import pytest

import torch  # noqa: E402,F401

from kiln.torch import _node  # noqa: E402


class Counter:
    def __init__(self, value="h1"):
        self.calls, self.value = 0, value

    def __call__(self):
        self.calls += 1
        return self.value


def settled(root):
    """The fingerprint of `root`, its files taken as settled (they were written just now)."""
    return _node._tree_fingerprint(str(root), settled_before_ns=time.time_ns() + 10**12)


def package(tmp_path):
    root = tmp_path / "triton"
    (root / "backends" / "nvidia" / "bin").mkdir(parents=True)
    (root / "__init__.py").write_text("__version__ = '3.6.0'\n")
    (root / "_C").mkdir()
    (root / "_C" / "libtriton.so").write_bytes(b"\x7fELF" + b"x" * 1000)
    (root / "backends" / "nvidia" / "bin" / "ptxas").write_bytes(b"ptxas 13.0")
    return root


def test_a_second_process_with_the_same_fingerprint_reads_the_hash_without_computing(tmp_path):
    root, cache = package(tmp_path), tmp_path / "cache"
    fp = settled(root)
    first = Counter("abc")
    assert _node._triton_hash_cached(first, fingerprint=fp, cache_dir=str(cache)) == "abc"
    again = Counter("never used")
    assert _node._triton_hash_cached(again, fingerprint=fp, cache_dir=str(cache)) == "abc"
    assert (first.calls, again.calls) == (1, 0)


@pytest.mark.parametrize("change", ["rewrite_same_size", "append", "new_file", "remove", "replace_by_rename"])
def test_any_change_to_the_files_changes_the_fingerprint_and_the_hash_is_computed_again(tmp_path, change):
    root, cache = package(tmp_path), tmp_path / "cache"
    fp = settled(root)
    _node._triton_hash_cached(Counter("old"), fingerprint=fp, cache_dir=str(cache))
    lib = root / "_C" / "libtriton.so"
    time.sleep(0.05)  # past the file system's timestamp granularity
    if change == "rewrite_same_size":  # same size, and the old mtime put back: ctime still moves
        st = os.stat(lib)
        lib.write_bytes(b"\x7fELF" + b"y" * 1000)
        os.utime(lib, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif change == "append":
        with open(lib, "ab") as f:
            f.write(b"z")
    elif change == "new_file":
        (root / "language").mkdir()
        (root / "language" / "core.py").write_text("x = 1\n")
    elif change == "remove":
        (root / "backends" / "nvidia" / "bin" / "ptxas").unlink()
    else:  # a pip upgrade writes new files and renames them over the old ones
        new = root / "_C" / "libtriton.so.new"
        new.write_bytes(lib.read_bytes())
        os.replace(new, lib)
    fp2 = settled(root)
    assert fp2 != fp
    fresh = Counter("new")
    assert _node._triton_hash_cached(fresh, fingerprint=fp2, cache_dir=str(cache)) == "new"
    assert fresh.calls == 1


def test_files_changed_moments_ago_give_no_fingerprint_so_nothing_is_cached(tmp_path, monkeypatch):
    before = time.time_ns() - 10 * 10**9  # before the files are written, however slowly
    root = package(tmp_path)
    assert _node._tree_fingerprint(str(root), settled_before_ns=before) is None  # could change again unseen
    monkeypatch.setattr(_node, "_SETTLE_NS", 3600 * 10**9)  # the default window, wider than any writing
    assert _node._tree_fingerprint(str(root)) is None
    assert settled(root) is not None


@pytest.mark.parametrize("content", [b"", b"{not json", b'{"fingerprint": "other", "hash": "x"}', b'{"hash": ""}'])
def test_a_damaged_or_foreign_cache_file_is_recomputed_and_rewritten(tmp_path, content):
    cache = tmp_path / "cache"
    fp = "f" * 64
    (cache / "triton-hash").mkdir(parents=True)
    (cache / "triton-hash" / (fp + ".json")).write_bytes(content)
    c = Counter("good")
    assert _node._triton_hash_cached(c, fingerprint=fp, cache_dir=str(cache)) == "good"
    assert _node._triton_hash_cached(Counter("unused"), fingerprint=fp, cache_dir=str(cache)) == "good"
    assert c.calls == 1
    assert [p.name for p in (cache / "triton-hash").iterdir()] == [fp + ".json"]  # no temporary left


def test_a_cache_folder_that_cannot_be_written_costs_only_the_computation(tmp_path):
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    c = Counter("v")
    assert _node._triton_hash_cached(c, fingerprint="a" * 64, cache_dir=str(blocked)) == "v"
    assert _node._triton_hash_cached(c, fingerprint="a" * 64, cache_dir=str(blocked)) == "v"
    assert c.calls == 2


def test_without_triton_installed_the_fingerprint_is_none_and_nothing_is_cached(tmp_path, monkeypatch):
    monkeypatch.setattr(_node.importlib.util, "find_spec", lambda name: None)
    assert _node._triton_fingerprint() is None
    c = Counter("none")
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    assert _node._triton_hash_cached(c) == "none"
    assert not (tmp_path / "cache").exists()
