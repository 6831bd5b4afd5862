"""kiln.Client: the node's kilnd from Python, over libkiln's C API.

    import kiln
    with kiln.Client() as c:                      # $KILN_SOCKET or the default socket
        art = c.get(key)                          # None on a miss
        if art is not None:
            with art:
                loader(art.path)                  # "/proc/self/fd/N"

Keys are dicts in the JSON form of schema/key.md ({"kind": "aoti", "model_hash": ...,
"region": ..., "dtype": ..., "inputs": [...], ...}; node fields may be left out: kilnd
fills them) or, where one artifact is looked up, the 64-hex digest of a complete key.

Errors: every failure raises the kiln.errors class of its code (Unavailable when no
daemon answers or the connection was lost: nothing is retried behind the caller's back,
and the NEXT call connects again; PermissionDenied naming the role kilnd wants;
InvalidArgument for bad input, found before anything is sent where possible). A miss is
not an error: get() and stat() return None.

Thread safety: a Client may be shared by threads; libkiln serializes its calls on the one
connection (make one Client per thread for parallel requests). close() must not race with
calls in flight. Artifact and Source objects are independent of their Client (they keep
their descriptor after it closes) and may be read from several threads; close() them once.
"""
import ctypes
import io  # noqa: F401  (annotations)
import json
import mmap
import os
import threading
from typing import Any, Dict, List, Optional, Union

from . import _capi
from .errors import InvalidArgument, KilnError, from_status

# A key: a dict in schema/key.md's JSON form (or that JSON as text), or where one artifact
# is looked up, a complete key's 64-hex digest.
KeyLike = Union[Dict[str, Any], str]
PathLike = Union[str, "os.PathLike[str]"]


def _check(status):
    if status != 0:
        lib = _capi.lib()
        raise from_status(status, lib.kiln_last_error().decode("utf-8", "replace"))


def _b(text):
    return None if text is None else text.encode("utf-8")


class _KeyHandle:
    """A kiln_key made from a key dict (or JSON text), freed on exit."""

    def __init__(self, key):
        if isinstance(key, dict):
            text = json.dumps(key)
        elif isinstance(key, str) and key.lstrip().startswith("{"):
            text = key
        else:
            raise InvalidArgument(f"a key must be a dict in the JSON form of schema/key.md (or, where a call takes "
                                  f"one, a 64-hex key digest), not {type(key).__name__}")
        self.ptr = ctypes.c_void_p()
        _check(_capi.lib().kiln_key_from_json(_b(text), ctypes.byref(self.ptr)))

    def __enter__(self):
        return self.ptr

    def __exit__(self, *exc):
        _capi.lib().kiln_key_free(self.ptr)


class _Lookup:
    """(key handle or None, digest bytes or None) for calls that take either."""

    def __init__(self, what):
        self.handle = None
        self.digest = None
        if isinstance(what, str) and not what.lstrip().startswith("{"):
            if len(what) != 64 or any(c not in "0123456789abcdef" for c in what):
                raise InvalidArgument(f"{what[:80]!r} is neither a key digest (64 lowercase hex characters: a "
                                      "prefix is not enough here; kilnctl ls shows full digests) nor a key "
                                      "(a dict in the JSON form of schema/key.md)")
            self.digest = what.encode("ascii")
        else:
            self.handle = _KeyHandle(what)

    def __enter__(self):
        return (self.handle.__enter__() if self.handle else None), self.digest

    def __exit__(self, *exc):
        if self.handle:
            self.handle.__exit__(*exc)


def _out_string():
    return ctypes.c_void_p()


class _Closes:
    """A context manager that close()s on exit and, as a last resort, when collected."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class _Blob(_Closes):
    """Bytes handed over by kilnd behind a read-only descriptor (shared by Artifact, Source)."""

    _free = None

    def __init__(self, ptr, fd_fn, size_fn, path_fn, info_fn):
        lib = _capi.lib()
        self._ptr = ptr
        self._lock = threading.Lock()
        self._map = None
        self.fd = getattr(lib, fd_fn)(ptr)
        self.size = int(getattr(lib, size_fn)(ptr))
        self.path = getattr(lib, path_fn)(ptr).decode("utf-8")
        self.info = json.loads(getattr(lib, info_fn)(ptr).decode("utf-8"))

    def __fspath__(self):
        return self.path

    def open(self) -> "io.BufferedReader":
        """A new binary file object on the bytes, with its own offset (close it yourself)."""
        self._alive()
        return open(self.path, "rb")

    def read(self) -> bytes:
        """The whole content as bytes."""
        self._alive()
        return os.pread(self.fd, self.size, 0) if self.size else b""

    def buffer(self) -> memoryview:
        """A read-only memoryview of the bytes (a shared mapping, no copy), valid until close()."""
        self._alive()
        with self._lock:
            if self._map is None:
                self._map = mmap.mmap(self.fd, self.size, prot=mmap.PROT_READ) if self.size else b""
            return memoryview(self._map)

    def close(self) -> None:
        """Releases the descriptor and mapping; path, fd and buffers are invalid after."""
        with self._lock:
            if self._ptr is None:
                return
            if isinstance(self._map, mmap.mmap):
                try:
                    self._map.close()
                except BufferError:
                    pass  # a memoryview still exports it; the mapping goes with the last one
            self._map = None
            getattr(_capi.lib(), self._free)(self._ptr)
            self._ptr = None

    @property
    def closed(self):
        return self._ptr is None

    def _alive(self):
        if self._ptr is None:
            raise ValueError(f"{type(self).__name__} is closed")


class Artifact(_Blob):
    """A hit: the artifact's verified bytes behind a read-only descriptor owned by this object.

    Usable as a path (`path`, os.fspath(art): "/proc/self/fd/N", valid in this process while
    the Artifact is open), a file object (open()), a buffer (buffer(), no copy) or bytes
    (read()). `info` is kilnd's metadata (key, key_digest, size, ...). A context manager;
    close() releases the descriptor (a library that loaded from the path keeps its own copy
    only if it opened one)."""

    _free = "kiln_artifact_free"

    def __init__(self, ptr):
        super().__init__(ptr, "kiln_artifact_fd", "kiln_artifact_size", "kiln_artifact_path",
                         "kiln_artifact_info_json")
        self.key = self.info.get("key")
        self.key_digest = self.info.get("key_digest")


class Source(_Blob):
    """A registered source (a torch.export archive) as handed over by kilnd; like Artifact."""

    _free = "kiln_source_free"

    def __init__(self, ptr):
        super().__init__(ptr, "kiln_source_fd", "kiln_source_size", "kiln_source_path", "kiln_source_info_json")
        self.model_hash = self.info.get("model_hash")


class Sources:
    """client.sources: the daemon's registered sources (list, get, put)."""

    def __init__(self, client):
        self._client = client

    def list(self, prefix: str = "") -> List[Dict[str, Any]]:
        """Every registered source whose model hash starts with `prefix` (lowercase hex), as
        dicts {model_hash, blob_digest, size, stored_size, created_at, name, and "aliases"
        when later registrations of the same program named it too}; all pages."""
        out, offset = [], 0
        while True:
            page = self._client._json_call("kiln_list_sources",
                                           json.dumps({"model_hash_prefix": prefix, "offset": offset}))
            out.extend(page.get("items", []))
            if "next_offset" not in page:
                return out
            offset = page["next_offset"]

    def get(self, model_hash: str) -> "Source":
        """The Source of `model_hash`. NotFound if none is registered (unlike a get miss)."""
        ptr = ctypes.c_void_p()
        _check(_capi.lib().kiln_get_source(self._client._handle(), _b(model_hash), ctypes.byref(ptr)))
        return Source(ptr)

    def put(self, model_hash: Optional[str], path: PathLike, name: Optional[str] = None) -> Dict[str, Any]:
        """Registers the file at `path` as the source of `model_hash` (build role; put on a
        node that cannot verify sources); returns its metadata. model_hash None: the node computes it with its build worker (the returned
        metadata's "model_hash"; an existing source of that hash is returned as is), and a
        node that cannot build raises Unsupported. A node that builds hashes the file with its build worker first and raises
        InvalidArgument (naming both hashes; nothing stored) when it hashes to another model
        hash, Timeout when the hash op runs past the node's limit. The same bytes again are
        accepted; other bytes under a hash that has a source raise InvalidArgument (a source
        is never replaced). schema/sources.md."""
        out = _out_string()
        _check(_capi.lib().kiln_put_source_file(self._client._handle(), _b(model_hash), _b(name),
                                                _b(os.fspath(path)), ctypes.byref(out)))
        return json.loads(_capi.take_string(out.value))


class Client(_Closes):
    """A connection to kilnd (see the module's docstring for errors and threads).

    Client(socket=None, streaming=False): socket None -> $KILN_SOCKET, else the default
    socket search (the user's kilnd, then the system's). Raises Unavailable when no daemon
    answers. streaming=True has hits streamed instead of passed as descriptors."""

    def __init__(self, socket: Optional[PathLike] = None, streaming: bool = False) -> None:
        lib = _capi.lib()
        self._ptr = ctypes.c_void_p()
        self._close_lock = threading.Lock()
        connect = lib.kiln_connect_streaming if streaming else lib.kiln_connect
        _check(connect(_b(os.fspath(socket)) if socket else None, ctypes.byref(self._ptr)))
        self.sources = Sources(self)

    # ---- artifacts -----------------------------------------------------------------
    def get(self, key: KeyLike, build: bool = False, wait: Optional[float] = None) -> Optional["Artifact"]:
        """The Artifact for `key` (dict, or a complete key's digest), or None on a miss.

        build=True (a key dict only): a miss is built by kilnd from the source registered
        for the key's model hash and waited for (`wait` seconds, None = kilnd's build
        timeout); raises NoSource, BuildFailed, Unsupported or Timeout then."""
        lib = _capi.lib()
        ptr = ctypes.c_void_p()
        if build:
            if not isinstance(key, (dict, str)) or (isinstance(key, str) and not key.lstrip().startswith("{")):
                raise InvalidArgument("get(build=True) needs the key's fields, not only its digest")
            wait_ms = 0 if wait is None else max(1, int(wait * 1000))
            with _KeyHandle(key) as k:
                status = lib.kiln_get_build(self._handle(), k, wait_ms, ctypes.byref(ptr))
        else:
            with _Lookup(key) as (k, digest):
                status = lib.kiln_get(self._handle(), k, digest, ctypes.byref(ptr))
        if status == 2 and not build:  # KILN_NOT_FOUND: a miss
            return None
        _check(status)
        return Artifact(ptr)

    def stat(self, key: KeyLike) -> Optional[Dict[str, Any]]:
        """kilnd's metadata for `key` (dict or digest) as a dict, or None when not stored."""
        out = _out_string()
        with _Lookup(key) as (k, digest):
            status = _capi.lib().kiln_stat(self._handle(), k, digest, ctypes.byref(out))
        if status == 2:
            return None
        _check(status)
        return json.loads(_capi.take_string(out.value))

    def put(self, key: KeyLike, data: bytes, pin: bool = False) -> Dict[str, Any]:
        """Stores `data` (bytes-like) as the artifact for `key`; returns its metadata."""
        data = bytes(data)
        out = _out_string()
        with _KeyHandle(key) as k:
            _check(_capi.lib().kiln_put(self._handle(), k, data, len(data), int(bool(pin)), ctypes.byref(out)))
        return json.loads(_capi.take_string(out.value))

    def put_file(self, key: KeyLike, path: PathLike, pin: bool = False) -> Dict[str, Any]:
        """Stores the file at `path` (read as it goes) as the artifact for `key`."""
        out = _out_string()
        with _KeyHandle(key) as k:
            _check(_capi.lib().kiln_put_file(self._handle(), k, _b(os.fspath(path)), int(bool(pin)),
                                             ctypes.byref(out)))
        return json.loads(_capi.take_string(out.value))

    def ls(self, filters: Optional[Dict[str, str]] = None, pinned: Optional[bool] = None) -> List[Dict[str, Any]]:
        """Every stored artifact's metadata matching `filters` ({key field: value}), all pages."""
        out, offset = [], 0
        while True:
            query = {"offset": offset}
            if filters:
                query["filters"] = filters
            if pinned is not None:
                query["pinned"] = bool(pinned)
            page = self._json_call("kiln_list", json.dumps(query))
            out.extend(page.get("items", []))
            if "next_offset" not in page:
                return out
            offset = page["next_offset"]

    def remove(self, key: KeyLike) -> Any:
        """Removes the artifact; False if none was stored."""
        return self._key_op("kiln_remove", key)

    def pin(self, key: KeyLike) -> Any:
        return self._key_op("kiln_pin", key)

    def unpin(self, key: KeyLike) -> Any:
        return self._key_op("kiln_unpin", key)

    # ---- builds --------------------------------------------------------------------
    def build(self, key: KeyLike, wait: bool = False, force: bool = False,
              timeout: Optional[float] = None, idle: bool = False) -> Dict[str, Any]:
        """Asks kilnd to build `key` from its registered source (build role). wait=False returns
        at once: {"state": "queued"|"running"|"present", "key_digest", "handle"}; wait=True
        returns {"state": "done", ...} or raises BuildFailed/NoSource/Timeout. idle=True (with
        wait=False only): the build runs in the node's idle time, on a build slot with nothing
        else to do, and is set aside whenever another build needs the slot (a kilnd that
        predates it ignores it and builds the key as a prewarm)."""
        if idle and wait:
            raise ValueError("an idle build is not waited for: idle=True takes wait=False")
        body = {"key": key, "wait": bool(wait), "force": bool(force)}
        if idle:
            body["idle"] = True
        if timeout is not None:
            body["wait_ms"] = max(1, int(timeout * 1000))
        return self.request("BUILD", body)

    def build_status(self, key_digest: Optional[str] = None, handle: Optional[str] = None) -> List[Dict[str, Any]]:
        """kilnd's builds (all, or of one key digest / handle): a list of dicts with state,
        error, times."""
        body = {}
        if key_digest:
            body["key_digest"] = key_digest
        if handle:
            body["handle"] = handle
        return self.request("BUILD_STATUS", body).get("builds", [])

    def logs(self, key_digest: str) -> Dict[str, Any]:
        """The newest build record of a key digest ({ok, error, log, ...}) or None."""
        reply = self.request("LOGS", {"key_digest": key_digest})
        return reply.get("record") if reply.get("found") else None

    def status(self) -> Dict[str, Any]:
        """The daemon's status: version, node fields, this peer's roles, GPUs, build slots."""
        return self._json_call("kiln_daemon_status")

    def stats(self) -> Dict[str, Any]:
        """{"store": {...}, "daemon": {...}} counters."""
        return self._json_call("kiln_stats")

    def request(self, name: str, body: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """Any request with one JSON reply, by its name in schema/protocol.md."""
        out = _out_string()
        _check(_capi.lib().kiln_request(self._handle(), _b(name), _b(json.dumps(body or {})), ctypes.byref(out)))
        return json.loads(_capi.take_string(out.value))

    @staticmethod
    def key_digest(key: KeyLike) -> str:
        """The digest (64 hex) of a complete key dict; InvalidArgument names missing fields."""
        buf = ctypes.create_string_buffer(65)
        with _KeyHandle(key) as k:
            _check(_capi.lib().kiln_key_digest(k, buf))
        return buf.value.decode("ascii")

    # ---- life ----------------------------------------------------------------------
    def close(self):
        """Closes the connection (idempotent). Artifacts already handed over stay valid."""
        with self._close_lock:
            if self._ptr is not None:
                _capi.lib().kiln_client_free(self._ptr)
                self._ptr = None

    def _handle(self):
        if self._ptr is None:
            raise ValueError("the kiln Client is closed")
        return self._ptr

    def _json_call(self, fn, *args):
        out = _out_string()
        _check(getattr(_capi.lib(), fn)(self._handle(), *[_b(a) for a in args], ctypes.byref(out)))
        return json.loads(_capi.take_string(out.value))

    def _key_op(self, fn, key):
        with _Lookup(key) as (k, digest):
            status = getattr(_capi.lib(), fn)(self._handle(), k, digest)
        if status == 2:
            return False
        _check(status)
        return True


__all__ = ["Client", "Artifact", "Source", "KilnError"]
