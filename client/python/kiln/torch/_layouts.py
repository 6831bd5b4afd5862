"""Input layouts of compiled blocks, kept between processes, so that the prefetch can run a
package once before the model's first call (the warm-up, _runtime.Runtime._prefetch).

A package's first run loads its kernels: 0.12 s for the FLUX double-stream block on the
H100, inside a hit's first forward (RESULTS-python.md). Running it earlier needs inputs of
exactly the layout the package was compiled for, and the key names shapes and dtypes, not
strides: a kernel compiled for other strides could read past a tensor made here. So the
first compiled call of a key in a process records its inputs' layout under the key digest,
in the per-user cache folder (_node._cache_dir()/layouts/<key digest>.json):

  {"format": 1, "call": <the key's call>, "inputs": [{"shape", "stride", "dtype"}, ...]}

and a later process warms a package only when that record exists and agrees with the
key's inputs (shapes, dtypes, count). The record is the package's own layout: a key
digest covers the model hash, which covers the exported call's strides
(schema/python-fingerprint.md), and only a call that passed the key's guard writes it.
Warm-up tensors are zeros on a storage that holds every element the recorded strides
reach. The folder is trusted as the user's other caches are (torch's hold pickles).
"""
import json
import os
import tempfile

from . import _node

FORMAT = 1


def path(key_digest):
    return os.path.join(_node._cache_dir(), "layouts", f"{key_digest}.json")


def of(signature):
    """The layout document of `signature` (a _signature.Signature)."""
    return {"format": FORMAT, "call": signature.call,
            "inputs": [{"shape": list(t.shape), "stride": list(t.stride()), "dtype": str(t.dtype).replace("torch.", "")}
                       for t in signature.tensors]}


def record(key_digest, doc):
    """Writes `doc` (of() of a signature that ran the package of `key_digest`) unless a
    layout is there; atomic (a reader sees a whole file or none). A folder that cannot be
    written costs only the warm-up of later processes."""
    target = path(key_digest)
    if os.path.exists(target):
        return
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".tmp-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        os.replace(tmp, target)
    except OSError:
        pass


def load(key_digest, key_inputs):
    """The recorded layout of `key_digest` when there is one that agrees with the key's
    `inputs` (shapes and dtypes, in order); else None."""
    try:
        with open(path(key_digest), encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return agreeing(doc, key_inputs)


def agreeing(doc, key_inputs):
    """`doc` when it is a layout that agrees with the key's `inputs`; else None (also for a
    `doc` that is None or no layout at all)."""
    inputs = doc.get("inputs") if isinstance(doc, dict) and doc.get("format") == FORMAT else None
    if not isinstance(inputs, list) or len(inputs) != len(key_inputs or []):
        return None
    if _has_multi_key_dict(doc.get("call")):
        # A dict's leaves reach the package in the dict's own order, which the call (sorted
        # by key) does not keep: rebuilt here, they could go to the wrong inputs.
        return None
    for got, want in zip(inputs, key_inputs):
        if not isinstance(got, dict) or got.get("shape") != want.get("shape") or got.get("dtype") != want.get("dtype"):
            return None
        stride = got.get("stride")
        if not isinstance(stride, list) or len(stride) != len(got["shape"]) or \
                not all(isinstance(s, int) and s >= 0 for s in stride + got["shape"]):
            return None
    return doc


def _has_multi_key_dict(node):
    if isinstance(node, dict):
        if isinstance(node.get("dict"), dict) and len(node["dict"]) > 1:
            return True
        return any(_has_multi_key_dict(v) for v in node.values())
    if isinstance(node, list):
        return any(_has_multi_key_dict(v) for v in node)
    return False


def zeros(layout, device):
    """One zero tensor per recorded input, with the recorded shape, stride and dtype, on a
    storage large enough for every element those strides reach."""
    import torch

    out = []
    for t in layout["inputs"]:
        shape, stride = t["shape"], t["stride"]
        span = 0 if 0 in shape else 1 + sum((n - 1) * s for n, s in zip(shape, stride))
        base = torch.zeros(span, dtype=getattr(torch, t["dtype"]), device=device)
        out.append(base.as_strided(shape, stride))
    return out
