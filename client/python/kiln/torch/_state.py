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
  between calls.

kiln.torch's call guard holds structure(block) and numerics_token(): equal values mean none
of the above changed. Both read attributes only (no tensor data).
"""
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
    return tuple(ids), tuple(tuners), tuple(hooks)


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
