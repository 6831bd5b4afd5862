"""THE place where kiln.torch builds artifact keys (notes KEY-CALL; schema/key.md).

build_key() returns the key dict exactly as the format-2 spec writes it: the `call` field
after `inputs`, numerics flags under compile_options["numerics"], node fields of this
process, format_version 2. Unit tests pin it against the spec (tests/python/test_keys.py).

to_wire() adapts it to a kilnd/libkiln that does not know `call` yet (format 1): `call`
and `format_version` are dropped. That is sound only because the model hash already
covers the call structure (sources.md: the hash holds the program's pytree call_spec, and
python-fingerprint.md maps a fingerprint, which holds the call, to one model hash); it
goes away when format 2 is everywhere.
"""
from . import _node
from ._dtype_rule import key_dtype

FORMAT_VERSION = 2
KIND = "aoti"


def build_key(model_hash, region, dtype, signature, device, compile_options=None, numerics=None):
    """The artifact key of `region` (the block class name) built from the source `model_hash`
    for the call `signature` (a _signature.Signature) on `device`, with the numerics flags
    of that call (default: the process's now)."""
    options = dict(compile_options or {})
    options["numerics"] = numerics if numerics is not None else _node.numerics()
    key = {
        "kind": KIND,
        "model_hash": model_hash,
        "region": region,
    }
    key.update(_node.node_fields(device))
    key.update({
        "dtype": dtype,
        "inputs": signature.inputs(),
        "call": signature.call,
        "compile_options": options,
        "format_version": FORMAT_VERSION,
    })
    return key


def to_wire(key, call_supported):
    """The key as sent: itself when libkiln/kilnd know `call`, else the format-1 form."""
    if call_supported:
        return key
    return {k: v for k, v in key.items() if k not in ("call", "format_version")}


def block_dtype(module, signature):
    """The key's `dtype` by the one rule of _dtype_rule.py (schema/key.md): the floating
    dtype holding most of the block's parameter and buffer elements, else its first
    floating input's, else float32."""
    counts, seen = {}, set()
    for t in list(module.parameters()) + list(module.buffers()):
        if id(t) in seen or not t.is_floating_point():
            continue
        seen.add(id(t))
        name = str(t.dtype).replace("torch.", "")
        counts[name] = counts.get(name, 0) + t.numel()
    inputs = [str(t.dtype).replace("torch.", "") for t in signature.tensors if t.is_floating_point()]
    return key_dtype(counts, inputs)
