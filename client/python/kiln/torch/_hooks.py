"""Replacing a block's forward so that it can be taken back.

With diffusers importable, through its hook registry (diffusers.hooks.HookRegistry and a
ModelHook with new_forward): kiln's hook then stacks with diffusers' offload and caching
hooks in registration order, and remove_hook takes it out of the chain wherever it is.
Without diffusers, the block gets an instance attribute `forward` wrapping the previous
one; restore() deletes it (or puts back an instance forward that was there before).
"""
import copy
import functools
import types

HOOK_NAME = "kiln"
_WRAPPER_MARK = "_kiln_wrapped_forward"


def _diffusers_hooks():
    try:
        from diffusers.hooks import HookRegistry, ModelHook
    except Exception:
        return None
    return HookRegistry, ModelHook


def install(block, call):
    """Routes block(...) through call(block, original_forward, args, kwargs). Idempotent
    per block: a block already hooked by kiln raises ValueError."""
    if is_installed(block):
        raise ValueError(f"{type(block).__name__} already has kiln's hook; kiln.torch.restore(model) first")
    found = _diffusers_hooks()
    if found is not None:
        HookRegistry, ModelHook = found

        class KilnHook(ModelHook):
            """kiln's compiled-block hook (diffusers.hooks)."""

            def new_forward(self, module, *args, **kwargs):
                return call(module, self.fn_ref.original_forward, args, kwargs)

        HookRegistry.check_if_exists_or_initialize(block).register_hook(KilnHook(), HOOK_NAME)
        return
    had = "forward" in vars(block)
    previous = block.forward

    @functools.wraps(previous)
    def forward(*args, **kwargs):
        return call(block, previous, args, kwargs)

    setattr(forward, _WRAPPER_MARK, (had, previous))
    block.forward = forward


def is_installed(block):
    registry = vars(block).get("_diffusers_hook")
    if registry is not None and registry.get_hook(HOOK_NAME) is not None:
        return True
    return hasattr(vars(block).get("forward"), _WRAPPER_MARK)


def remove(block):
    """Takes kiln's hook off `block` (no-op when it has none)."""
    registry = vars(block).get("_diffusers_hook")
    if registry is not None and registry.get_hook(HOOK_NAME) is not None:
        registry.remove_hook(HOOK_NAME, recurse=False)
        return
    fwd = vars(block).get("forward")
    mark = getattr(fwd, _WRAPPER_MARK, None)
    if mark is None:
        return
    had, previous = mark
    if had:
        block.forward = previous
    else:
        del block.forward


def other_diffusers_hooks(block):
    """Names of diffusers hooks on `block` other than kiln's."""
    registry = vars(block).get("_diffusers_hook")
    if registry is None:
        return []
    return [n for n in getattr(registry, "_hook_order", []) if n != HOOK_NAME]


def inner_diffusers_hooks(block):
    """Names of the diffusers hooks on `block` that its kiln hook would run inside (those
    registered before kiln's; all of them when kiln's is not there): what enters the
    fingerprint. Hooks registered after kiln's wrap it, are never in the exported graph, and
    act on hits too, so enabling FirstBlockCache after compile_repeated_blocks keeps the
    fingerprint, and the package serves from the next call on without a lookup."""
    registry = vars(block).get("_diffusers_hook")
    if registry is None:
        return []
    order = list(getattr(registry, "_hook_order", []))
    return order[:order.index(HOOK_NAME)] if HOOK_NAME in order else order


def unhooked_view(block, forward=None):
    """A shallow copy of `block` that runs its class's forward, or `forward` (an instance-
    level forward the user set before kiln; a method of the block is bound to the copy), with
    no hook of kiln or diffusers, sharing its parameters and submodules: what the miss path
    exports."""
    view = copy.copy(block)
    for name in ("forward", "_diffusers_hook"):
        view.__dict__.pop(name, None)
    if forward is not None:
        if isinstance(forward, types.MethodType) and forward.__self__ is block:
            forward = types.MethodType(forward.__func__, view)
        view.forward = forward
    return view
