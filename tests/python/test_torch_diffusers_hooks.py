"""kiln's hook through diffusers' hook registry: it stacks with another diffusers hook,
and restore() takes only kiln's out. Uses the real diffusers when importable; CI's Debian
has none, so a stand-in `diffusers.hooks` written here follows diffusers' documented
protocol (HookRegistry.check_if_exists_or_initialize, register_hook, get_hook, remove_hook,
_hook_order;
ModelHook.new_forward(module, *args, **kwargs) calling self.fn_ref.original_forward) —
the GPU script (tests/gpu/python_flux.py) runs the real one."""
import functools
import sys
import types

import pytest

import torch  # noqa: E402  (the pinned environment has it: tests/python-requirements.txt)

from kiln.torch import _hooks  # noqa: E402


def standin():
    class ModelHook:
        def __init__(self):
            self.fn_ref = None

        def pre_forward(self, module, *args, **kwargs):
            return args, kwargs

        def post_forward(self, module, output):
            return output

    class FnRef:
        forward = original_forward = pre_forward = post_forward = None

    class HookRegistry:
        def __init__(self, module):
            self.hooks, self._hook_order, self._fn_refs, self.module = {}, [], [], module

        @classmethod
        def check_if_exists_or_initialize(cls, module):
            if not hasattr(module, "_diffusers_hook"):
                module._diffusers_hook = cls(module)
            return module._diffusers_hook

        def register_hook(self, hook, name):
            ref = FnRef()
            ref.pre_forward, ref.post_forward, ref.forward = hook.pre_forward, hook.post_forward, self.module.forward
            if hasattr(hook, "new_forward"):
                ref.original_forward = ref.forward
                ref.forward = functools.partial(hook.new_forward, self.module)

            def chained(module, *args, **kwargs):
                args, kwargs = ref.pre_forward(module, *args, **kwargs)
                return ref.post_forward(module, ref.forward(*args, **kwargs))

            self.module.forward = functools.partial(chained, self.module)
            hook.fn_ref = ref
            self.hooks[name] = hook
            self._hook_order.append(name)
            self._fn_refs.append(ref)

        def get_hook(self, name):
            return self.hooks.get(name)

        def remove_hook(self, name, recurse=True):
            i = self._hook_order.index(name)
            ref = self._fn_refs[i]
            old = ref.original_forward if ref.original_forward is not None else ref.forward
            if i == len(self._hook_order) - 1:
                self.module.forward = old
            else:
                self._fn_refs[i + 1].forward = old
            del self.hooks[name]
            self._hook_order.pop(i)
            self._fn_refs.pop(i)

    mod = types.ModuleType("diffusers.hooks")
    mod.ModelHook, mod.HookRegistry = ModelHook, HookRegistry
    return mod


@pytest.fixture
def diffusers_hooks(monkeypatch):
    try:
        import diffusers.hooks as real  # noqa: F401

        return real
    except Exception:
        pkg = types.ModuleType("diffusers")
        mod = standin()
        pkg.hooks = mod
        monkeypatch.setitem(sys.modules, "diffusers", pkg)
        monkeypatch.setitem(sys.modules, "diffusers.hooks", mod)
        return mod


def test_kiln_stacks_with_another_diffusers_hook_and_leaves_it_on_restore(diffusers_hooks):
    class Twice(diffusers_hooks.ModelHook):
        def post_forward(self, module, output):
            return output * 2

    block = torch.nn.Linear(3, 3)
    x = torch.randn(2, 3)
    plain = block(x)
    registry = diffusers_hooks.HookRegistry.check_if_exists_or_initialize(block)
    registry.register_hook(Twice(), "twice")
    seen = []

    def call(module, original, args, kwargs):
        seen.append(module)
        return original(*args, **kwargs) + 1

    _hooks.install(block, call)
    assert _hooks.is_installed(block)
    assert torch.allclose(block(x), plain * 2 + 1) and seen == [block]
    assert _hooks.other_diffusers_hooks(block) == ["twice"]
    assert _hooks.inner_diffusers_hooks(block) == ["twice"]  # before kiln's: inside it
    registry.register_hook(Twice(), "outer")
    assert _hooks.inner_diffusers_hooks(block) == ["twice"]  # after kiln's: wraps it
    assert torch.allclose(block(x), (plain * 2 + 1) * 2)
    registry.remove_hook("outer")
    with pytest.raises(ValueError):
        _hooks.install(block, call)
    view = _hooks.unhooked_view(block)
    assert torch.allclose(view(x), plain)  # what an export sees: the class's forward
    _hooks.remove(block)
    assert not _hooks.is_installed(block)
    assert torch.allclose(block(x), plain * 2)  # the other hook stays
    registry.remove_hook("twice")
    assert torch.allclose(block(x), plain)
