"""The fingerprint: what names a block's exported graph, from what the process holds.

schema/python-fingerprint.md is the specification (and says why a fingerprint cannot map
to two graphs, and what would break that). In short:

  fingerprint = sha256("kiln-python-fingerprint/1\\n" + canonical_json(document))
  document    = {format, python, torch, torch_git, device_type, module, call, inputs}

where `module` is describe(block): for the block and every submodule, in named_modules
order, its path, its class (module, qualname) and code identity, its plain attributes, its
parameters', buffers' and tensor attributes' names, shapes, strides and dtypes, and the
VALUES of what a graph bakes in (non-persistent buffers, plain tensor attributes); and
`call`/`inputs` the call's structure and each tensor leaf's shape, stride, dtype, layout.

No compiler runs: it reads attributes, hashes source files (once per file per process)
and a few small tensors.
"""
import enum
import functools
import hashlib
import importlib.metadata
import inspect
import sys
import weakref

from ._hooks import other_diffusers_hooks
from ._signature import canonical_json, dtype_name, layout_name

FORMAT = "kiln-python-fingerprint/1"

_descriptions = weakref.WeakKeyDictionary()


@functools.lru_cache(maxsize=None)
def _file_digest(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


@functools.lru_cache(maxsize=None)
def _package_version(top):
    try:
        return importlib.metadata.version(top)
    except Exception:
        return getattr(sys.modules.get(top), "__version__", None)


@functools.lru_cache(maxsize=None)
def code_identity(cls):
    """(module, qualname, file digest, package version) of every class in cls's MRO up to
    torch.nn.Module. torch's own classes are covered by the torch version."""
    out = []
    for c in cls.__mro__:
        mod = c.__module__ or ""
        if c is object or mod == "builtins":
            continue
        entry = {"class": f"{mod}.{c.__qualname__}"}
        top = mod.split(".")[0]
        if top != "torch":
            try:
                path = inspect.getsourcefile(c)
            except (TypeError, OSError):
                path = None
            # A class whose source cannot be read is identified by name only: say so in the
            # document, so such fingerprints are recognisable.
            entry["file_sha256"] = _file_digest(path) if path else None
            entry["package"] = [top, _package_version(top)]
        out.append(entry)
    return out


_INTERNAL = None


def _internal_names():
    global _INTERNAL
    if _INTERNAL is None:
        import torch

        # nn.Module's own bookkeeping, and what hooks add (kiln's or diffusers' forward
        # replacement: described separately, by hook name).
        _INTERNAL = frozenset(vars(torch.nn.Module()).keys()) | {"forward", "_diffusers_hook"}
    return _INTERNAL


def _tensor_meta(t):
    return {"shape": list(t.shape), "stride": list(t.stride()), "dtype": dtype_name(t.dtype),
            "layout": layout_name(t.layout), "device_type": t.device.type}


def _tensor_value(t):
    """SHA-256 of a tensor's bytes (small constants only: what a graph bakes in)."""
    import torch

    x = t.detach().cpu().contiguous().reshape(-1)
    return hashlib.sha256(x.view(torch.uint8).numpy().tobytes()).hexdigest()


def _plain(value, depth=0):
    """A JSON description of a non-tensor attribute; None when it is not plain data."""
    import torch

    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return {"float": repr(value)}
    if isinstance(value, torch.dtype):
        return {"dtype": dtype_name(value)}
    if isinstance(value, torch.device):
        return {"device_type": value.type}  # the index never enters a key
    if isinstance(value, enum.Enum):
        return {"enum": f"{type(value).__module__}.{type(value).__qualname__}.{value.name}"}
    if isinstance(value, (tuple, list)) and depth < 4:
        items = [_plain(v, depth + 1) for v in value]
        return {"seq": items}
    if isinstance(value, dict) and depth < 4 and all(isinstance(k, str) for k in value):
        return {"map": {k: _plain(v, depth + 1) for k, v in sorted(value.items())}}
    if callable(value) and hasattr(value, "__qualname__"):
        return {"callable": f"{getattr(value, '__module__', '')}.{value.__qualname__}"}
    return {"object": code_identity(type(value)),
            "attrs": {k: _plain(v, depth + 1) for k, v in sorted(vars(value).items())} if depth < 2
            and hasattr(value, "__dict__") else None}


def _without_instance_names(module, name, value):
    """`value` without what names this instance rather than its graph: PEFT's tuner layers
    keep their own module path (kwargs["target_name"]), which made every LoRA'd block of a
    class its own fingerprint, so one export per block (57 in FLUX) instead of per class."""
    if name == "kwargs" and isinstance(value, dict) and "merged_adapters" in vars(module):
        return {k: v for k, v in value.items() if k != "target_name"}
    return value


def describe(module):
    """The module part of the document (cached per instance: a module whose code-affecting
    attributes change after its first call must be compiled again)."""
    import torch

    cached = _descriptions.get(module)
    if cached is not None:
        return cached
    internal = _internal_names()
    modules = []
    for path, m in module.named_modules(remove_duplicate=False):
        persistent = set(m._buffers) - set(getattr(m, "_non_persistent_buffers_set", ()))
        entry = {"path": path, "code": code_identity(type(m)), "attrs": {}, "params": [], "buffers": [],
                 "tensors": []}
        for name, value in sorted(vars(m).items()):
            if name in internal:
                continue
            if isinstance(value, torch.Tensor):
                entry["tensors"].append({"name": name, **_tensor_meta(value), "value": _tensor_value(value)})
            elif not isinstance(value, torch.nn.Module):
                entry["attrs"][name] = _plain(_without_instance_names(m, name, value))
        for name, p in sorted(m._parameters.items()):
            entry["params"].append({"name": name, **(_tensor_meta(p) if p is not None else {"none": True}),
                                    "requires_grad": bool(p.requires_grad) if p is not None else None})
        for name, b in sorted(m._buffers.items()):
            d = {"name": name, "persistent": name in persistent}
            if b is not None:
                d.update(_tensor_meta(b))
                if name not in persistent:  # baked into the graph as a constant
                    d["value"] = _tensor_value(b)
            entry["buffers"].append(d)
        entry["training"] = bool(m.training)
        entry["hooks"] = {"forward": len(m._forward_hooks), "forward_pre": len(m._forward_pre_hooks),
                          "diffusers": other_diffusers_hooks(m)}
        modules.append(entry)
    digest = hashlib.sha256(canonical_json(modules).encode()).hexdigest()
    _descriptions[module] = digest
    return digest


def forget(module):
    """Drops the cached description of `module`: its state changed (kiln.torch's state
    token, _state.py), so the next fingerprint describes it anew."""
    _descriptions.pop(module, None)


def fingerprint(module, signature, device):
    """The fingerprint (64 hex) of `module` called with `signature` on `device`."""
    import torch

    document = {
        "format": FORMAT,
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "torch": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", None),
        "device_type": device.type,
        "module": describe(module),
        "call": signature.call,
        "inputs": [_tensor_meta(t) for t in signature.tensors],
    }
    return hashlib.sha256((FORMAT + "\n" + canonical_json(document)).encode()).hexdigest()
