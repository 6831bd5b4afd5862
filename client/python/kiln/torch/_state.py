"""What of a block's state can change between two of its calls and change its math: the
state token, taken at every call and checked with the call's guard (schema/python-
fingerprint.md, "State between calls").

- PEFT's tuner layers (what diffusers' LoRA API drives): each LoRA layer's `scaling`
  (diffusers' per-call `joint_attention_kwargs={"scale": s}` / `attention_kwargs` rescales
  it in place through `scale_lora_layers`), its merged adapters (`fuse_lora`), its active
  adapters (`set_adapters`) and whether adapters are disabled (`disable_lora`). A graph
  exported with one of these states computes something else under another.
- The identity of the block's parameters and buffers: `unload_lora_weights` puts plain
  layers back, `load_lora_weights` adds some, a user may assign a new weight; either way
  the block holds other tensors than the ones a loaded package was given.
- The numerics flags (_node.numerics): the key holds them, and a process may change them
  between calls; and what else of the process a trace reads (default dtype, diffusers'
  attention backend, the globals the block's code reads: process_token()).

kiln.torch's call guard holds structure(block) and process_token(): equal values mean none
of the above changed. Both read attributes only (no tensor data).
"""
import weakref

from . import _node
from ._signature import canonical_json


def _tuner_state(d):
    """The PEFT tuner layer state of a module whose instance dict is `d` (recognised by
    PEFT's own instance attributes, so that no PEFT import is needed)."""
    active = d.get("_active_adapter")
    return (tuple(sorted((str(k), float(v)) for k, v in d["scaling"].items())),
            tuple(d["merged_adapters"]),
            bool(d.get("_disable_adapters", False)),
            tuple(active) if isinstance(active, (list, tuple)) else str(active))


_plain = weakref.WeakKeyDictionary()  # block -> ((module, attribute, path), ...): its plain tensor attributes


def _plain_tensor_slots(block):
    """Where `block` holds plain tensor attributes (neither parameters nor buffers), found
    once per block: almost always none, so structure() pays nothing for them."""
    found = _plain.get(block)
    if found is None:
        import torch

        internal = {"_parameters", "_buffers", "_modules"}
        found = tuple((m, name, f"{path}.{name}" if path else name)
                      for path, m in block.named_modules(remove_duplicate=False)
                      for name, v in vars(m).items() if name not in internal and isinstance(v, torch.Tensor))
        _plain[block] = found
    return found


def plain_tensors(block):
    """[(path, tensor)] of the block's plain tensor attributes, as they are now."""
    return [(path, m.__dict__[name]) for m, name, path in _plain_tensor_slots(block) if name in m.__dict__]


def structure(block):
    """(parameter and buffer identities, tuner layer states, hooks): the block's part of
    the token. Walks the modules' own dicts (not named_modules(): this runs at every call).
    hooks: (is the block itself, forward pre-hooks, forward hooks, diffusers hook names) of
    every module that has any (hook_problem() reads them)."""
    ids, tuners, hooks = [], [], []
    stack = [block]
    while stack:
        m = stack.pop()
        d = m.__dict__
        ids.extend(map(id, d["_parameters"].values()))
        ids.extend(map(id, d["_buffers"].values()))
        if "scaling" in d and "merged_adapters" in d and isinstance(d["scaling"], dict):
            tuners.append((len(ids), _tuner_state(d)))
        registry = d.get("_diffusers_hook")
        if d["_forward_pre_hooks"] or d["_forward_hooks"] or registry is not None:
            order = tuple(getattr(registry, "_hook_order", ())) if registry is not None else ()
            hooks.append((m is block, len(d["_forward_pre_hooks"]), len(d["_forward_hooks"]), order))
        stack.extend(d["_modules"].values())
    for m, name, _ in _plain_tensor_slots(block):  # a plain tensor attribute replaced: other constants
        ids.append(id(m.__dict__.get(name)))
    return tuple(ids), tuple(tuners), tuple(hooks)


def _tuner_dicts(block):
    """The instance dicts of the block's PEFT tuner layers, in structure()'s order."""
    out, stack = [], [block]
    while stack:
        m = stack.pop()
        d = m.__dict__
        if "scaling" in d and "merged_adapters" in d and isinstance(d["scaling"], dict):
            out.append(d)
        stack.extend(d["_modules"].values())
    return out


def rescale_as(block, now, then):
    """When the block's state `now` differs from `then` (both structure() tokens) only in
    LoRA scalings (diffusers' per-call `scale` sets them at a model call's start and puts
    them back at its end, so between two calls the block is never in a call's state),
    sets each tuner layer's scaling to `then`'s and returns a function that puts the
    present ones back; None when anything else differs. For the export of a miss, with
    the model paused (_gate.py)."""
    if now[0] != then[0] or now[2] != then[2] or len(now[1]) != len(then[1]):
        return None
    for (i, a), (j, b) in zip(now[1], then[1]):
        if i != j or a[1:] != b[1:]:
            return None
    dicts = _tuner_dicts(block)
    if len(dicts) != len(then[1]):
        return None
    saved = [(d, d["scaling"]) for d in dicts]
    for d, (_, state) in zip(dicts, then[1]):
        d["scaling"] = dict(state[0])

    def restore():
        for d, scaling in saved:
            d["scaling"] = scaling

    return restore


def hook_problem(structure_token, kiln_hook_name="kiln"):
    """Why a package must not replace this block's call, or None. A package runs in place
    of the block's whole forward chain: a diffusers hook registered on the block before
    kiln's (FirstBlockCache, PAB, FasterCache, TaylorSeer, group offloading enabled before
    compile_repeated_blocks) sits inside kiln's and would be skipped on a hit, and so would
    any hook on a submodule (torch's or diffusers'). torch's own hooks on the block itself
    run around kiln's forward and stay."""
    for is_block, pre, post, order in structure_token[2]:
        if not is_block:
            return "a submodule of the block has hooks (torch's or diffusers'), which a package would skip"
        inner = list(order[:order.index(kiln_hook_name)]) if kiln_hook_name in order else []
        if inner:
            return (f"diffusers hooks {inner} were registered on the block before kiln's and run inside it: a "
                    "package would skip them (enable them after kiln.torch.compile_repeated_blocks)")
    return None


def numerics_token():
    """The numerics flags as canonical text (what the key's compile_options hold)."""
    return canonical_json(_node.numerics())


def process_token():
    """(numerics flags, process globals, watch epoch) as one hashable value, read once per
    model call: the numerics the key holds, what else of the process a trace reads (default
    dtype, diffusers' attention backend: _fingerprint.process_globals) and whether a global
    the described code reads was replaced since (_fingerprint.refresh). Equal tokens: none
    of it changed. numerics_of(token) is the first part."""
    from . import _fingerprint

    epoch = _fingerprint.refresh()
    return numerics_token(), canonical_json(_fingerprint.process_globals()), epoch


def numerics_of(token):
    return token[0]


def autocast_problem():
    """Why a call must run eager under autocast, or None: autocast is thread-local state the
    background export does not run under, so a package would compute in other dtypes than
    the eager call it replaces."""
    import torch

    for device_type in ("cuda", "cpu"):
        if torch.is_autocast_enabled(device_type):
            return f"torch.autocast is enabled ({device_type}): kiln runs blocks eager under autocast"
    return None
