"""Describing what a traced graph depends on: values, callables and the code they reach.

schema/python-fingerprint.md ("What the module description holds" and "Code") is the
specification. The rule is fail closed: describe() either returns a complete JSON
description of a value, or raises Undescribable naming what it could not describe, and
kiln.torch then runs that block eager (status() says why). Never a partial description:
two values with one description must trace to the same graph.

Code is described by what runs, not by where it came from: a function by its bytecode,
constants, names, defaults and closure, and by the globals its code reads (functions by
their code, classes by their methods' code and plain class attributes, modules by the
attributes the code names), followed up to HOPS references away. A monkey-patched
`F.scaled_dot_product_attention` or processor `__call__` is other code, so another
description. torch's own functions and classes are named only (the torch version and git
revision are in the fingerprint), unless one has been replaced (__wrapped__, or code from
outside torch's files).

Every global read on the way is recorded in a watch list (container, name, identity):
watch_changed(), called once per model call, says whether any of them now holds another
object, in which case every cached description is dropped (a monkey-patch after the first
call is seen at the next model call).
"""
import enum
import functools
import hashlib
import importlib.metadata
import inspect
import logging
import operator
import os
import re
import sys
import types

HOPS = 6            # how many references from a block's own code are followed
STRICT_HOPS = HOPS - 2  # globals read by the code of the block's (and its attributes') classes:
                        # refused when undescribable; further away, named by their type
MAX_DEPTH = 6       # nesting of plain data (tuples in dicts in lists ...)
MAX_OBJECT_DEPTH = 3  # objects inside objects (a processor's settings object ...)
MAX_ITEMS = 4096    # elements of one container
MAX_TENSOR_BYTES = 1 << 20  # a tensor held by an object is described by its bytes up to this


class Undescribable(Exception):
    """A value the fingerprint cannot describe completely (the block runs eager)."""


# ---- torch's own ---------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _torch_dir():
    import torch

    return os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


@functools.lru_cache(maxsize=None)
def _stdlib_dir():
    return os.path.dirname(os.path.abspath(os.__file__)) + os.sep


_owned = {}  # id(value) -> (value, owned): functions, classes and modules live as long as the process


def _torch_owned(value):
    """torch's or the Python standard library's own function, class or module, unreplaced:
    named, not described (the torch version and the Python version cover them). Cached by
    identity (a replacement is another object)."""
    hit = _owned.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    owned = _torch_owned_uncached(value)
    if isinstance(value, (types.FunctionType, type, types.ModuleType) + _C_CALLABLES):
        _owned[id(value)] = (value, owned)
    return owned


def _torch_owned_uncached(value):
    if isinstance(value, types.ModuleType):
        top = value.__name__.split(".")[0]
        return top == "torch" or top in sys.stdlib_module_names
    if hasattr(value, "__wrapped__"):
        return False  # a wrapper (functools.wraps copies torch's names onto other code)
    mod = getattr(value, "__module__", None) or ""
    top = mod.split(".")[0]
    if top == "torch":
        home = _torch_dir()
    elif top in sys.stdlib_module_names or top == "builtins":
        home = _stdlib_dir()
    else:
        return False
    code = getattr(value, "__code__", None)
    if code is not None:  # a Python function: theirs only if its code is in their files
        return os.path.abspath(code.co_filename).startswith(home)
    if isinstance(value, type):
        try:
            return os.path.abspath(inspect.getfile(value)).startswith(home)
        except (TypeError, OSError):
            return True  # a class defined in C
    return True  # builtins and C functions under their module names


def _owned_code(value):
    return isinstance(value, (types.FunctionType, type) + _C_CALLABLES) and _torch_owned(value)


def _qualname(value):
    return f"{getattr(value, '__module__', '') or ''}.{getattr(value, '__qualname__', type(value).__qualname__)}"


# ---- files and packages ---------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def file_digest(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


@functools.lru_cache(maxsize=None)
def package_version(top):
    try:
        return importlib.metadata.version(top)
    except Exception:
        return getattr(sys.modules.get(top), "__version__", None)


# ---- the describer --------------------------------------------------------------------------

class Describer:
    """One process's descriptions of code, cached by identity and hop budget, and the watch
    list of the globals they read. Not thread-safe: kiln.torch calls it from the thread that
    fingerprints a block (one at a time, under the runtime's lock or the model's thread)."""

    def __init__(self):
        self._cache = {}      # (id(obj), hops) -> description (objects kept alive in _keep)
        self._keep = []
        self._active = set()  # ids being described (a cycle is described by name)
        self.watch = {}       # id(namespace) -> (namespace, {name: value}): the globals read

    # -- the watch list
    def _note(self, namespace, name, value):
        """namespace: a module's or function's globals dict, or a class (its own dict)."""
        group = self.watch.get(id(namespace))
        if group is None:
            group = self.watch[id(namespace)] = (namespace, {})
        group[1][name] = value

    def changed(self):
        """Whether a watched global now holds another object (or is gone). ~0.2 us per
        watched name (one C-level lookup and identity check per name)."""
        for namespace, seen in self.watch.values():
            mapping = vars(namespace) if isinstance(namespace, type) else namespace
            names = tuple(seen)
            try:
                now = operator.itemgetter(*names)(mapping) if len(names) > 1 else (mapping[names[0]],)
            except KeyError:
                return True
            if not all(map(operator.is_, now, seen.values())):
                return True
        return False

    # -- values
    def value(self, v, depth=0, hops=HOPS, obj_depth=0):
        """The description of a value an attribute, a default, a closure or a global holds."""
        import torch

        if v is None or isinstance(v, (bool, int, str)):
            return v
        if isinstance(v, float):
            return {"float": repr(v)}
        if isinstance(v, complex):
            return {"complex": repr(v)}
        if isinstance(v, (bytes, bytearray)):
            return {"bytes": hashlib.sha256(bytes(v)).hexdigest()}
        if isinstance(v, torch.dtype):
            return {"dtype": str(v).replace("torch.", "")}
        if isinstance(v, torch.device):
            return {"device_type": v.type}  # the index never enters a key
        if isinstance(v, (torch.layout, torch.memory_format)):
            return {"torch": str(v)}
        if isinstance(v, torch.Size):
            return {"size": list(v)}
        if isinstance(v, enum.Enum):
            return {"enum": f"{_qualname(type(v))}.{v.name}", "value": self.value(v.value, depth + 1, hops, obj_depth)}
        if isinstance(v, torch.Tensor):
            return self._tensor(v)
        if _is_numpy(v):
            return self._numpy(v)
        if depth >= MAX_DEPTH:
            raise Undescribable(f"data nested deeper than {MAX_DEPTH} levels")
        if isinstance(v, (tuple, list)):
            _bounded(v)
            return {type(v).__name__ if type(v) in (tuple, list) else "seq": [
                self.value(x, depth + 1, hops, obj_depth) for x in v],
                **({"class": self.cls(type(v), hops)} if type(v) not in (tuple, list) else {})}
        if isinstance(v, (set, frozenset)):
            _bounded(v)
            from ._signature import canonical_json

            return {"set": sorted((self.value(x, depth + 1, hops, obj_depth) for x in v), key=canonical_json)}
        if isinstance(v, types.MappingProxyType):
            v = dict(v)
        if isinstance(v, dict):
            _bounded(v)
            from ._signature import canonical_json

            items = [[self.value(k, depth + 1, hops, obj_depth), self.value(x, depth + 1, hops, obj_depth)]
                     for k, x in v.items()]
            out = {"dict": sorted(items, key=lambda kv: canonical_json(kv[0]))}
            if type(v) is not dict:
                out["class"] = self.cls(type(v), hops)
            return out
        if type(v) is object:
            return {"sentinel": "object"}  # object(): compared by identity, holds nothing
        if isinstance(v, (types.UnionType, types.GenericAlias)) or type(v).__module__ == "typing":
            return {"typing": repr(v)}  # annotations: never read by a trace
        if isinstance(v, re.Pattern):
            return {"regex": [v.pattern if isinstance(v.pattern, str) else self.value(v.pattern), v.flags]}
        if isinstance(v, logging.Logger):
            return {"logger": v.name}  # logging never changes a graph
        if isinstance(v, types.ModuleType):
            return {"module": v.__name__}
        if isinstance(v, type):
            return {"class": self.cls(v, hops)}
        if callable(v) and not isinstance(v, torch.nn.Module):
            return self.callable(v, hops)
        return self.object(v, depth, hops, obj_depth)

    def _tensor(self, t):
        meta = {"shape": list(t.shape), "stride": list(t.stride()), "dtype": str(t.dtype).replace("torch.", ""),
                "device_type": t.device.type}
        if t.numel() * t.element_size() > MAX_TENSOR_BYTES:
            raise Undescribable(f"a tensor of {t.numel() * t.element_size()} bytes held outside parameters and buffers")
        meta["value"] = tensor_value(t)
        return meta

    def _numpy(self, v):
        import numpy as np

        if isinstance(v, np.generic):
            return {"numpy": v.dtype.str, "value": repr(v.item())}
        if v.nbytes > MAX_TENSOR_BYTES:
            raise Undescribable(f"a numpy array of {v.nbytes} bytes")
        return {"numpy": v.dtype.str, "shape": list(v.shape),
                "value": hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()}

    def object(self, v, depth, hops, obj_depth):
        """An object: its class (by code) and its state (instance dict and slots)."""
        if _torch_owned(type(v)) and (type(v).__module__ or "").split(".")[0] == "torch":
            # An object of torch's own classes (a custom op, a dispatcher library, ...): named.
            # Its state is torch's machinery; what a custom op runs is the documented gap
            # (schema/python-fingerprint.md, "What would break that argument").
            name = getattr(v, "_qualname", None) or getattr(v, "__name__", None)
            return {"torch_object": _qualname(type(v)), "name": name if isinstance(name, str) else None}
        if obj_depth >= MAX_OBJECT_DEPTH:
            raise Undescribable(f"a {_qualname(type(v))} nested {MAX_OBJECT_DEPTH} objects deep")
        d = getattr(v, "__dict__", None)
        if d is not None and not isinstance(d, dict):
            raise Undescribable(f"a {_qualname(type(v))} with a non-dict __dict__")
        state = dict(d or {})
        for c in type(v).__mro__:
            slots = getattr(c, "__slots__", ())
            for s in (slots,) if isinstance(slots, str) else slots:
                if s not in ("__dict__", "__weakref__") and hasattr(v, s):
                    state[s] = getattr(v, s)
        if d is None and not state and not isinstance(v, (type(Ellipsis), type(NotImplemented))):
            raise Undescribable(f"a {_qualname(type(v))} whose state is not readable (no __dict__ or __slots__)")
        out = {}
        for k, x in sorted(state.items(), key=lambda kv: str(kv[0])):
            with _where(f"{type(v).__qualname__}.{k}"):
                out[str(k)] = self.value(x, depth + 1, hops, obj_depth + 1)
        return {"object": self.cls(type(v), hops), "state": out}

    # -- code
    def digest(self, f):
        """SHA-256 of callable(f): what a per-call token holds (cached by identity)."""
        slot = ("digest", id(f))
        if slot not in self._cache:
            from ._signature import canonical_json

            self._cache[slot] = hashlib.sha256(canonical_json(self.callable(f, HOPS)).encode()).hexdigest()
            self._keep.append(f)
        return self._cache[slot]

    def callable(self, f, hops):
        if isinstance(f, (types.FunctionType, type, types.ModuleType) + _C_CALLABLES) and _torch_owned(f):
            return {"torch": _qualname(f)}
        if isinstance(f, functools.partial):
            return {"partial": self.callable(f.func, hops), "args": self.value(list(f.args), 1, hops),
                    "keywords": self.value(dict(f.keywords), 1, hops)}
        if isinstance(f, types.MethodType):
            owner = f.__self__
            import torch

            this = ({"module_class": self.cls(type(owner), hops)} if isinstance(owner, torch.nn.Module)
                    else {"class": self.cls(owner, hops)} if isinstance(owner, type)
                    else self.object(owner, 0, hops, 1))
            return {"method": self.callable(f.__func__, hops), "self": this}
        if isinstance(f, (staticmethod, classmethod)):
            return {type(f).__name__: self.callable(f.__func__, hops)}
        if isinstance(f, types.FunctionType):
            return self.function(f, hops)
        if isinstance(f, _C_CALLABLES):
            return {"builtin": _qualname(f)}
        if isinstance(f, type):
            return {"class": self.cls(f, hops)}
        # A callable object: its class's __call__ and its state.
        return self.object(f, 0, hops, 0)

    def _memo(self, obj, hops, short, make):
        """make() cached by (identity, hops); `short` (name and no more) for an object met
        again while being described (a cycle) or beyond the hop budget."""
        slot = (id(obj), hops)
        if slot in self._cache:
            return self._cache[slot]
        if id(obj) in self._active or hops <= 0:
            return short()
        self._active.add(id(obj))
        try:
            out = make()
        finally:
            self._active.discard(id(obj))
        self._cache[slot] = out
        self._keep.append(obj)
        return out

    def function(self, f, hops):
        return self._memo(f, hops, lambda: {"function": _qualname(f), "code": code_digest(f.__code__)},
                          lambda: self._function(f, hops))

    def _function(self, f, hops):
        closure = []
        for name, cell in zip(f.__code__.co_freevars, f.__closure__ or ()):
            try:
                contents = cell.cell_contents
            except ValueError:  # an empty cell
                closure.append([name, {"empty": True}])
                continue
            closure.append([name, self.value(contents, 0, hops - 1)])
        return {"function": _qualname(f), "code": code_digest(f.__code__),
                "defaults": self.value(list(f.__defaults__ or ()), 0, hops - 1),
                "kwdefaults": self.value(dict(f.__kwdefaults__ or {}), 0, hops - 1),
                "closure": closure,
                "globals": self.globals_of(f.__code__, f.__globals__, hops - 1)}

    def globals_of(self, code, namespace, hops):
        """The globals `code` (and the code nested in it) reads from `namespace`, described;
        module-valued ones by the attributes the code names."""
        names = code_names(code)
        out = {}
        for name in sorted(names):
            if name not in namespace:
                continue  # a builtin or an attribute name
            v = namespace[name]
            self._note(namespace, name, v)
            with _where(f"global {name}"):
                out[name] = self.reference(v, names, hops)
        return out

    def reference(self, v, names, hops, chain=0):
        """A global the code reads: a module by the attributes of it the code names (up to
        three modules deep: torch.nn.functional.scaled_dot_product_attention), else its value."""
        if isinstance(v, types.ModuleType):
            attrs = {}
            owned = _torch_owned(v)
            if chain < 3:
                for a in sorted(names):
                    if a in v.__dict__:
                        x = v.__dict__[a]
                        if owned and not isinstance(x, (types.ModuleType, types.FunctionType, type) + _C_CALLABLES):
                            # Data of torch or the standard library (sys.modules, os.environ, ...):
                            # the process's, not the program's; its versions cover the rest.
                            continue
                        self._note(v.__dict__, a, x)
                        if isinstance(x, types.ModuleType) or not _owned_code(x) or chain < 2:
                            attrs[a] = self.reference(x, names, hops, chain + 1)
            return {"module": v.__name__, "attrs": attrs}
        if isinstance(v, (types.FunctionType, type) + _C_CALLABLES) and _torch_owned(v):
            return {"torch": _qualname(v)}
        try:
            return self.value(v, 0, hops)
        except Undescribable:
            if hops >= STRICT_HOPS:
                raise
        except Exception as ex:  # reading a global's state failed: never guess
            if hops >= STRICT_HOPS:
                raise Undescribable(f"reading {_qualname(type(v))}: {type(ex).__name__}: {ex}") from None
        # Far from the block's own code (a library's helper of a helper): named by its type
        # (schema/python-fingerprint.md, "What would break that argument").
        return {"opaque": _qualname(type(v))}

    def cls(self, c, hops=HOPS):
        """A class: for every class of its MRO that is not torch's own, its name, source
        file digest and package version, the code of the members a call reaches
        (reachable_members) and its plain class attributes; torch's classes by name."""
        return self._memo(c, hops, lambda: {"class": _qualname(c)}, lambda: self._class(c, hops))

    def _class(self, c, hops):
        reached = reachable_members(c)
        return [{"class": _qualname(k)} if _torch_owned(k) else self._class_body(k, hops, reached)
                for k in c.__mro__ if k is not object and k.__module__ != "builtins"]

    def _class_body(self, k, hops, reached):
        mod = k.__module__ or ""
        try:
            path = inspect.getsourcefile(k)
        except (TypeError, OSError):
            path = None
        top = mod.split(".")[0]
        members = {}
        for name, attr in sorted(vars(k).items()):
            if name in ("__dict__", "__weakref__", "__doc__", "__module__", "__qualname__", "__annotations__",
                        "__slotnames__", "__abstractmethods__", "_abc_impl", "__parameters__", "__orig_bases__",
                        "__static_attributes__", "__firstlineno__"):
                continue
            if _is_code_member(attr) and name not in reached:
                continue  # code no call of the object reaches (set_processor, from_pretrained, ...)
            self._note(k, name, attr)
            with _where(f"{k.__qualname__}.{name}"):
                self._member(members, name, attr, hops)
        return {"class": _qualname(k), "file_sha256": file_digest(path) if path else None,
                "package": [top, package_version(top)], "members": members}

    def _member(self, members, name, attr, hops):
        if isinstance(attr, property):
            members[name] = {"property": [self.callable(x, hops - 1) if x is not None else None
                                          for x in (attr.fget, attr.fset)]}
        elif isinstance(attr, (types.FunctionType, staticmethod, classmethod, functools.partial)):
            members[name] = self.callable(attr, hops - 1)
        elif name.startswith("__") and name.endswith("__"):
            return  # slots' descriptors and other interpreter bookkeeping
        elif isinstance(attr, _C_DESCRIPTORS) or type(attr).__name__ == "_tuplegetter":
            return  # a C-level accessor of the class's own layout (slots, namedtuple fields)
        else:
            members[name] = self.value(attr, 0, hops - 1)


_C_CALLABLES = (types.BuiltinFunctionType, types.BuiltinMethodType, types.WrapperDescriptorType,
                types.MethodWrapperType, types.MethodDescriptorType, types.ClassMethodDescriptorType)
_C_DESCRIPTORS = (types.MemberDescriptorType, types.GetSetDescriptorType, types.WrapperDescriptorType,
                  types.MethodDescriptorType, types.ClassMethodDescriptorType)


ENTRY_POINTS = ("forward", "__call__")


def _is_code_member(attr):
    return isinstance(attr, (property, types.FunctionType, staticmethod, classmethod, functools.partial))


def _member_code(attr):
    fns = [attr.fget, attr.fset] if isinstance(attr, property) else [getattr(attr, "__func__", None) or
                                                                      getattr(attr, "func", None) or attr]
    return [f.__code__ for f in fns if isinstance(f, types.FunctionType)]


@functools.lru_cache(maxsize=None)
def reachable_members(c):
    """The names of c's methods and properties (over its MRO) that a call of an instance
    reaches: forward and __call__, and every member the code of a reached one names, to a
    fixpoint. What nothing reaches (a module's set_processor, a config's from_pretrained)
    is not described: it cannot be in a graph, and following it led into libraries'
    process state (huggingface_hub's session id)."""
    members = {}
    for k in reversed(c.__mro__):
        members.update({n: a for n, a in vars(k).items() if _is_code_member(a)})
    reached, todo = set(), [n for n in ENTRY_POINTS if n in members]
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        reached.add(name)
        for code in _member_code(members[name]):
            todo.extend(n for n in code_names(code) if n in members and n not in reached)
    return frozenset(reached)


class _where:
    """Prefixes an Undescribable raised inside with where it was met ("global X: ...")."""

    __slots__ = ("what",)

    def __init__(self, what):
        self.what = what

    def __enter__(self):
        return self

    def __exit__(self, kind, ex, tb):
        if kind is Undescribable:
            raise Undescribable(f"{self.what}: {ex}") from None
        return False


def _bounded(container):
    if len(container) > MAX_ITEMS:
        raise Undescribable(f"a {type(container).__name__} of {len(container)} items (more than {MAX_ITEMS})")


def _is_numpy(v):
    np = sys.modules.get("numpy")
    return np is not None and isinstance(v, (np.generic, np.ndarray))


def tensor_value(t):
    """SHA-256 of a tensor's bytes."""
    import torch

    x = t.detach().cpu().contiguous().reshape(-1)
    return hashlib.sha256(x.view(torch.uint8).numpy().tobytes()).hexdigest()


@functools.lru_cache(maxsize=None)
def code_digest(code):
    """SHA-256 of what a code object runs: bytecode, constants (nested code by its digest,
    sets sorted), names, argument counts and flags. Line numbers are not in it."""
    h = hashlib.sha256()
    h.update(code.co_code)
    for c in code.co_consts:
        h.update(b"\0" + _const_text(c).encode())
    for part in (code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars):
        h.update(("\1" + ",".join(part)).encode())
    h.update(f"{code.co_argcount},{code.co_posonlyargcount},{code.co_kwonlyargcount},{code.co_flags}".encode())
    return h.hexdigest()


def _const_text(c):
    if isinstance(c, types.CodeType):
        return "code:" + code_digest(c)
    if isinstance(c, (frozenset, set)):
        return "set:" + "|".join(sorted(_const_text(x) for x in c))
    if isinstance(c, tuple):
        return "tuple:(" + ",".join(_const_text(x) for x in c) + ")"
    return f"{type(c).__name__}:{c!r}"


@functools.lru_cache(maxsize=None)
def code_names(code):
    """Every name `code` and the code nested in it reads as a global or an attribute."""
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= code_names(c)
    return frozenset(names)
