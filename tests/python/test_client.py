"""kiln.Client end to end against a real kilnd: round trips, descriptors, error codes,
sources and builds through the test worker, permission refusals, a daemon restart."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading

import pytest

import kiln
from conftest import TEST_CPU_ISA, TEST_NODE

HASH = "3fa2bd6e2c3c6bb1a1f0ff7c6e4d3b2a1908f7e6d5c4b3a29180f7e6d5c4b3a2"


def key(region="Block", model_hash=HASH, **fields):
    k = {"kind": "aoti", "model_hash": model_hash, "region": region, "dtype": "bfloat16",
         "inputs": [{"shape": [1, 8], "dtype": "bfloat16", "layout": "strided"}]}
    k.update(TEST_NODE)
    k.update(fields)
    return k


@pytest.mark.parametrize("streaming", [False, True])
def test_put_get_round_trip_as_path_file_and_buffer(kilnd, streaming):
    data = os.urandom(200_000)
    with kiln.Client(kilnd.socket, streaming=streaming) as c:
        assert c.get(key()) is None
        assert c.stat(key()) is None
        info = c.put(key(), data, pin=True)
        assert info["size"] == len(data) and info["pinned"] is True
        with c.get(key()) as art:
            assert art.path.startswith("/proc/self/fd/") and os.fspath(art) == art.path
            assert art.size == len(data)
            assert art.read() == data
            with open(art, "rb") as f:  # usable wherever a path is
                assert f.read() == data
            with art.open() as f:
                assert f.read(10) == data[:10]
            assert bytes(art.buffer()) == data
            assert art.key_digest == info["key_digest"] == c.key_digest(dict(key(), cpu_isa=TEST_CPU_ISA))
            by_digest = c.get(art.key_digest)
            assert by_digest.read() == data
            by_digest.close()
        assert art.closed
        with pytest.raises(ValueError):
            art.read()
        assert c.stat(key())["size"] == len(data)
        assert [i["key"]["region"] for i in c.ls(filters={"region": "Block"})] == ["Block"]
        assert c.ls(filters={"region": "Other"}) == []
        assert c.unpin(key()) and c.pin(key())
        assert c.remove(key()) is True
        assert c.remove(key()) is False
        assert c.get(key()) is None


def test_put_file_and_an_empty_artifact(client, tmp_path):
    p = tmp_path / "blob"
    p.write_bytes(b"x" * 1000)
    client.put_file(key("File"), p)
    assert client.get(key("File")).read() == b"x" * 1000
    client.put(key("Empty"), b"")
    with client.get(key("Empty")) as art:
        assert art.size == 0 and art.read() == b"" and bytes(art.buffer()) == b""
    # A missing file (ENOENT) is bad input, never "nothing stored"; unreadable ones are KilnIOError.
    with pytest.raises(kiln.InvalidArgument) as e:
        client.put_file(key("Absent"), tmp_path / "absent")
    assert "absent" in e.value.message


def test_bad_input_raises_the_class_of_its_code_with_the_field_named(client):
    with pytest.raises(kiln.InvalidArgument) as e:
        client.put(key(model_hash="not-a-hash"), b"x")
    assert e.value.code == 1 and e.value.name == "invalid_argument" and "model_hash" in e.value.message
    with pytest.raises(kiln.InvalidArgument) as e:
        client.get(dict(key(), regoin="x"))
    assert "regoin" in str(e.value)
    with pytest.raises(kiln.InvalidArgument):
        client.get(42)
    with pytest.raises(kiln.InvalidArgument):
        client.request("GET", {})
    with pytest.raises(kiln.InvalidArgument) as e:
        kiln.Client.key_digest({k: v for k, v in key().items() if k != "gpu_arch"})
    assert "gpu_arch" in e.value.message
    assert isinstance(e.value, kiln.KilnError)


def test_every_code_has_its_class():
    for code, cls in kiln.errors.BY_CODE.items():
        err = kiln.errors.from_status(code, "m")
        assert type(err) is cls and err.code == code and err.message == "m" and isinstance(err, kiln.KilnError)
    unknown = kiln.errors.from_status(99, "later")
    assert type(unknown) is kiln.KilnError and unknown.code == 99


def test_no_daemon_is_unavailable_naming_the_socket(tmp_path):
    sock = str(tmp_path / "none.sock")
    with pytest.raises(kiln.Unavailable) as e:
        kiln.Client(sock)
    assert sock in e.value.message


def test_daemon_restart_is_unavailable_once_then_the_same_client_works(kilnd):
    c = kiln.Client(kilnd.socket)
    c.put(key(), b"survives")
    kilnd.stop()
    with pytest.raises(kiln.Unavailable):
        c.stats()
    kilnd.start()
    assert c.get(key()).read() == b"survives"
    assert c.status()["node"]["gpu_arch"] == TEST_NODE["gpu_arch"]
    c.close()
    c.close()  # idempotent
    with pytest.raises(ValueError):
        c.stats()


def test_sources_round_trip_and_a_missing_one_is_not_found(client, tmp_path):
    import hashlib

    p = tmp_path / "block.pt2"
    p.write_bytes(b"archive bytes")
    # kilnd verifies a source's model hash with its build worker before storing it (the
    # test worker's hash op: the SHA-256 of the file); under another hash it is refused.
    own = hashlib.sha256(b"archive bytes").hexdigest()
    with pytest.raises(kiln.InvalidArgument) as e:
        client.sources.put(HASH, p)
    assert own in e.value.message and HASH in e.value.message and "nothing was stored" in e.value.message
    assert client.sources.list() == []
    info = client.sources.put(own, p, name="named.pt2")
    assert info["model_hash"] == own and info["name"] == "named.pt2"
    assert [s["model_hash"] for s in client.sources.list()] == [own]
    assert client.sources.list(prefix="ff") == []
    with client.sources.get(own) as src:
        assert src.read() == b"archive bytes" and src.path.startswith("/proc/self/fd/")
    with pytest.raises(kiln.NotFound) as e:
        client.sources.get("d" * 64)
    assert "d" * 64 in e.value.message
    with pytest.raises(kiln.InvalidArgument):
        client.sources.list(prefix="NOT HEX")


def test_a_source_sent_without_its_model_hash_is_hashed_by_the_node(make_kilnd, client, tmp_path):
    """What kiln.torch sends (DESIGN.md: the node computes model hashes): no hash; kilnd's
    worker computes it and the reply names it. Another export of the same program (other
    bytes, the same hash: the test worker's "#example-inputs" line, which its hash does not
    cover) gets that source back, nothing stored but its name, kept as one of the source's
    aliases (a second kiln.torch fingerprint of one program). A node that cannot build
    refuses at once."""
    import hashlib

    first, second = tmp_path / "a.pt2", tmp_path / "b.pt2"
    first.write_text('{"behavior": "ok"}\n#example-inputs 1')
    second.write_text('{"behavior": "ok"}\n#example-inputs 2')
    own = hashlib.sha256(b'{"behavior": "ok"}').hexdigest()
    info = client.sources.put(None, first, name="kiln-fp-a.pt2")
    assert info["model_hash"] == own and info["name"] == "kiln-fp-a.pt2"
    again = client.sources.put(None, second, name="kiln-fp-b.pt2")
    assert again == dict(info, aliases=["kiln-fp-b.pt2"])  # the registered source, named once more
    assert [(s["name"], s["aliases"]) for s in client.sources.list()] == [("kiln-fp-a.pt2", ["kiln-fp-b.pt2"])]
    assert client.sources.put(None, second, name="kiln-fp-a.pt2") == again  # a name it has: nothing changes
    with client.sources.get(own) as src:
        assert src.read() == first.read_bytes()
    with pytest.raises(kiln.InvalidArgument):  # with a hash, other bytes are still refused
        client.sources.put(own, second)

    serve_only = make_kilnd(name="serve-only", worker="none")
    serve_only.start()
    with kiln.Client(serve_only.socket) as c:
        with pytest.raises(kiln.Unsupported) as e:
            c.sources.put(None, first)
        assert "cannot compute model hashes" in e.value.message
        assert c.sources.list() == []


def test_builds_on_miss_fail_clearly_and_report_status(kilnd, client, tmp_path):
    def register(behavior):
        text, h = kilnd.source_command(behavior)
        p = tmp_path / f"{behavior}.json"
        p.write_text(text)
        client.sources.put(h, p)
        return h

    ok, bad = register("ok"), register("fail")
    with client.get(key("Built", ok), build=True) as art:
        assert art.read().startswith(b"artifact of ")
        digest = art.key_digest
    assert client.logs(digest)["ok"] is True
    assert client.build(key("Built", ok))["state"] == "present"
    assert any(b["key_digest"] == digest and b["state"] == "done" for b in client.build_status())
    with pytest.raises(kiln.BuildFailed) as e:
        client.get(key("Broken", bad), build=True)
    assert "failed on purpose" in e.value.message
    with pytest.raises(kiln.NoSource):
        client.get(key("Nothing", "e" * 64), build=True)
    with pytest.raises(kiln.InvalidArgument):
        client.get("a" * 64, build=True)  # a digest cannot be built
    with client.get(digest) as art:  # a full digest is a lookup
        assert art.read().startswith(b"artifact of ")
    with pytest.raises(kiln.InvalidArgument) as e:
        client.get(digest[:4])  # a prefix is not: said so, not "a key must be a dict"
    assert "neither a key digest" in e.value.message and "prefix" in e.value.message
    queued = client.build(key("Later", ok), wait=False)
    assert queued["state"] in ("queued", "running", "present")


def test_one_client_shared_by_threads(client):
    errors = []

    def work(n):
        try:
            for i in range(20):
                client.put(key(f"T{n}"), f"{n}-{i}".encode())
                assert client.get(key(f"T{n}")).read() == f"{n}-{i}".encode()
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to uid 65534 needs root (CI runs tests as root)")
def test_another_user_may_read_but_not_write(make_kilnd):
    d = make_kilnd('[access]\nsocket_mode = "0666"\nread_users = ["*"]\n')
    d.start()
    with kiln.Client(d.socket) as c:
        c.put(key(), b"readable")
    # The package and libkiln where uid 65534 can reach them (the checkout may not be).
    tree = tempfile.mkdtemp(prefix="kiln-py-user-", dir="/tmp")
    try:
        shutil.copytree(os.path.dirname(kiln.__file__), os.path.join(tree, "kiln"))
        shutil.copy(os.environ["KILN_LIBRARY"], os.path.join(tree, "libkiln.so"))
        os.chmod(tree, 0o755)
        script = ("import kiln,json,sys\nc=kiln.Client(sys.argv[1])\nout={'read':c.get(json.loads(sys.argv[2])).read().decode()}\n"
                  "try:\n c.put(json.loads(sys.argv[2]),b'x')\nexcept kiln.PermissionDenied as e:\n out['put']=[e.code,e.message]\n"
                  "print(json.dumps(out))\n")
        env = {"PYTHONPATH": tree, "KILN_LIBRARY": os.path.join(tree, "libkiln.so"), "PATH": "/usr/bin:/bin"}
        r = subprocess.run([sys.executable, "-c", script, d.socket, json.dumps(key())], capture_output=True,
                           text=True, env=env, user=65534, group=65534, cwd="/", timeout=60)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["read"] == "readable"
        assert out["put"][0] == kiln.PermissionDenied.code and "the put role" in out["put"][1]
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def test_an_unloadable_kiln_library_is_named(tmp_path):
    env = dict(os.environ, KILN_LIBRARY=str(tmp_path / "libkiln.so"))
    code = "import kiln\ntry:\n kiln.Client('/nonexistent')\nexcept ImportError as e:\n print(e)\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60,
                       cwd=os.path.dirname(os.path.dirname(kiln.__file__)))
    assert "KILN_LIBRARY=" in r.stdout and str(tmp_path) in r.stdout
