"""A block call's signature: its structure (the key's `call`) and its tensor leaves.

The traversal is the canonical one of the key (schema/key.md, `call`): args left to right,
then kwargs by name (sorted; Python's str order is UTF-8 byte order), depth first; dict
entries by key, sorted. Tensor leaves are numbered 0..n-1 in that order; `inputs` lists
them in that order.

   call := {"args": [node...], "kwargs": {name: node}}
   node := {"tensor": i} | {"tuple": [...]} | {"list": [...]} | {"dict": {k: node}}
         | {"const": null|bool|int|str} | {"const": {"float": repr}}

Signature.guard is what every call is checked against before a package may run it: the
structure (names, tree shape, constant values) and each tensor's shape, stride, dtype,
device and layout. Two calls with equal guards are interchangeable for a package built for
one of them.
"""
import json

MAX_DEPTH = 32
MAX_NODES = 4096
MAX_CALL_BYTES = 64 * 1024


class Unsupported(Exception):
    """The call holds something a key cannot describe (an object, a non-str dict key, too
    deep); that signature stays eager."""


def canonical_json(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def layout_name(layout):
    return str(layout).replace("torch.", "")


class Signature:
    """call (JSON-able dict), tensors (the leaves, in order), guard (hashable)."""

    __slots__ = ("call", "tensors", "guard", "call_json", "args", "kwargs")

    def __init__(self, call, tensors, guard, args=(), kwargs=None):
        self.args, self.kwargs = tuple(args), dict(kwargs or {})
        self.call = call
        self.tensors = tensors
        self.guard = guard
        self.call_json = guard[0]

    def inputs(self):
        """The key's `inputs`: every tensor leaf's static shape, dtype and layout, in order."""
        return [{"shape": list(t.shape), "dtype": dtype_name(t.dtype), "layout": layout_name(t.layout)}
                for t in self.tensors]

    def devices(self):
        return {t.device for t in self.tensors}


def capture(args, kwargs):
    """The Signature of a call block(*args, **kwargs); raises Unsupported."""
    import torch

    tensors = []
    count = [0]

    def node(v, depth):
        count[0] += 1
        if depth > MAX_DEPTH or count[0] > MAX_NODES:
            raise Unsupported("the call is nested deeper than 32 or has more than 4096 nodes")
        if isinstance(v, torch.Tensor):
            tensors.append(v)
            return {"tensor": len(tensors) - 1}
        if v is None or isinstance(v, (bool, str)):
            return {"const": v}
        if isinstance(v, int):
            if not -(1 << 63) <= int(v) < (1 << 63):
                raise Unsupported("an integer beyond 64 bits in the call")
            return {"const": int(v)}
        if isinstance(v, float):
            return {"const": {"float": repr(v)}}
        if isinstance(v, tuple):  # a namedtuple is a tuple of other code: refused below
            if type(v) is not tuple:
                raise Unsupported(f"a {type(v).__name__} (named tuple) in the call")
            return {"tuple": [node(x, depth + 1) for x in v]}
        if isinstance(v, list):
            if type(v) is not list:
                raise Unsupported(f"a {type(v).__name__} in the call")
            return {"list": [node(x, depth + 1) for x in v]}
        if isinstance(v, dict):
            if type(v) is not dict or not all(isinstance(k, str) for k in v):
                raise Unsupported("a dict whose keys are not all str in the call")
            return {"dict": {k: node(v[k], depth + 1) for k in sorted(v)}}
        raise Unsupported(f"a {type(v).__module__}.{type(v).__qualname__} in the call")

    call = {"args": [node(a, 1) for a in args], "kwargs": {k: node(kwargs[k], 1) for k in sorted(kwargs)}}
    text = canonical_json(call)
    if len(text.encode()) > MAX_CALL_BYTES:
        raise Unsupported("the call's structure exceeds 64 KiB")
    metas = tuple((tuple(t.shape), tuple(t.stride()), t.dtype, t.device, t.layout) for t in tensors)
    return Signature(call, tensors, (text, metas), args, kwargs)
