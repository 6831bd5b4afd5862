"""A source's model hash (schema/sources.md says what is hashed); the `hash` op that
reports it is sources.py.

The hash covers the exported graph (every node's operation, arguments and output
shape/dtype), the input and output specs (parameter/buffer names, shapes and dtypes), the
values of lifted tensor constants, and the range constraints of dynamic dimensions. It does
not cover parameter or buffer VALUES, node names or stack traces: two fine-tunes of one
block, exported by the same code, hash the same.
"""
import hashlib
import json

from spelling import dim_text, dtype_name

HASH_FORMAT = "kiln-model-hash/1"


def _target_name(target):
    if isinstance(target, str):
        return target
    name = getattr(target, "name", None)
    if callable(name):  # torch OpOverload: "aten::linear" + overload
        return str(target)
    module = getattr(target, "__module__", None) or ""
    qual = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or type(target).__name__
    return f"{module}.{qual}"


def _canon(value, index):
    import torch
    import torch.fx

    if isinstance(value, torch.fx.Node):
        return {"node": index[value]}
    if isinstance(value, (list, tuple)):
        return [_canon(v, index) for v in value]
    if isinstance(value, dict):
        return {str(k): _canon(v, index) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return {"float": repr(value)}
    if isinstance(value, torch.device):
        # The device type, not its index: a graph exported on cuda:0 is the same block on
        # cuda:3 (kilnd builds on whichever GPU of the model is free).
        return {"device": value.type}
    if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
        return {type(value).__name__: str(value)}
    if isinstance(value, slice):
        return {"slice": [_canon(value.start, index), _canon(value.stop, index), _canon(value.step, index)]}
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return {"sym": str(value)}
    if isinstance(value, torch.Tensor):
        return {"tensor": _tensor_meta(value)}
    return {"other": type(value).__qualname__, "str": str(value) if "0x" not in str(value) else ""}


def _tensor_meta(t):
    import torch

    strided = t.layout == torch.strided
    return {"shape": [dim_text(d) for d in t.shape], "dtype": dtype_name(t.dtype),
            "stride": [dim_text(s) for s in t.stride()] if strided else []}


def _val(v):
    import torch

    if isinstance(v, torch.Tensor):
        return _tensor_meta(v)
    if isinstance(v, (list, tuple)):
        return [_val(x) for x in v]
    if v is None:
        return None
    return {"sym": str(v)}


def graph_description(gm):
    import torch.fx

    index, nodes = {}, []
    for i, node in enumerate(gm.graph.nodes):
        index[node] = i
        entry = {"op": node.op, "args": _canon(node.args, index), "kwargs": _canon(node.kwargs, index),
                 "val": _val(node.meta.get("val"))}
        if node.op in ("call_function", "call_method"):
            entry["target"] = _target_name(node.target)
        elif node.op == "get_attr":
            entry["target"] = node.target
            sub = getattr(gm, node.target, None)
            if isinstance(sub, torch.fx.GraphModule):  # higher-order op bodies
                entry["graph"] = graph_description(sub)
        nodes.append(entry)
    return nodes


def _bytes_digest(t):
    import torch

    flat = t.detach().cpu().contiguous().view(-1)
    return hashlib.sha256(flat.view(torch.uint8).numpy().tobytes()).hexdigest()


def hash_document(ep):
    sig = ep.graph_signature
    constants = {}
    for spec in sig.input_specs:
        if spec.kind.name == "CONSTANT_TENSOR":
            constants[spec.target] = _bytes_digest(ep.constants[spec.target])
    return {
        "format": HASH_FORMAT,
        "graph": graph_description(ep.graph_module),
        "inputs": [{"kind": s.kind.name, "target": s.target, "persistent": s.persistent} for s in sig.input_specs],
        "outputs": [{"kind": s.kind.name, "target": s.target} for s in sig.output_specs],
        "constants": constants,
        "range_constraints": {str(k): [str(v.lower), str(v.upper)] for k, v in
                              sorted(ep.range_constraints.items(), key=lambda kv: str(kv[0]))},
        "call_spec": [str(ep.call_spec.in_spec), str(ep.call_spec.out_spec)],
    }


def model_hash(ep):
    doc = json.dumps(hash_document(ep), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256((HASH_FORMAT + "\n" + doc).encode()).hexdigest()
