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

Strides are taken canonically: a dimension of size 1 is never stepped over, so its stride
means nothing, yet views give it any value (diffusers' FLUX hands its first single-stream
block a fresh tensor and the others slices of a concatenation: batch strides 512*3072 and
4608*3072 for one layout). capture() gives such a dimension the stride a contiguous
neighbour implies and calls with that zero-copy view, so the export, the fingerprint, the
guard and the package all see one stride.
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


def canonical_strides(shape, stride):
    """`stride` with every size-1 dimension's stride replaced by the one a contiguous
    neighbour implies (the next dimension's stride times its size; 1 for the last)."""
    out = list(stride)
    for i in range(len(out) - 1, -1, -1):
        if shape[i] == 1:
            out[i] = out[i + 1] * max(shape[i + 1], 1) if i + 1 < len(out) else 1
    return tuple(out)


def _canonical_view(t):
    """t, or a zero-copy view of it whose size-1 dimensions have canonical strides."""
    import torch

    if t.layout != torch.strided or 1 not in t.shape:
        return t
    stride = t.stride()
    canon = canonical_strides(t.shape, stride)
    return t if canon == stride else t.as_strided(t.shape, canon, t.storage_offset())


def capture(args, kwargs):
    """The Signature of a call block(*args, **kwargs); raises Unsupported. Its args and
    kwargs are the call's, with tensors given canonical strides (see above): call with
    them, not the originals."""
    import torch

    tensors = []
    count = [0]

    def node(v, depth):  # -> (description, the value to call with)
        count[0] += 1
        if depth > MAX_DEPTH or count[0] > MAX_NODES:
            raise Unsupported("the call is nested deeper than 32 or has more than 4096 nodes")
        if isinstance(v, torch.Tensor):
            v = _canonical_view(v)
            tensors.append(v)
            return {"tensor": len(tensors) - 1}, v
        if v is None or isinstance(v, (bool, str)):
            return {"const": v}, v
        if isinstance(v, int):
            if not -(1 << 63) <= int(v) < (1 << 63):
                raise Unsupported("an integer beyond 64 bits in the call")
            return {"const": int(v)}, v
        if isinstance(v, float):
            return {"const": {"float": repr(v)}}, v
        if isinstance(v, tuple):  # a namedtuple is a tuple of other code: refused below
            if type(v) is not tuple:
                raise Unsupported(f"a {type(v).__name__} (named tuple) in the call")
            pairs = [node(x, depth + 1) for x in v]
            return {"tuple": [d for d, _ in pairs]}, tuple(x for _, x in pairs)
        if isinstance(v, list):
            if type(v) is not list:
                raise Unsupported(f"a {type(v).__name__} in the call")
            pairs = [node(x, depth + 1) for x in v]
            return {"list": [d for d, _ in pairs]}, [x for _, x in pairs]
        if isinstance(v, dict):
            if type(v) is not dict or not all(isinstance(k, str) for k in v):
                raise Unsupported("a dict whose keys are not all str in the call")
            # Values in the dict's own order (what the block sees); descriptions by key.
            pairs = {k: node(v[k], depth + 1) for k in sorted(v)}
            return {"dict": {k: d for k, (d, _) in pairs.items()}}, {k: pairs[k][1] for k in v}
        raise Unsupported(f"a {type(v).__module__}.{type(v).__qualname__} in the call")

    arg_pairs = [node(a, 1) for a in args]
    kwarg_pairs = {k: node(kwargs[k], 1) for k in sorted(kwargs)}
    call = {"args": [d for d, _ in arg_pairs], "kwargs": {k: d for k, (d, _) in kwarg_pairs.items()}}
    text = canonical_json(call)
    if len(text.encode()) > MAX_CALL_BYTES:
        raise Unsupported("the call's structure exceeds 64 KiB")
    metas = tuple((tuple(t.shape), tuple(t.stride()), t.dtype, t.device, t.layout) for t in tensors)
    new_args = tuple(x for _, x in arg_pairs)
    new_kwargs = {k: kwarg_pairs[k][1] for k in kwargs}
    return Signature(call, tensors, (text, metas), new_args, new_kwargs)


def build_arguments(call, tensors):
    """(args, kwargs) of the call structure `call` (a Signature's `call`) with `tensors` as
    its tensor leaves, in order: what capture() described, rebuilt."""

    def value(node):
        if "tensor" in node:
            return tensors[node["tensor"]]
        if "tuple" in node:
            return tuple(value(n) for n in node["tuple"])
        if "list" in node:
            return [value(n) for n in node["list"]]
        if "dict" in node:
            return {k: value(n) for k, n in node["dict"].items()}
        const = node["const"]
        return float(const["float"]) if isinstance(const, dict) else const

    return tuple(value(n) for n in call["args"]), {k: value(n) for k, n in call["kwargs"].items()}
