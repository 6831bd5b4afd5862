"""A source's model hash (schema/sources.md says what is hashed); the `hash` op that
reports it is sources.py.

The hash covers the exported graph (every node's operation, arguments and output
shape/dtype), the input and output specs (parameter/buffer names, shapes and dtypes), the
values of lifted tensor constants, and the range constraints of dynamic dimensions. It does
not cover parameter or buffer VALUES, node names or stack traces: two fine-tunes of one
block, exported by the same code, hash the same.

User code the graph only names is hashed by content: a user-defined Triton kernel called
through torch's triton_kernel_wrapper_functional/_mutation (its source with the jit
functions it calls, its autotune configs, and its constant arguments, never the process-
local side-table indexes), and a custom operator's Python implementation where torch has
it (torch.library.custom_op / triton_op: the functions' source and the Triton kernels they
call). Devices are hashed by type, never index, whether the graph holds a torch.device or a
string ("cuda:3").
"""
import hashlib
import inspect
import json
import textwrap

from spelling import dim_text, dtype_name

HASH_FORMAT = "kiln-model-hash/1"

# Torch's own operator namespaces: their code ships with the torch version the key names.
_TORCH_NAMESPACES = {"aten", "prims", "prim", "_c10d_functional", "c10d_functional", "_dtensor", "quantized",
                     "_quantized", "rngprims", "profiler", "inductor", "higher_order", "_test", "debugprims",
                     "_c10d_functional_autograd", "mkldnn", "quantized_decomposed", "onednn", "fbgemm_internal"}
_TRITON_WRAPPERS = ("triton_kernel_wrapper_functional", "triton_kernel_wrapper_mutation")
_MAX_DEPTH = 4


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


def _sha256_text(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _source_text(fn):
    """The source of a Python function, dedented; "" where Python has none (a builtin)."""
    try:
        return textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return ""


def _is_triton_kernel(obj):
    """A triton.jit function, or a wrapper of one (autotune, heuristics): duck-typed, so
    this module needs no Triton where none is called."""
    for _ in range(_MAX_DEPTH):
        if obj is None:
            return False
        if type(obj).__name__ == "JITFunction" or (hasattr(obj, "src") and hasattr(obj, "arg_names")):
            return True
        obj = getattr(obj, "fn", None)
    return False


def triton_kernel_description(kernel):
    """What a user-defined Triton kernel computes, free of process-dependent values: the
    SHA-256 of its source (with the jit functions it calls, as torch's own FX graph cache
    hashes it), the wrappers' tuning (autotune configs, heuristics), its name."""
    wrappers = []
    for _ in range(_MAX_DEPTH):
        if type(kernel).__name__ == "JITFunction" or hasattr(kernel, "arg_names"):
            break
        entry = {"wrapper": type(kernel).__name__}
        configs = getattr(kernel, "configs", None)
        if configs:
            entry["configs"] = sorted(sorted(str(kv) for kv in (c.all_kwargs() if hasattr(c, "all_kwargs") else
                                                                 vars(c)).items()) for c in configs)
        if getattr(kernel, "keys", None) is not None and isinstance(kernel.keys, (list, tuple)):
            entry["keys"] = [str(k) for k in kernel.keys]
        values = getattr(kernel, "values", None)
        if isinstance(values, dict):  # triton.heuristics: name -> function of the arguments
            entry["heuristics"] = {str(k): _sha256_text(_source_text(v)) for k, v in sorted(values.items())}
        wrappers.append(entry)
        kernel = kernel.fn
    source = None
    try:  # torch's own closure of the kernel's source (the jit functions it calls, constexprs)
        from torch._inductor.codegen.wrapper import user_defined_triton_kernel_transitive_closure_source_code
        source = user_defined_triton_kernel_transitive_closure_source_code(kernel)
    except Exception:  # noqa: BLE001 - older torch, or not a real JITFunction: its own source
        source = None
    if not source:
        source = getattr(kernel, "src", None) or _source_text(getattr(kernel, "fn", kernel))
    fn = getattr(kernel, "fn", kernel)
    return {"name": getattr(fn, "__name__", type(kernel).__name__), "source_sha256": _sha256_text(source),
            "wrappers": wrappers}


def _referenced_objects(fn):
    """The objects a function refers to by name (globals it reads, cells it closes over)."""
    code = getattr(fn, "__code__", None)
    out = []
    if code is not None:
        names = set(code.co_names)
        for const in code.co_consts:  # nested functions' names (grid lambdas, inner helpers)
            if hasattr(const, "co_names"):
                names.update(const.co_names)
        glb = getattr(fn, "__globals__", {})
        out.extend(glb[n] for n in sorted(names) if n in glb)
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            out.append(cell.cell_contents)
        except ValueError:  # an empty cell
            pass
    return out


def function_description(fn, depth=0, seen=None):
    """A Python implementation by content: the SHA-256 of its source, the Triton kernels it
    calls and, for a wrapper closing over the user's function (torch.library.triton_op's
    backend), that function too. Not: its module, address or position in the file."""
    seen = set() if seen is None else seen
    fn = inspect.unwrap(fn) if callable(fn) else fn
    if id(fn) in seen or depth > _MAX_DEPTH:
        return None
    seen.add(id(fn))
    kernels, inner = {}, []
    for obj in _referenced_objects(fn):
        if _is_triton_kernel(obj):
            d = triton_kernel_description(obj)
            kernels[d["source_sha256"] + d["name"]] = d
        elif inspect.isfunction(obj) and getattr(obj, "__code__", None) is not None and \
                not getattr(obj, "__module__", "").startswith(("torch", "triton")):
            sub = function_description(obj, depth + 1, seen)
            if sub is not None:
                inner.append(sub)
    return {"source_sha256": _sha256_text(_source_text(fn)), "triton_kernels": [kernels[k] for k in sorted(kernels)],
            "calls": sorted(inner, key=lambda d: json.dumps(d, sort_keys=True))}


def custom_op_description(target):
    """The Python implementation of a custom operator (torch.library.custom_op / triton_op)
    by content, or None: torch's own operators, and operators whose implementation is not
    Python (C++ extensions: their library version is the user's to key), are hashed by name."""
    if getattr(target, "_schema", None) is None:  # not an operator (operator.getitem, ...)
        return None
    name = getattr(target, "namespace", None) or str(target).split(".")[0].split("::")[0]
    if name in _TORCH_NAMESPACES:
        return None
    try:
        from torch._library.custom_ops import _maybe_get_opdef
        opdef = _maybe_get_opdef(target)
    except Exception:  # noqa: BLE001 - a torch without torch.library custom ops
        opdef = None
    if opdef is None:
        return None
    fns = [getattr(opdef, "_init_fn", None), getattr(opdef, "_abstract_fn", None)]
    fns += [v for _, v in sorted((getattr(opdef, "_backend_fns", None) or {}).items(), key=lambda kv: str(kv[0]))]
    parts = [function_description(f) for f in fns if callable(f)]
    return {"implementation": [p for p in parts if p is not None]}


def _is_triton_wrapper(target):
    return getattr(target, "__name__", None) in _TRITON_WRAPPERS or \
        (callable(getattr(target, "name", None)) and str(target) in _TRITON_WRAPPERS)


def _triton_wrapper_kwargs(kwargs):
    """A Triton wrapper's kwargs with the side-table indexes (kernel_idx, constant_args_idx:
    process-local counters) replaced by what they point at."""
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

    out = dict(kwargs)
    if "kernel_idx" in out:
        out["kernel_idx"] = {"triton_kernel": triton_kernel_description(kernel_side_table.get_kernel(out["kernel_idx"]))}
    if "constant_args_idx" in out and hasattr(kernel_side_table, "get_constant_args"):
        out["constant_args_idx"] = {"constant_args": kernel_side_table.get_constant_args(out["constant_args_idx"])}
    return out


def _device_positions(target):
    """Names and positions of a torch operator's Device arguments (from its schema)."""
    schema = getattr(target, "_schema", None)
    if schema is None:
        return {}
    return {a.name: i for i, a in enumerate(schema.arguments) if str(a.type).rstrip("?") == "Device"}


def normalize_device_args(target, args, kwargs):
    """args and kwargs with every device given as text ("cuda:3") made a torch.device, which
    _canon hashes by type: an operator's Device arguments (by its schema), and a keyword
    named `device` of any callable."""
    import torch

    def dev(v):
        if isinstance(v, str):
            try:
                return torch.device(v)
            except RuntimeError:
                return v
        return v

    positions = _device_positions(target)
    args = list(args)
    for name, i in positions.items():
        if i < len(args):
            args[i] = dev(args[i])
    kwargs = dict(kwargs)
    for name in set(positions) | {"device"}:
        if name in kwargs:
            kwargs[name] = dev(kwargs[name])
    return tuple(args), kwargs


def graph_description(gm):
    import torch.fx

    index, nodes = {}, []
    for i, node in enumerate(gm.graph.nodes):
        index[node] = i
        args, kwargs = node.args, node.kwargs
        impl = None
        if node.op == "call_function":
            args, kwargs = normalize_device_args(node.target, args, kwargs)
            if _is_triton_wrapper(node.target):
                kwargs = _triton_wrapper_kwargs(kwargs)
            else:
                impl = custom_op_description(node.target)
        entry = {"op": node.op, "args": _canon(args, index), "kwargs": _canon(kwargs, index),
                 "val": _val(node.meta.get("val"))}
        if impl is not None:
            entry["impl"] = impl
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
