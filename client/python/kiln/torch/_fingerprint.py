"""The fingerprint: what names a block's exported graph, from what the process holds.

schema/python-fingerprint.md is the specification (and says why a fingerprint cannot map
to two graphs, and what would break that). In short:

  fingerprint = sha256("kiln-python-fingerprint/2\\n" + canonical_json(document))
  document    = {format, python, torch, torch_git, device_type, module, process, call,
                 inputs[, forward]}

where `module` is describe(block): for the block and every submodule, in named_modules
order, its path, its class by the code that runs (_describe.py), its attributes described
completely (or the block runs eager: Undescribable), its parameters', buffers' and tensor
attributes' names, shapes, strides and dtypes, and the VALUES of what a graph bakes in
(non-persistent buffers, plain tensor attributes); `process` the globals a trace reads
(default dtype, diffusers' attention backend); `forward` an instance-level forward; and
`call`/`inputs` the call's structure and each tensor leaf's shape, stride, dtype, layout.

No compiler runs: it reads attributes and code objects, hashes source files and code
(once per object per process) and a few small tensors.
"""
import hashlib
import sys
import threading
import weakref

from . import _describe
from ._describe import Undescribable  # noqa: F401  (kiln.torch._fingerprint.Undescribable)
from ._hooks import inner_diffusers_hooks, other_diffusers_hooks
from ._signature import canonical_json, dtype_name, layout_name

FORMAT = "kiln-python-fingerprint/2"

_descriptions = weakref.WeakKeyDictionary()
_lock = threading.RLock()  # one describer: blocks may be called from several threads
_describer = _describe.Describer()
epoch = 0  # how many times a watched global changed (the process token holds it)


def refresh():
    """Drops every description when a global the described code reads now holds another
    object (a monkey-patch after the first call); returns the epoch. Once per model call."""
    global _describer, epoch
    with _lock:
        if _describer.changed():
            _describer = _describe.Describer()
            _descriptions.clear()
            epoch += 1
        return epoch


_INTERNAL = None


def _internal_names():
    global _INTERNAL
    if _INTERNAL is None:
        import torch

        # nn.Module's own bookkeeping, and what hooks add (kiln's or diffusers' forward
        # replacement; an instance forward the user set is described by fingerprint(forward=)).
        _INTERNAL = frozenset(vars(torch.nn.Module()).keys()) | {"forward", "_diffusers_hook"}
    return _INTERNAL


def _tensor_meta(t):
    return {"shape": list(t.shape), "stride": list(t.stride()), "dtype": dtype_name(t.dtype),
            "layout": layout_name(t.layout), "device_type": t.device.type}


def _without_instance_names(module, name, value):
    """`value` without what names this instance rather than its graph: PEFT's tuner layers
    keep their own module path (kwargs["target_name"]), which made every LoRA'd block of a
    class its own fingerprint, so one export per block (57 in FLUX) instead of per class."""
    if name == "kwargs" and isinstance(value, dict) and "merged_adapters" in vars(module):
        return {k: v for k, v in value.items() if k != "target_name"}
    return value


def describe(module):
    """The module part of the document (cached per instance until the state token or a
    watched global changes). Raises Undescribable, naming the module path and attribute,
    when any part cannot be described completely."""
    with _lock:
        cached = _descriptions.get(module)
        if cached is None:
            cached = _descriptions[module] = _describe_modules(module, _describer)
        return cached


def _describe_modules(module, d):
    import torch

    internal = _internal_names()
    modules = []
    for path, m in module.named_modules(remove_duplicate=False):
        persistent = set(m._buffers) - set(getattr(m, "_non_persistent_buffers_set", ()))
        entry = {"path": path, "code": d.cls(type(m)), "attrs": {}, "params": [], "buffers": [], "tensors": []}
        for name, value in sorted(vars(m).items()):
            if name in internal or isinstance(value, torch.nn.Module):
                continue
            try:
                if isinstance(value, torch.Tensor):
                    entry["tensors"].append({"name": name, **_tensor_meta(value),
                                             "value": _describe.tensor_value(value)})
                else:
                    entry["attrs"][name] = d.value(_without_instance_names(m, name, value))
            except Undescribable as ex:
                where = f"{path}.{name}" if path else name
                raise Undescribable(f"{type(module).__name__}.{where}: {ex}") from None
        for name, p in sorted(m._parameters.items()):
            entry["params"].append({"name": name, **(_tensor_meta(p) if p is not None else {"none": True}),
                                    "requires_grad": bool(p.requires_grad) if p is not None else None})
        for name, b in sorted(m._buffers.items()):
            item = {"name": name, "persistent": name in persistent}
            if b is not None:
                item.update(_tensor_meta(b))
                if name not in persistent:  # baked into the graph as a constant
                    item["value"] = _describe.tensor_value(b)
            entry["buffers"].append(item)
        entry["training"] = bool(m.training)
        # The block's own diffusers hooks outside kiln's wrap the package and change no graph.
        entry["hooks"] = {"forward": len(m._forward_hooks), "forward_pre": len(m._forward_pre_hooks),
                          "diffusers": inner_diffusers_hooks(m) if m is module else other_diffusers_hooks(m)}
        modules.append(entry)
    return hashlib.sha256(canonical_json(modules).encode()).hexdigest()


def forget(module):
    """Drops the cached description of `module`: its state changed (kiln.torch's state
    token, _state.py), so the next fingerprint describes it anew."""
    with _lock:
        _descriptions.pop(module, None)


def process_globals():
    """What of the process, besides the block's code and state, a trace reads: torch's
    default dtype. (diffusers' active attention backend is a class attribute of the
    registry the attention code reads, so it is in the block's own description, and the
    watch list sees set_active_backend / attention_backend() replace it.)"""
    import torch

    return {"default_dtype": dtype_name(torch.get_default_dtype())}


def fingerprint(module, signature, device, forward=None, globals_=None):
    """The fingerprint (64 hex) of `module` called with `signature` on `device`. forward:
    the instance-level forward the block runs instead of its class's (None: the class's);
    globals_: process_globals() when the caller has it. Raises Undescribable."""
    import torch

    document = {
        "format": FORMAT,
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "torch": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", None),
        "device_type": device.type,
        "module": describe(module),
        "process": globals_ if globals_ is not None else process_globals(),
        "call": signature.call,
        "inputs": [_tensor_meta(t) for t in signature.tensors],
    }
    if forward is not None:
        with _lock:
            try:
                document["forward"] = _describer.callable(forward, _describe.HOPS)
            except Undescribable as ex:
                raise Undescribable(f"{type(module).__name__}'s instance forward: {ex}") from None
    return hashlib.sha256((FORMAT + "\n" + canonical_json(document)).encode()).hexdigest()
