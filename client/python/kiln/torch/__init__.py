"""kiln.torch: compiled repeated blocks from the node's kilnd, in one call.

    import kiln.torch
    kiln.torch.compile_repeated_blocks(pipe.transformer)   # diffusers: model._repeated_blocks
    kiln.torch.compile_repeated_blocks(model, block_classes=[MyBlock])   # any nn.Module
    kiln.torch.status(pipe.transformer)    # per block class and signature: hit/building/...
    kiln.torch.restore(pipe.transformer)   # eager again
    kiln.torch.use_torch_cache()           # torch.compile's own caches from kilnd (opt-in)
    kiln.torch.manifest(pipe.transformer, "flux.toml")   # what it asked for: `kilnctl prewarm flux.toml`

What happens per call of a block (each instance of each listed class):
- The call's signature (its structure: argument names, tuples, dicts, constants such as
  None; and each tensor's shape, stride, dtype, device) picks an entry. A call that holds
  something a key cannot describe runs eager.
- compile_repeated_blocks() starts loading, in the background, the packages kilnd holds
  for these block classes on this node (prefetch=False: not), so a hit's first call
  finds them loaded.
- A new signature is fingerprinted from what the process holds (no compiler runs; see
  schema/python-fingerprint.md). If kilnd has a package for it (a hit, found within 5 s;
  a slower answer is used from a later call on), the package is loaded once per process
  (or was prefetched for exactly that key) and every instance of the class runs it with
  its own weights attached as user-managed constants (no copy).
- Otherwise (a miss) the call runs eager and, in a background thread, the block is
  exported once (torch.export of the call as made), registered with kilnd as a weight-free
  source if kilnd lacks it, and built by kilnd; calls run eager until the package lands,
  then the compiled block takes over between two calls. No call waits for a compiler and
  no call fails because of kiln: any failure leaves that signature eager (status() says why).
  on_miss="wait" exports and asks for every miss in the calling thread, so all of a model
  call's signatures build side by side; the call runs eager, and at its end waits for
  those builds (the next call runs compiled). on_miss="compile" takes the miss path as
  "eager" does, but runs the block through torch.compile (regional, as diffusers'
  compile_repeated_blocks does, fed by kilnd's torch cache when kilnd serves one) until the
  package lands: the first call of a class waits for torch's compiler, later calls run
  compiled at once.
- Calls that need autograd (grad enabled and a parameter or input requiring grad) run
  eager: a package computes no gradients.

Daemon gone: hits are impossible and misses are not built; calls run eager and status()
shows the reason. Thread safety: hooked blocks may be called from several threads;
compile_repeated_blocks/restore must not race with calls on the same model.
"""
import logging
import weakref
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Union

if TYPE_CHECKING:
    import torch

    from ..client import Client

from . import _fingerprint, _gate, _hooks, _layouts, _runtime, _state, _torch_range
from ._signature import Unsupported, capture
from ._torch_cache import torch_cache_url, use_torch_cache

log = logging.getLogger("kiln.torch")
_STATE_ATTR = "_kiln_torch_state"


class _ModelState:
    def __init__(self, runtime, blocks):
        self.runtime = runtime
        self.blocks = blocks
        self.unsupported = {}  # (region, reason) -> calls
        self.model_hook = None  # the model's forward pre-hook: the gate's model boundary
        self.model_end_hook = None  # the forward hook: the call's end (on_miss="wait" waits there)
        self.process_now = None  # _state.process_token() read at the start of the model's call in progress
        self.boundary = None    # weakref.finalize withdrawing that boundary from the gate


class _BlockState:
    __slots__ = ("guards", "constants", "device", "structure", "described", "jit")

    def __init__(self):
        self.guards = {}          # (call guard, state token) -> Entry
        self.constants = None     # the block's tensors by name, for the structure below
        self.device = None
        self.structure = None     # _state.structure() when `constants` were taken
        self.described = None     # _state.structure() the fingerprint's cached description is of
        self.jit = None           # on_miss="compile": torch.compile of its forward; False once that failed


def _block_device(block, signature):
    for p in block.parameters():
        return p.device
    for t in signature.tensors:
        return t.device
    return None


def _needs_grad(block, signature):
    import torch

    if not torch.is_grad_enabled():
        return False
    return any(t.requires_grad for t in signature.tensors) or any(p.requires_grad for p in block.parameters())


def _instance_forward(block, original):
    """The forward `block` runs when it is not its class's (an instance-level override the
    user set before kiln), else None."""
    func = getattr(original, "__func__", None)
    if func is not None and getattr(original, "__self__", None) is block and func is getattr(type(block), "forward", None):
        return None
    return original


_NO_JIT = object()  # jit()'s "run eager"


def _make_call(state):
    runtime = state.runtime
    per_block = {}

    def eager(block, reason, original, args, kwargs):
        key = (type(block).__name__, reason)
        if key not in state.unsupported:
            log.warning("kiln: %s runs eager: %s", key[0], key[1])
        state.unsupported[key] = state.unsupported.get(key, 0) + 1
        return original(*args, **kwargs)

    def jit(block, bs, entry, original, args, kwargs, structure):
        """on_miss="compile": the block through torch.compile while its package is not
        there, once the entry's background compile is ready (Runtime.start_jit; this call
        starts it when it is the entry's first). Until then, and for good when it failed,
        _NO_JIT: the call runs eager, never waiting for the compiler."""
        if entry.jit_state is None:
            runtime.start_jit(entry, block, original, args, kwargs, bs.device, structure)
        if entry.jit_state != "ready" or bs.jit is False:
            return _NO_JIT
        if bs.jit is None:
            owner, fn = entry.jit_first
            bs.jit = fn if owner == id(block) else runtime.jit_compiled(original)
        try:
            out = bs.jit(*args, **kwargs)
        except Exception as ex:
            bs.jit = False
            entry.jit_problem = f"torch.compile failed, eager until the package lands: {type(ex).__name__}: {ex}"
            log.warning("kiln: %s: %s", entry.region, entry.jit_problem)
            return _NO_JIT
        entry.calls["jit"] += 1
        return out

    def call(block, original, args, kwargs):
        _gate.GATE.checkpoint()  # a background export may want the process (a block boundary)
        bs = per_block.get(id(block))
        if bs is None:
            bs = per_block[id(block)] = _BlockState()
        try:
            sig = capture(args, kwargs)
        except Unsupported as ex:
            return eager(block, str(ex), original, args, kwargs)
        problem = _state.autocast_problem()
        if problem is not None:
            return eager(block, problem, original, args, kwargs)
        # The state token (_state.py): LoRA scale, fused or not, loaded or not, the block's
        # tensors, the numerics flags and process globals. A change is another entry (a hit
        # or the miss path).
        structure = _state.structure(block)
        process = state.process_now or _state.process_token()
        guard = (sig.guard, structure, process)
        entry = bs.guards.get(guard)
        if isinstance(entry, str):  # the fingerprint cannot describe this state: eager, never a guess
            return eager(block, entry, original, args, kwargs)
        if entry is not None and entry.state == "stale":
            del bs.guards[guard]
            entry = None
        if entry is None:
            problem = _state.hook_problem(structure, _hooks.HOOK_NAME)
            if problem is not None:  # never guessed: eager, and status() says why
                return eager(block, problem, original, args, kwargs)
            device = _block_device(block, sig)
            if device is None or any(t.device != device for t in sig.tensors):
                return eager(block, "inputs on another device than the block's weights", original, args, kwargs)
            if bs.described is not None and bs.described != structure:
                _fingerprint.forget(block)  # its description was of another state
            bs.described = structure
            try:
                entry = runtime.entry(block, sig, device, _state.numerics_of(process), structure,
                                      forward=_instance_forward(block, original), process=process)
            except _fingerprint.Undescribable as ex:
                bs.guards[guard] = reason = f"the fingerprint cannot describe {ex}"
                return eager(block, reason, original, args, kwargs)
            bs.guards[guard] = entry
            bs.device = device
        if entry.state == "hit" and not _needs_grad(block, sig):
            if bs.constants is None or bs.structure != structure:
                bs.constants = _runtime.block_constants(block)
                bs.structure = structure
            first = next(iter(bs.constants.values()), None)
            if first is None or first.device == bs.device:
                try:
                    out = entry.package.call(bs.constants, sig.args, sig.kwargs)
                    entry.calls["compiled"] += 1
                    if entry.layout is None:  # for later processes' warm-up (_layouts.py) and variants
                        entry.layout = _layouts.of(sig)
                        _layouts.record(entry.key_digest, entry.layout)
                    return out
                except Exception as ex:  # never fail the caller because of kiln
                    entry.set("failed", f"{type(ex).__name__}: {ex}")
        if runtime.on_miss == "compile" and entry.state != "hit" and not _needs_grad(block, sig):
            out = jit(block, bs, entry, original, args, kwargs, structure)
            if out is not _NO_JIT:
                return out
        entry.calls["eager"] += 1
        return original(*args, **kwargs)

    return call


def check_torch() -> None:
    """Raises RuntimeError naming the version and the range when this process's torch is
    outside kiln's supported range (_torch_range.py, one range for the package and the
    worker): better at compile_repeated_blocks() than a failure per block later."""
    import torch

    why = _torch_range.problem(torch.__version__, hasattr(torch, "export"),
                               hasattr(getattr(torch._C, "_aoti", None), "AOTIModelPackageLoader"))
    if why:
        raise RuntimeError(f"kiln.torch: this process's {why}")


MIN_TORCH = _torch_range.MIN_TORCH


def _resolve_classes(model, block_classes):
    if block_classes is None:
        names = getattr(model, "_repeated_blocks", None)
        if not names:
            raise ValueError(f"{type(model).__name__} has no _repeated_blocks (a diffusers model lists its block "
                             "classes there); pass block_classes=[...]")
        return lambda m: type(m).__name__ in set(names)
    classes = tuple(c for c in block_classes if isinstance(c, type))
    names = {c for c in block_classes if isinstance(c, str)}
    return lambda m: isinstance(m, classes) or type(m).__name__ in names


def compile_repeated_blocks(model: "torch.nn.Module", block_classes: Optional[Iterable[Union[type, str]]] = None,
                            on_miss: str = "eager", socket: Optional[str] = None,
                            compile_options: Optional[Dict[str, Any]] = None, client: Optional["Client"] = None,
                            prefetch: Optional[bool] = None,
                            variants: Union[None, str, List[Dict[str, Any]]] = None) -> List["torch.nn.Module"]:
    """Serves every block of the given classes in `model` from kilnd's compiled packages.

    model: a torch.nn.Module (a diffusers model: its _repeated_blocks by default).
    block_classes: classes or class names; required when the model has no _repeated_blocks.
    on_miss: "eager" (default: never wait for a compiler), "wait" (for batch jobs: the
      calling thread exports each miss, whose source is registered and built from a thread
      of its own; the model call that met the misses runs eager and, when it returns, has waited for every one of
      those builds, which kilnd runs side by side; later calls run compiled) or "compile"
      (misses are built as with "eager", and meanwhile each block class and signature is
      compiled by torch.compile, as diffusers' regional compile does, but in a background
      thread: no call waits for torch's compiler (~10 s for a FLUX block on an H200); calls
      run eager until that compile is ready, then through it, until kiln's package takes
      over between two calls. When kilnd serves a torch cache, use_torch_cache() is
      switched on for it, so one process's compile warms the node's next ones; a compile
      that fails leaves that block eager, status() saying why).
    socket: kilnd's socket (default: $KILN_SOCKET, then the default search).
    compile_options: passed into the key's compile_options ({"mode": ..., "inductor": {...}}).
    client: a kiln.Client to use instead of connecting (its lifetime is the caller's).
    prefetch: load, in a background thread from now on, the packages kilnd holds for these
      block classes on this node (default True), so that a hit's first call finds them
      loaded; a package is still used only for the exact key its call computes. Until the
      model's first forward starts, it also runs each loaded package once on zeros of the
      input layout an earlier process recorded (_layouts.py), so its kernels are loaded.
      kiln.torch.wait(model) waits for it (e.g. before reporting ready).
    variants: faster packages built in kilnd's idle time (_variants.py): None (default:
      none), "auto" (on CUDA: max-autotune GEMM templates with coordinate-descent tuning;
      none on the CPU) or a list of compile-option dicts ({"mode": ..., "inductor": {...}},
      laid over compile_options). Once a block's package serves, each variant is asked for
      as an idle build (kilnd runs it only when a build slot has nothing else to do); when
      it lands, this process times it side by side with the serving package and switches
      to it between two block calls only if it is at least 3% faster and its checked error
      is within the default's. status() shows each variant ("variants": state, step_ratio,
      step_s, rel_err, detail); kiln.torch.wait(model, variants=True) waits for them.
      Off by default because "auto" has not won where measured: on an H200 (torch 2.11) it
      was 1.05-1.10x slower than the default package on every block class of FLUX, Wan 2.1
      and Qwen-Image, so it was built and kept off (tests/gpu/RESULTS-miss-variants.md).
    Returns the list of hooked blocks. ValueError when no block matches, or when the model
    is already compiled by kiln (restore() first). Connecting is lazy: no daemon running is
    not an error here (calls run eager; status() says why).
    """
    import torch

    check_torch()
    if not isinstance(model, torch.nn.Module):
        raise TypeError("compile_repeated_blocks takes a torch.nn.Module")
    if getattr(model, _STATE_ATTR, None) is not None:
        raise ValueError("this model is already compiled by kiln; kiln.torch.restore(model) first")
    match = _resolve_classes(model, block_classes)
    blocks = [m for _, m in model.named_modules() if m is not model and match(m)]
    if not blocks:
        raise ValueError(f"no block of the given classes in {type(model).__name__}")
    runtime = _runtime.Runtime(socket=socket, on_miss=on_miss, compile_options=compile_options, client=client,
                               variants=variants)
    if on_miss == "compile":
        runtime.feed_jit_from_torch_cache()
    state = _ModelState(runtime, blocks)
    call = _make_call(state)
    for b in blocks:
        _hooks.install(b, call)
    # The model's own calls are the gate's preferred boundary (_gate.py): an export waits
    # for the next one, so the forward running now, a miss's first, is not paused.
    def before_model_call(module, args):
        runtime.note_model_called()
        _gate.GATE.checkpoint(model_boundary=True)
        # The numerics flags and process globals once per model call (~25 us for the
        # flags, plus the watched globals), not per block call.
        state.process_now = _state.process_token()

    def after_model_call(module, args, out):
        state.process_now = None
        runtime.wait_for_builds()  # on_miss="wait" only

    state.model_hook = model.register_forward_pre_hook(before_model_call)
    state.model_end_hook = model.register_forward_hook(after_model_call)
    _gate.GATE.add_model_boundary()
    state.boundary = weakref.finalize(model, _gate.GATE.add_model_boundary, -1)  # at restore() or collection
    object.__setattr__(model, _STATE_ATTR, state)
    if _runtime.PREFETCH if prefetch is None else prefetch:
        runtime.start_prefetch(blocks)
    return blocks


def compile_pipeline(pipe: Any, **kwargs: Any) -> Dict[str, List["torch.nn.Module"]]:
    """compile_repeated_blocks for every component of a diffusers pipeline that lists
    _repeated_blocks (its transformer or unet); returns {component name: blocks}."""
    import torch

    out = {}
    for name, component in getattr(pipe, "components", {}).items():
        if isinstance(component, torch.nn.Module) and getattr(component, "_repeated_blocks", None):
            out[name] = compile_repeated_blocks(component, **kwargs)
    if not out:
        raise ValueError("no component of this pipeline lists _repeated_blocks")
    return out


def restore(model: "torch.nn.Module") -> None:
    """Puts eager forwards back on every block kiln hooked in `model` (idempotent); loaded
    packages are released with the model's state. Stops the model's background work and
    waits for its threads to end (at most _runtime.STOP_WAIT_S, 10 s: an export, package
    load or request in flight), so that afterwards none of them holds a package."""
    state = getattr(model, _STATE_ATTR, None)
    if state is None:
        return
    for b in state.blocks:
        _hooks.remove(b)
    state.model_hook.remove()
    state.model_end_hook.remove()
    state.boundary()  # once: a finalizer runs at most once
    state.runtime.stop(wait_s=_runtime.STOP_WAIT_S)
    state.runtime.release()
    object.__delattr__(model, _STATE_ATTR)


def status(model: "torch.nn.Module") -> List[Dict[str, Any]]:
    """Per block class and signature: {"region", "signature", "state" (hit, building,
    exporting, failed, eager, unsupported), "detail" (why; a failed build's last log line),
    "fingerprint", "key_digest", "calls": {"compiled", "eager", "jit"} ("jit": calls that
    ran torch.compile, on_miss="compile"), while a build is queued "queue": {"position"
    (builds ahead of it on kilnd), "expected_s" (seconds until it lands, from the key's and
    the node's build history; None when kilnd has none)}, and with on_miss="compile" until
    the package lands "jit": the background torch.compile's state (compiling, ready,
    failed: "detail" says why), and with variants, once the default serves, "variants":
    [{"compile_options", "state" (asked, building, timing, serving, kept default, failed,
    stopped), "key_digest", "step_ratio" (its step over the serving package's, timed side
    by side), "step_s" and "rel_err" (its build's check), "detail" (why)}]}. [] if not
    compiled."""
    state = getattr(model, _STATE_ATTR, None)
    if state is None:
        return []
    out = [e.as_dict() for e in list(state.runtime.entries.values())]
    for (region, reason), n in state.unsupported.items():
        out.append({"region": region, "signature": None, "state": "unsupported", "detail": reason,
                    "fingerprint": None, "key_digest": None, "calls": {"compiled": 0, "eager": n, "jit": 0}})
    return out


def wait(model: "torch.nn.Module", timeout: float = 600.0, variants: bool = False) -> bool:
    """Waits until no block of `model` is exporting, building or being prefetched (True),
    or `timeout` seconds passed (False). For batch jobs, tests, and servers that report
    ready only once the packages are loaded; serving code need not call it. variants=True:
    also until every variant asked for (compile_repeated_blocks(variants=...)) is decided."""
    state = getattr(model, _STATE_ATTR, None)
    if state is None:
        return True
    with _gate.GATE.parked():  # this thread runs no module meanwhile: exports may go on
        return state.runtime.wait_idle(timeout, variants=variants)


def manifest(model: "torch.nn.Module", path: str) -> Dict[str, int]:
    """Writes the prewarm manifest (schema/prewarm-manifest.md) of every key the blocks of
    `model` asked for in this process (each block class, call structure, signature and
    compile options met so far; a signature still exporting is not in it yet: call
    kiln.torch.wait(model) first), and beside it, under `sources/`, the weight-free
    sources kilnd holds for them, named as kiln.torch looks them up. `kilnctl prewarm
    PATH` on another node (or `--fleet`) then builds exactly these keys for that node's
    GPU and toolchain, and a fresh process there hits from its first call. Returns
    {"keys": n, "sources": n}. ValueError when the model is not compiled by kiln or asked
    for no key yet."""
    import time

    from .. import _manifest

    state = getattr(model, _STATE_ATTR, None)
    if state is None:
        raise ValueError("this model is not compiled by kiln.torch (compile_repeated_blocks first)")
    keys = [e.key for e in list(state.runtime.entries.values())
            if e.key is not None and e.state not in ("failed", "unsupported", "stale")]
    if not keys:
        raise ValueError("no block of this model has a key yet: call the model (and kiln.torch.wait(model)) first")
    header = (f"written by kiln.torch.manifest from {type(model).__name__}, {time.strftime('%Y-%m-%d %H:%M:%S')}; "
              f"{len(keys)} key(s) of {len({k['region'] for k in keys})} block class(es)")
    return _manifest.write(keys, path, state.runtime.client(), header=header)


__all__ = ["compile_repeated_blocks", "compile_pipeline", "restore", "status", "wait", "manifest", "use_torch_cache",
           "torch_cache_url"]
