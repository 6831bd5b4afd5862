"""The structure of a block's call (schema/key.md, "call"): from torch.export's in_spec to
the key's `call` and `inputs`, and back to the arguments the block is called with.

torch.export records how the exported block was called as a pytree spec of (args, kwargs)
(`ep.call_spec.in_spec`) whose leaves are the program's user inputs, in torch's flat
order. kiln's key numbers tensor leaves in its own canonical order (args left to right,
then kwargs by name, dict entries by key), so that a client computes the same key from a
live call without torch.export. This module converts between the two. No torch import:
spec objects are read through `type`, `context`, `is_leaf()` and `children()`.
"""
from report import WorkerError

MAX_DEPTH = 32


def _children(spec):
    ch = getattr(spec, "children", None)
    if callable(ch):
        return list(ch())
    return list(getattr(spec, "children_specs", None) or [])


def _type_name(t):
    return getattr(t, "__name__", str(t))


def tree_from_spec(spec, leaves):
    """A plain tree of the call: ("tuple"|"list", [..]) | ("dict", {key: ..}) |
    ("const", value) | ("leaf", flat index). `leaves` is the flat list of the program's user
    inputs: ("tensor", meta) or ("const", value), in the spec's leaf order."""
    counter = [0]

    def walk(s, path, depth):
        if depth > MAX_DEPTH:
            raise WorkerError(f"the block's call at {path} is nested deeper than {MAX_DEPTH} levels")
        if s.is_leaf():
            i = counter[0]
            counter[0] += 1
            if i >= len(leaves):
                raise WorkerError(f"the exported call spec has more leaves than the program has user inputs ({len(leaves)})")
            kind, value = leaves[i]
            return ("leaf", i) if kind == "tensor" else ("const", value)
        t = s.type
        kids = _children(s)
        if t is type(None):
            return ("const", None)
        if t is tuple:
            return ("tuple", [walk(c, f"{path}[{j}]", depth + 1) for j, c in enumerate(kids)])
        if t is list:
            return ("list", [walk(c, f"{path}[{j}]", depth + 1) for j, c in enumerate(kids)])
        if t is dict:
            keys = list(s.context)
            if not all(isinstance(k, str) for k in keys):
                raise WorkerError(f"the block's call at {path} is a dict with non-string keys {keys!r}; kiln keys "
                                  "describe dicts with string keys only")
            return ("dict", {k: walk(c, f"{path}.{k}", depth + 1) for k, c in zip(keys, kids)})
        raise WorkerError(f"the block's call at {path} holds a {_type_name(t)}; kiln keys describe tensors, "
                          "tuples, lists, dicts with string keys, None and constants (bool, int, float, str)")

    root = walk(spec, "call", 0)
    if counter[0] != len(leaves):
        raise WorkerError(f"the exported call spec has {counter[0]} leaves but the program takes {len(leaves)} user inputs")
    if root[0] != "tuple" or len(root[1]) != 2 or root[1][0][0] != "tuple" or root[1][1][0] != "dict":
        raise WorkerError("the exported call spec is not (args, kwargs)")
    return {"args": root[1][0][1], "kwargs": root[1][1][1]}


def const_json(value, path):
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        if not -(2**63) <= value < 2**64:
            raise WorkerError(f"the constant at {path} ({value}) does not fit in 64 bits")
        return value
    if isinstance(value, float):
        return {"float": repr(value)}
    raise WorkerError(f"the constant at {path} is a {type(value).__name__}; kiln keys hold None, bool, int, float and str constants")


def canonical(call):
    """(call JSON of schema/key.md, order): order[k] is the flat index of the k-th tensor leaf
    in canonical order (args in order, then kwargs by name, dict entries by key)."""
    order = []

    def node(t, path):
        kind = t[0]
        if kind == "leaf":
            order.append(t[1])
            return {"tensor": len(order) - 1}
        if kind == "const":
            return {"const": const_json(t[1], path)}
        if kind in ("tuple", "list"):
            return {kind: [node(c, f"{path}[{j}]") for j, c in enumerate(t[1])]}
        return {"dict": {k: node(t[1][k], f"{path}.{k}") for k in sorted(t[1], key=lambda s: s.encode())}}

    args = [node(t, f"args[{j}]") for j, t in enumerate(call["args"])]
    kwargs = {k: node(call["kwargs"][k], k) for k in sorted(call["kwargs"], key=lambda s: s.encode())}
    return {"args": args, "kwargs": kwargs}, order


def positional(n):
    return {"args": [{"tensor": i} for i in range(n)], "kwargs": {}}


def build_arguments(call_json, tensors):
    """(args, kwargs) to call a block with, from a key's call and its tensors (canonical order)."""
    def value(node):
        (kind, body), = node.items()
        if kind == "tensor":
            return tensors[body]
        if kind == "const":
            if isinstance(body, dict):
                return float(body["float"])
            return body
        if kind == "tuple":
            return tuple(value(c) for c in body)
        if kind == "list":
            return [value(c) for c in body]
        return {k: value(c) for k, c in body.items()}

    return [value(n) for n in call_json.get("args", [])], {k: value(n) for k, n in call_json.get("kwargs", {}).items()}


def flat_order_of(canonical_tensors, order):
    """The tensors in torch.export's flat order of leaves (what AOTI's loader.run takes:
    tensor leaves only; constants are baked into the program)."""
    return [t for _, t in sorted(zip(order, canonical_tensors), key=lambda p: p[0])]
