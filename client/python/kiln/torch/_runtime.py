"""The per-process state of kiln.torch: one Entry per block fingerprint (class + structure +
call signature), its state machine, and the background thread that takes misses.

States of an Entry (kiln.torch.status() reports them):
  eager     no package (yet); calls run the block's own forward
  exporting the background thread exports the block (torch.export) and registers it
  building  kilnd builds the artifact; calls run eager meanwhile
  hit       the package is loaded; calls run it (each instance with its own weights)
  failed    export, registration, build or load failed; `detail` says why (the build
            log's last line for a failed build); calls run eager for good in this process
  unsupported the call holds something a key cannot describe; eager for good
  stale     the block's state changed before its export; the next call in that state
            asks again (a new entry)

A miss never blocks a call (on_miss="eager"): the first call of a new fingerprint waits for
a hit attempt (a sources listing, a GET and a package load: ~0.3 s per package; at most
HIT_WAIT_S, so a daemon that does not answer cannot hold it), and otherwise the entry goes
to the background thread and the call runs eager. The compiled block
takes over at the first call after the entry turns `hit` (between two calls, never during
one). on_miss="wait" exports and asks for the build in the calling thread, runs the call
eager, and waits for every build the model's call asked for when that call ends
(Runtime.wait_for_builds): a model's signatures are built side by side, and its next call
runs compiled.

The prefetch (started by compile_repeated_blocks, thread "kiln-prefetch") does the hit's
slow parts before the first call: it lists the sources, asks kilnd which artifacts it holds
for these block classes on this node (LIST: region, dtype, this process's node fields;
newest access first, only those built from a kiln.torch source, at most
PREFETCH_PER_REGION per class), and GETs and loads them. It only loads: a hit attempt
still computes the call's fingerprint and key, and uses a prefetched package only when the
key's digest (with kilnd's cpu_isa, from STATUS) is that package's key digest. A hit
attempt that meets a load in flight for its digest waits for it instead of loading again
(one load per key digest and device in the process, whoever asks first). After its loads,
the prefetch runs each loaded package once on zeros of the input layout an earlier process
recorded for its key (_layouts.py), so that its kernels load before the first call; only
until the model's first forward starts (kiln.torch.wait() before it gives the warm-ups time).

Seams for tests (CPU machines have no torch.export or AOTI): EXPORTER and LOADER below.
"""
import atexit
import contextlib
import logging
import os
import queue
import tempfile
import threading
import time
import weakref

from .. import errors
from ._weight_free import strip_weights  # noqa: F401  (kiln.torch._runtime.strip_weights, as before)
from . import (_aoti, _fingerprint, _fx_threads, _gate, _hooks, _keys, _layouts, _node, _queue, _signature, _state,
               _variants)

log = logging.getLogger("kiln.torch")

SOURCE_NAME_PREFIX = "kiln-fp-"


class StateChanged(RuntimeError):
    """The block's state (its LoRA scale, its tensors) changed between the call that missed
    and its export: exporting now would file one state's graph under another's fingerprint."""


def default_exporter(block, args, kwargs, workdir, as_called=contextlib.nullcontext):
    """torch.export of the block as called, weights stripped; returns (archive path, None):
    the model hash is the node's to compute (DESIGN.md, "The node computes model hashes":
    register_source sends the archive without one and kilnd's worker hashes it), so nothing
    of kiln's worker runs in this process. `as_called()` (Job.as_called) is entered with the
    model paused: it puts the block in the call's state where it can (a per-call LoRA
    scale) for the trace, and raises StateChanged where it cannot."""
    import torch

    # Only the trace needs the process to itself (_gate.py); saving does not.
    with _gate.GATE.exclusive(_stop_requested), torch.no_grad(), as_called():
        # The model runs no call meanwhile (the gate): the state checked is the one exported.
        ep = torch.export.export(block, tuple(args), dict(kwargs))
    path = os.path.join(workdir, "block.pt2")
    torch.export.save(on_device_zero(strip_weights(ep)), path)
    return path, None


def on_device_zero(ep):
    """The export with every `cuda:N` (N > 0) it names moved to `cuda:0`. The model hash
    names devices by type (schema/sources.md), so this is the same source as the block's
    export on cuda:0; but kilnd checks and builds with one GPU visible (the slot's), where
    an archive naming cuda:1 does not even load (found on two H200s: a block class first
    seen on cuda:1 of a split model was refused at registration). Unchanged when it names
    no such device, or when torch's pass cannot move it (registration then says why)."""
    import torch

    names = set()

    def note(d):
        if isinstance(d, torch.device) and d.type == "cuda" and d.index not in (None, 0):
            names.add(str(d))

    for node in ep.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            note(val.device)
        for a in list(node.args) + list(node.kwargs.values()):
            note(a)
    for t in list(ep.state_dict.values()) + list(ep.constants.values()):
        if isinstance(t, torch.Tensor):
            note(t.device)
    if not names:
        return ep
    try:
        from torch.export.passes import move_to_device_pass

        return move_to_device_pass(ep, {n: "cuda:0" for n in sorted(names)})
    except Exception as ex:  # registration reports the archive's own error
        log.info("kiln: could not move the export from %s to cuda:0: %s: %s", sorted(names), type(ex).__name__, ex)
        return ep


# Loaded packages by (key digest, device index), shared by every model of the process;
# an entry that holds one keeps it alive.
_packages = weakref.WeakValueDictionary()
_packages_lock = threading.Lock()

# How long the first call of a new signature waits for the hit attempt (sources listing,
# GET, package load) before it runs eager; the attempt goes on and a later call uses it.
HIT_WAIT_S = 5.0

# The prefetch: on by default (compile_repeated_blocks(prefetch=...) overrides), and how
# many stored artifacts per block class it loads ahead (newest access first); WARM_UP: run
# each loaded package once where its input layout is recorded (_layouts.py).
PREFETCH = True
PREFETCH_PER_REGION = 2
WARM_UP = True

# The seams: EXPORTER(block, args, kwargs, workdir, as_called) -> (path, model_hash or None:
# kilnd computes it), tracing inside `with as_called():` (which raises StateChanged);
# LOADER(path, device_index, key=None) -> object with call(constants, args, kwargs); raises
# _aoti.PackageMismatch naming the field when the key or package is not for this process.
EXPORTER = default_exporter
LOADER = _aoti.load_package


class Entry:
    """One block fingerprint: its state, key and (once `hit`) its loaded package."""

    def __init__(self, region, fingerprint, signature_text):
        self.region = region
        self.fingerprint = fingerprint
        self.signature = signature_text
        self.state = "eager"
        self.detail = ""
        self.key = None
        self.key_digest = None
        self.package = None
        self.artifact = None
        self.calls = {"compiled": 0, "eager": 0, "jit": 0}
        self.queue = None  # while building: _queue.estimate() of its build on kilnd
        self.jit_problem = ""  # on_miss="compile": why torch.compile gave up on this entry
        self.jit_state = None  # on_miss="compile": None, "compiling" (in the background), "ready", "failed"
        self.jit_first = None  # (id of the block it compiled, its compiled forward), once ready
        self.layout = None  # the input layout of its first compiled call in this process (_layouts.of)
        self.numerics = None  # the numerics flags of the calls this entry serves (the key's)
        self.check = None  # the default package's kiln/check.json (its error, step), once hit
        self.variants = None  # once asked for (_variants.py): one dict per variant, for status()
        self.variant = None  # the compile options of the variant serving; None: the default

    def set(self, state, detail=""):
        if state != self.state:
            level = logging.WARNING if state in ("failed", "unsupported") else logging.INFO
            log.log(level, "kiln: %s [%s]: %s -> %s%s", self.region, self.signature, self.state, state,
                    f" ({detail})" if detail else "")
        self.state, self.detail = state, detail

    def as_dict(self):
        out = {"region": self.region, "signature": self.signature, "state": self.state,
               "detail": self.detail or self.jit_problem, "fingerprint": self.fingerprint,
               "key_digest": self.key_digest, "calls": dict(self.calls)}
        if self.state == "building" and self.queue is not None:
            out["queue"] = dict(self.queue)
        if self.jit_state is not None and self.state != "hit":
            out["jit"] = self.jit_state
        if self.variants is not None:
            out["variants"] = [dict(v) for v in self.variants]
        return out


# Every Runtime with a background thread, stopped at interpreter exit (see _stop_at_exit).
_running = weakref.WeakSet()
_stopping = threading.Event()  # set at interpreter exit: exports waiting for the gate give up
EXIT_WAIT_S = 120.0

# on_miss="wait": how long the end of a model call waits for the builds it asked for.
WAIT_BUILDS_S = 7200.0

# How long restore() waits for a runtime's threads to end (Runtime.stop(wait_s)): an export,
# package load or request in flight; what still runs then ends by itself.
STOP_WAIT_S = 10.0

_worker = threading.local()  # in a runtime's miss thread: `stopped`, that runtime's stop flag


def _stop_requested():
    """True at interpreter exit, or once the runtime whose miss thread calls it stopped: an
    export still waiting for its turn at the gate then gives up (after restore(), the
    model's calls that it waits for no longer come)."""
    stopped = getattr(_worker, "stopped", None)
    return _stopping.is_set() or (stopped is not None and stopped())


# Threads of a runtime that interpreter exit waits for (below), besides its miss and prefetch threads.
_JOINED_AT_EXIT = ("kiln-register", "kiln-jit", "kiln-variant")


@atexit.register
def _stop_at_exit():
    """Stops the background threads before the interpreter finalizes. A daemon thread still
    inside torch.export when Python tears down aborts the process ("terminate called
    without an active exception", exit 134: seen on the H100); so the export in flight is
    let finish (bounded by EXIT_WAIT_S), as are a source's registration (its upload, then its
    temporary archive removed), a background compile and a variant's timing (package
    runs); waiting for builds stops at once."""
    _stopping.set()
    runtimes = list(_running)
    for r in runtimes:
        r.stop()
    deadline = time.monotonic() + EXIT_WAIT_S
    for r in runtimes:
        for t in [r._thread, r._prefetch_thread] + [t for t in r._threads if t.name in _JOINED_AT_EXIT]:
            if t is not None and t.is_alive():
                t.join(max(0.0, deadline - time.monotonic()))


class Runtime:
    """What one compile_repeated_blocks() call set up: options, client, entries, thread.

    Thread safety: entry creation is under a lock; an entry's state is written by one
    thread at a time (the caller on a hit, the background thread otherwise) and read by
    calls (reading a Python attribute is atomic)."""

    def __init__(self, socket=None, on_miss="eager", compile_options=None, poll_interval=0.25, client=None,
                 variants=None):
        if on_miss not in ("eager", "wait", "compile"):
            raise ValueError('on_miss must be "eager", "wait" or "compile"')
        _variants.check_variants_arg(variants)
        self.variants = variants
        self._variant_threads = 0    # variant threads running (under _lock), for wait_idle(variants=True)
        self.socket = socket
        self.on_miss = on_miss
        self.compile_options = dict(compile_options or {})
        self.poll_interval = poll_interval
        self.entries = {}
        self._lock = threading.Lock()
        self._client = client
        self._given_client = client is not None
        self._client_lock = threading.Lock()
        self._sources = {}           # fingerprint -> model hash, from the daemon's sources
        self._registering = {}       # fingerprint -> Event set once its source is registered (or failed)
        self._sources_listed = 0.0   # when the last listing started (monotonic), 0: never
        self._listing_lock = threading.Lock()  # one LIST_SOURCES at a time; waiters reuse it
        self._loads = {}             # (key digest, device index) -> _Load: one load each
        self._cpu_isa = None         # kilnd's cpu_isa (STATUS), to compute key digests here
        self._prefetch_thread = None
        self._held = []              # what the prefetch loaded: kept for this runtime's life
        self._model_called = threading.Event()  # the model ran a forward: no warm-up starts after
        self._jobs = queue.Queue()
        self._pending = 0            # jobs submitted and not finished (under _lock)
        self._thread = None
        self._threads = []           # every thread started for this runtime, for stop(wait_s)
        self._threads_lock = threading.Lock()  # of _threads alone: _start runs under _lock too
        self._stop = threading.Event()
        self.call_supported = None  # whether libkiln/kilnd take the key's `call` (format 2)
        self._builds_at_once = None  # builds_at_once(): asked of kilnd once

    @property
    def _stopped(self):
        return self._stop.is_set()

    def _start(self, target, name, *args):
        """Starts a daemon thread of this runtime (stop(wait_s) waits for it)."""
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        t.start()
        with self._threads_lock:  # replaced whole, so that stop() reads it without the lock
            self._threads = [x for x in self._threads if x.is_alive()] + [t]
        return t

    # ---- on_miss="compile" -------------------------------------------------------------
    def jit_compiled(self, forward):
        """torch.compile of a block's forward, with the key's compile options (a mode, or
        Inductor options: torch.compile takes one of the two). Compiles at its first call."""
        import torch

        inductor = self.compile_options.get("inductor")
        mode = self.compile_options.get("mode")
        if inductor:
            return torch.compile(forward, options=dict(inductor))
        return torch.compile(forward, mode=None if mode in (None, "default") else mode)

    def start_jit(self, entry, block, forward, args, kwargs, device, structure):
        """on_miss="compile": compiles the entry's block in a thread of its own ("kiln-jit")
        by running torch.compile(forward) once on copies of this call's inputs, so that no
        call waits for torch's compiler: calls run eager until entry.jit_state turns
        "ready", then through torch.compile (one graph per class and signature; the other
        instances' compiled forwards find it in dynamo's cache). Dynamo's callback, grad
        mode and the current CUDA device are per thread, so the model's own thread runs on
        beside it; the grad and inference modes of the call are the compile's. torch.fx's
        tracer (under make_fx, so under every torch.compile) patches nn.Module.__call__ for
        the whole process: _fx_threads confines that to the compile's thread, and where it
        cannot, nothing is compiled. It holds _gate.TRACING, as an export does. `structure`
        is the block's state at the call: a compile that would start in another does not
        run, and the entry stays eager until its package lands. Dynamo guards every value
        its trace read (a LoRA scaling, say), so a state that changes during the compile
        cannot make it run a wrong graph; at worst a call in a state it did not see compiles
        again (diffusers' per-call LoRA scale is in the block only while a model call runs)."""
        import torch
        from torch.utils._pytree import tree_map

        def copy(x):
            return x.detach().clone() if isinstance(x, torch.Tensor) else x

        if not _fx_threads.confine():
            entry.jit_problem = ("torch.compile not run, eager until the package lands: this torch's tracer "
                                 "patches nn.Module for the whole process, and would take the model's own calls")
            entry.jit_state = "failed"
            log.warning("kiln: %s: %s", entry.region, entry.jit_problem)
            return
        args, kwargs = tree_map(copy, (tuple(args), dict(kwargs)))
        grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()
        entry.jit_state = "compiling"

        def compile_in_background():
            started = time.monotonic()
            try:
                with _gate.TRACING:
                    if self._stopped:
                        raise _gate.Stopped("kiln.torch stopped before the compile's turn came")
                    if _state.structure(block) != structure:
                        raise StateChanged("the block's state changed before the compile's turn (its LoRA, "
                                           "tensors or hooks): it would trace another state than the call's")
                    fn = self.jit_compiled(forward)
                    cuda = device.type == "cuda" and torch.cuda.is_available()
                    with torch.cuda.device(device) if cuda else contextlib.nullcontext(), \
                            torch.inference_mode(inference), torch.set_grad_enabled(grad):
                        fn(*args, **kwargs)
                        if cuda:
                            torch.cuda.synchronize(device)
                entry.jit_first = (id(block), fn)
                entry.jit_state = "ready"
                log.info("kiln: %s [%s]: torch.compile ready in %.1f s (background)", entry.region,
                         entry.signature, time.monotonic() - started)
            except (_gate.Stopped, StateChanged) as ex:  # not torch.compile's failure: it never ran
                entry.jit_problem = f"torch.compile not run, eager until the package lands: {ex}"
                entry.jit_state = "failed"
                log.info("kiln: %s: %s", entry.region, entry.jit_problem)
            except Exception as ex:
                entry.jit_problem = f"torch.compile failed, eager until the package lands: {type(ex).__name__}: {ex}"
                entry.jit_state = "failed"
                log.warning("kiln: %s: %s", entry.region, entry.jit_problem)

        self._start(compile_in_background, "kiln-jit")

    def feed_jit_from_torch_cache(self):
        """Points torch.compile's remote caches at kilnd's torch cache when kilnd serves one
        (use_torch_cache); without one, or without redis-py, the compiles use torch's local
        caches only (logged, not an error)."""
        from ._torch_cache import use_torch_cache

        try:
            use_torch_cache(self.socket)
        except (errors.KilnError, RuntimeError) as ex:
            log.info("kiln: on_miss=\"compile\" without kilnd's torch cache: %s", ex)

    # ---- the daemon ------------------------------------------------------------------
    def client(self):
        from ..client import Client

        with self._client_lock:
            if self._client is None:
                self._client = Client(self.socket)
            return self._client

    def wire_key(self, key):
        from ..client import Client

        if self.call_supported is None:  # asks the local libkiln, which parses keys as its kilnd does
            try:
                Client.key_digest(dict(key, cpu_isa="probe"))
                self.call_supported = True
            except errors.InvalidArgument as e:
                self.call_supported = "call" not in e.message and "format_version" not in e.message
        return _keys.to_wire(key, self.call_supported)

    def lookup_source(self, fingerprint, refresh=False):
        """The model hash registered for `fingerprint` (sources named kiln-fp-<fp>...), or None.
        refresh=False takes any listing made (waiting for one in progress, e.g. the
        prefetch's); refresh=True one that started after this call."""
        asked = time.monotonic()
        with self._lock:
            known = self._sources.get(fingerprint)
            listed = self._sources_listed
        if known or not refresh and listed:
            return known
        with self._listing_lock:
            with self._lock:
                if self._sources_listed and (not refresh or self._sources_listed >= asked):
                    return self._sources.get(fingerprint)
            started = time.monotonic()
            listing = self.client().sources.list()
            found = {}
            for s in listing:
                # A source's aliases: the names of other fingerprints that exported the same
                # program (kilnd keeps them; schema/sources.md, "Names").
                for name in [s.get("name") or ""] + list(s.get("aliases") or []):
                    if isinstance(name, str) and name.startswith(SOURCE_NAME_PREFIX):
                        found[name[len(SOURCE_NAME_PREFIX):len(SOURCE_NAME_PREFIX) + 64]] = s["model_hash"]
            with self._lock:
                self._sources.update(found)
                self._sources_listed = started
                return self._sources.get(fingerprint)

    # ---- entries ---------------------------------------------------------------------
    def entry(self, block, signature, device, numerics=None, structure=None, forward=None, process=None):
        """The Entry of this call's fingerprint, numerics flags (a _state.numerics_token;
        default: now) and device (its index too: a model split over GPUs gets each GPU's
        package), created (and started) on first sight. `structure` (_state.structure at
        the call) and `process` (_state.process_token) are checked again when the block is
        exported; `forward`: the instance-level forward the block runs (None: its class's).
        Raises _fingerprint.Undescribable when the block cannot be fingerprinted."""
        import json

        fp = _fingerprint.fingerprint(block, signature, device, forward=forward)
        numerics = numerics or _state.numerics_token()
        slot = (fp, numerics, device_index(device))
        with self._lock:
            e = self.entries.get(slot)
            if e is not None and e.state != "stale":
                return e
            e = Entry(type(block).__name__, fp, describe_signature(signature))
            e.numerics = json.loads(numerics)
            self.entries[slot] = e
        job = Job(e, block, signature, device, structure, forward, process)
        if self.on_miss == "wait":
            # The export in the calling thread (registration and build request then go on in a
            # thread of their own), the wait for the build at the end of the model's call
            # (wait_for_builds): every signature the call meets is exported before any is
            # waited for, so kilnd builds them side by side.
            with self._lock:
                self._pending += 1
            if not self.resolve(job, wait=False):
                self._finish(job)
            return e
        # The hit attempt runs in a thread of its own and the caller waits for it at most
        # HIT_WAIT_S: a daemon that accepts but does not answer must not hold a call.
        looked = threading.Event()

        def first_look():
            try:
                if not self.try_hit(job):
                    self.submit(job)
            finally:
                looked.set()

        with self._lock:
            self._pending += 1
        self._start(lambda: (first_look(), self._done()), "kiln-hit")
        looked.wait(HIT_WAIT_S)
        return e

    def _done(self):
        with self._lock:
            self._pending -= 1

    def try_hit(self, job):
        """A hit without waiting for a build: known fingerprint, stored artifact, package
        loaded (or prefetched for exactly this key)."""
        e = job.entry
        try:
            model_hash = self.lookup_source(e.fingerprint)
            if model_hash is None:
                return False
            self.make_key(job, model_hash)
            wire = self.wire_key(e.key)
            index = device_index(job.device)
            got = self.prefetched(wire, index)
            if got is None:
                art = self.client().get(wire)
                if art is None:
                    return False
                got = self.load_artifact(art, index)
            self.use(job, *got)
            return True
        except Exception as ex:  # a daemon that is gone is a miss, never a failed call
            log.info("kiln: %s: no hit (%s)", e.region, ex)
            return False

    def make_key(self, job, model_hash):
        e = job.entry
        e.key = _keys.build_key(model_hash, e.region, _keys.block_dtype(job.block, job.signature), job.signature,
                                job.device, self.compile_options, numerics=e.numerics)

    def load(self, job, artifact):
        self.use(job, *self.load_artifact(artifact, device_index(job.device)))

    def use(self, job, artifact, package):
        e = job.entry
        e.package = package
        e.artifact = artifact
        e.key_digest = artifact.key_digest
        e.set("hit")
        self.start_variants(job)

    # ---- faster variants (_variants.py) ------------------------------------------------
    def start_variants(self, job):
        """Once an entry's default package serves: asks kilnd for each variant as an idle
        build, and weighs each against what serves when it lands, in thread "kiln-variant"."""
        e = job.entry
        options = _variants.resolve(self.variants, job.device.type)
        if not options or e.variants is not None or e.key is None or self._stopped:
            return
        path = getattr(e.artifact, "path", None)
        e.check = _aoti.read_check(path) if path else None
        e.variants = [{"compile_options": v, "state": "asked"} for v in options]
        with self._lock:
            self._variant_threads += 1
        _running.add(self)  # its timing runs packages: joined at interpreter exit (_stop_at_exit)
        self._start(self._run_variants, "kiln-variant", e, weakref.ref(job.block), job.device)

    def _run_variants(self, e, block_ref, device):
        try:
            for v in e.variants:
                if self._stopped:
                    v["state"], v["detail"] = "stopped", "kiln.torch stopped first"
                    continue
                try:
                    self._weigh_variant(e, v, block_ref, device)
                except Exception as ex:  # only the default keeps serving
                    v["state"], v["detail"] = "failed", last_line(f"{type(ex).__name__}: {ex}")
                    log.info("kiln: %s variant %s: %s", e.region, v["compile_options"], v["detail"])
        finally:
            with self._lock:
                self._variant_threads -= 1

    def _weigh_variant(self, e, v, block_ref, device):
        wire = self.wire_key(_variants.variant_key(e.key, v["compile_options"]))
        reply = self.client().build(wire, wait=False, idle=True)
        v["key_digest"] = reply.get("key_digest")
        v["state"] = "building"
        art, why = self.await_artifact(wire, v["key_digest"], lambda: self.client().build(wire, wait=False, idle=True),
                                       max_delay=5.0)
        if art is None:
            v["state"], v["detail"] = ("failed", why) if why is not None else ("stopped", "kiln.torch stopped first")
            return
        artifact, package = self.load_artifact(art, device_index(device))
        check = _aoti.read_check(art.path)
        v["step_s"] = check.get("step_s") if check else None
        v["rel_err"] = check.get("rel_err") if check else None
        v["state"] = "timing"
        ratio, why = self._time_side_by_side(e, package, block_ref, device)
        v["step_ratio"] = ratio  # as decided on (a rounded one could sit on the other side of MIN_GAIN)
        take, reason = _variants.choose(e.check, check, ratio)
        if ratio is None:
            reason = why
        if take and not self._stopped and e.state == "hit":
            e.package, e.artifact, e.variant = package, artifact, v["compile_options"]  # from the next block call on
            v["state"] = "serving"
            log.info("kiln: %s [%s]: a variant serves now (%s): %s", e.region, e.signature, v["compile_options"], reason)
        else:
            v["state"] = "kept default"
        v["detail"] = reason

    def _time_side_by_side(self, e, package, block_ref, device):
        """(ratio of the variant's step to the serving package's, None) or (None, why): both
        run in turns on zeros of the input layout of the entry's first compiled call, with the
        block's weights. Waits for that call."""
        import torch

        while e.layout is None and not self._stopped:
            self._stop.wait(0.2)
        layout = _layouts.agreeing(e.layout, (e.key or {}).get("inputs"))
        block = block_ref()
        if layout is None or block is None:
            return None, "not timed: " + ("its calls' input layout cannot be rebuilt" if layout is None else "the block is gone")
        constants = block_constants(block)
        args, kwargs = _signature.build_arguments(layout["call"], _layouts.zeros(layout, device))
        serving = e.package
        if serving is None:
            return None, "not timed: the entry no longer serves a package"

        def sync():
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        with torch.no_grad():
            ratio = _variants.side_by_side(lambda: serving.call(constants, args, kwargs),
                                           lambda: package.call(constants, args, kwargs), sync)
        return ratio, ""

    def load_artifact(self, artifact, index):
        """(artifact, package) for a stored artifact on device `index`: one load per key
        digest and device in the process (a package another model loaded is shared; a load
        in flight in another thread is waited for). Raises what the loader raised."""
        slot = (artifact.key_digest, index)
        with self._lock:
            ld = self._loads.get(slot)
            owner = ld is None
            if owner:
                ld = self._loads[slot] = _Load()
        if not owner:
            ld.done.wait()
            if ld.result is None:
                raise RuntimeError(f"loading the package failed: {ld.error}")
            return ld.result
        try:
            with _packages_lock:  # one package per artifact and device in the process, whichever model asks
                package = _packages.get(slot)
                if package is None:
                    # The key it was stored under: every node field is checked against this
                    # process before the package's .so is loaded (_aoti.check_key).
                    package = LOADER(artifact.path, index, key=getattr(artifact, "key", None))
                    _packages[slot] = package
            ld.result = (artifact, package)
            return ld.result
        except BaseException as ex:
            ld.error = f"{type(ex).__name__}: {ex}"
            with self._lock:
                self._loads.pop(slot, None)  # a later attempt may try again
            raise
        finally:
            ld.done.set()

    def prefetched(self, wire, index):
        """(artifact, package) when the prefetch loaded (or is loading) exactly this key's
        artifact for device `index`; else None. Waits for a load in flight."""
        if not self._cpu_isa:
            return None
        try:
            from ..client import Client

            digest = Client.key_digest(dict(wire, cpu_isa=wire.get("cpu_isa") or self._cpu_isa))
        except Exception:
            return None
        with self._lock:
            ld = self._loads.get((digest, index))
        if ld is None:
            return None
        ld.done.wait(HIT_WAIT_S)
        return ld.result

    # ---- the prefetch ----------------------------------------------------------------
    def start_prefetch(self, blocks):
        """Loads, in the background, the packages kilnd holds for these blocks' classes on
        this node (see the module docstring); wait_idle() and kiln.torch.wait() wait for it."""
        regions, seen = [], set()
        for b in blocks:
            name = type(b).__name__
            if name in seen:
                continue
            seen.add(name)
            device = next((p.device for p in b.parameters()), None)
            if device is None:
                continue
            regions.append((name, device, _keys.block_dtype(b, _NO_CALL), b))
        if not regions:
            return
        with self._lock:
            self._pending += 1
        _running.add(self)
        self._prefetch_thread = self._start(self._prefetch, "kiln-prefetch", regions)

    def _prefetch(self, regions):
        try:
            # The code descriptions first (_describe.py: once per class and process, 0.1-0.7 s
            # for a diffusers block's code closure), so that the first call's fingerprint
            # finds them made. The block's own description is dropped again: its state may
            # change before its first call (a LoRA set meanwhile); a block that cannot be
            # described is the first call's to report.
            for _, _, _, block in regions:
                try:
                    _fingerprint.describe(block)
                except _fingerprint.Undescribable:
                    pass
                _fingerprint.forget(block)
            # The node fields first: Triton's hash is the slow part of a hit's first key
            # (_node.py), and the first call's hit attempt waits for this computation.
            fields = [_node.node_fields(device) for _, device, _, _ in regions]
            client = self.client()
            node = (client.status() or {}).get("node") or {}
            self._cpu_isa = node.get("cpu_isa") or None
            self.lookup_source(None, refresh=True)
            with self._lock:
                hashes = set(self._sources.values())
            ranked = []
            for (region, device, dtype, block), node_fields in zip(regions, fields):
                filters = {"kind": _keys.KIND, "region": region, "dtype": dtype}
                filters.update(node_fields)
                items = [i for i in client.ls(filters) if (i.get("key") or {}).get("model_hash") in hashes]
                ranked.append([(i["key_digest"], device_index(device), block, (i.get("key") or {}).get("inputs"))
                               for i in items[:PREFETCH_PER_REGION]])
            # The newest of every class first, then the next ones.
            order = [slot for rank in range(PREFETCH_PER_REGION) for slots in ranked if rank < len(slots)
                     for slot in [slots[rank]]]
            loaded = []
            for digest, index, block, inputs in order:
                if self._stopped:
                    return
                with self._lock:
                    if (digest, index) in self._loads:
                        continue
                art = client.get(digest)
                if art is not None:
                    artifact, package = self.load_artifact(art, index)
                    self._held.append((artifact, package))
                    loaded.append((package, digest, index, block, inputs))
            # Then the warm-ups: every load first, so a hit attempt never waits behind one. A
            # warm-up holds the GIL and the package for its run: beside a forward it would
            # only move that cost into the forward (H100: a first call of 0.78 s with it,
            # 0.41 s without), so none starts once the model has been called.
            for package, digest, index, block, inputs in loaded if WARM_UP else ():
                if self._stopped or self._model_called.is_set():
                    return
                self.warm_up(package, digest, index, block, inputs)
        except Exception as ex:  # the prefetch only saves time: a failure leaves the hit attempt to do it
            log.info("kiln: prefetch stopped: %s: %s", type(ex).__name__, ex)
        finally:
            self._done()

    def note_model_called(self):
        if not self._model_called.is_set():
            self._model_called.set()

    def warm_up(self, package, digest, index, block, key_inputs):
        """Runs `package` once on zeros of its recorded layout with `block`'s weights, so
        that its kernels are loaded before the model's first call (_layouts.py); outputs
        are dropped. Nothing without a record, or when the block is not on that device."""
        layout = _layouts.load(digest, key_inputs)
        if layout is None:
            return
        import torch

        device = torch.device("cuda", index) if index >= 0 else torch.device("cpu")
        constants = block_constants(block)
        if any(t.device != device for t in constants.values()):
            return
        try:
            args, kwargs = _signature.build_arguments(layout["call"], _layouts.zeros(layout, device))
            with torch.no_grad():
                package.call(constants, args, kwargs)
            log.debug("kiln: warmed %s", digest[:16])
        except Exception as ex:  # only saves time: the first call loads what this did not
            log.info("kiln: warm-up of %s skipped: %s: %s", digest[:16], type(ex).__name__, ex)

    def submit(self, job):
        with self._lock:
            if self._thread is None:
                self._thread = self._start(self._run, "kiln-miss")
                _running.add(self)
            self._pending += 1
        self._jobs.put(job)

    def _run(self):
        # Exports run one at a time here (each pauses the model's thread, _gate.py); the
        # wait for a build does not: it moves to a thread of its own, so every block class
        # of a model is exported and asked for at once and kilnd builds them side by side.
        _gate.mark_background()
        _worker.stopped = self._stop.is_set
        while not self._stopped:
            job = self._jobs.get()
            if job is None:
                return
            handed_off = False
            try:
                handed_off = self.resolve(job, wait=False)
            finally:
                if not handed_off:
                    self._finish(job)

    def _finish(self, job):
        job.release()
        with self._lock:
            self._pending -= 1

    def _poll_then_finish(self, job, key):
        _gate.mark_background()
        try:
            self._guarded(job.entry, lambda: self.poll(job, key))
        finally:
            self._finish(job)

    def _guarded(self, e, step):
        """step()'s result; on an error, the entry fails with its message and None comes back.
        A state change before the export makes the entry `stale`: the next call in that
        state asks again."""
        try:
            return step()
        except StateChanged as ex:
            e.set("stale", str(ex))
        except errors.KilnError as ex:
            e.set("failed", last_line(f"{ex.name}: {ex.message}"))
        except Exception as ex:  # export or load: the block stays eager, the caller never fails
            e.set("failed", last_line(f"{type(ex).__name__}: {ex}"))
        return None

    def resolve(self, job, wait):
        """The miss path: find or register the source, have kilnd build, load when it lands.
        With wait=False, returns True when the wait for the build was handed to a poller
        thread, which then finishes the job; False when the job is done here."""
        return bool(self._guarded(job.entry, lambda: self._resolve(job, wait)))

    def _resolve(self, job, wait):
        e = job.entry
        self._await_registration(e.fingerprint)
        model_hash = self.lookup_source(e.fingerprint, refresh=True)
        if model_hash is None:
            e.set("exporting")
            workdir = tempfile.TemporaryDirectory(prefix="kiln-export-")
            try:
                path, model_hash = EXPORTER(_hooks.unhooked_view(job.block, job.forward), job.args, job.kwargs,
                                            workdir.name, job.as_called)
            except BaseException:
                workdir.cleanup()
                raise
            if not wait:
                # kilnd's hash check of the source takes seconds (a worker process): the
                # next block class's export need not wait for it, and kilnd checks both at once.
                with self._lock:
                    self._registering[e.fingerprint] = threading.Event()
                self._start(self._register_then_build, "kiln-register", job, workdir, path, model_hash)
                return True
            with workdir:
                model_hash = self.register_source(model_hash, path, e.fingerprint)
            with self._lock:
                self._sources[e.fingerprint] = model_hash
        return self._build(job, model_hash, wait)

    def _register_then_build(self, job, workdir, path, model_hash):
        """The rest of a miss after its export, on a thread of its own ("kiln-register"):
        registers the source and asks kilnd for the build, whose wait goes to a poller
        thread (_build); finishes the job where it ends here."""
        _gate.mark_background()
        fp = job.entry.fingerprint
        handed_off = False
        try:
            def register():
                with workdir:
                    registered = self.register_source(model_hash, path, fp)
                with self._lock:
                    self._sources[fp] = registered
                return registered

            registered = self._guarded(job.entry, register)
            self._registered(fp)  # later jobs of this fingerprint look it up now
            if registered is not None:
                handed_off = bool(self._guarded(job.entry, lambda: self._build(job, registered, False)))
        finally:
            self._registered(fp)
            if not handed_off:
                self._finish(job)

    def _registered(self, fingerprint):
        with self._lock:
            event = self._registering.pop(fingerprint, None)
        if event is not None:
            event.set()

    def _await_registration(self, fingerprint):
        """Waits while another job's source of this fingerprint is being registered (a
        block class at a second signature), so that it is looked up, not exported again."""
        with self._lock:
            event = self._registering.get(fingerprint)
        while event is not None and not event.wait(0.1):
            if self._stopped:
                raise _gate.Stopped("kiln.torch stopped while the source was being registered")

    def _build(self, job, model_hash, wait):
        """The key of `job` from its source's model hash, then kilnd's build: waited for
        here (wait=True, False comes back), else asked for and its wait handed to a poller
        thread (True)."""
        e = job.entry
        job.drop_inputs()
        self.make_key(job, model_hash)
        key = self.wire_key(e.key)
        if wait:
            e.set("building")
            self.load(job, self.client().get(key, build=True))
            return False
        reply = self.client().build(key, wait=False)
        e.key_digest = reply.get("key_digest")
        e.set("building", reply.get("state", ""))
        self._start(self._poll_then_finish, "kiln-poll", job, key)
        return True

    def register_source(self, model_hash, path, fingerprint):
        """PUT_SOURCE of an export; returns its model hash. Without one (the default
        exporter), kilnd's worker computes it and kilnd answers with the source of that
        hash, ours or one another process registered first from its own export (the same
        program; an archive is not byte-stable across processes). With one (a test seam),
        kilnd refuses other bytes under a hash that has a source, since a source is never
        replaced; that source is as good as ours (schema/sources.md: a model hash names one
        program), so the build goes on from it."""
        name = f"{SOURCE_NAME_PREFIX}{fingerprint}.pt2"
        with self._connection() as c:
            if model_hash is None:
                return c.sources.put(None, path, name=name)["model_hash"]
            try:
                c.sources.put(model_hash, path, name=name)
            except errors.InvalidArgument:
                if not any(s.get("model_hash") == model_hash for s in c.sources.list(model_hash)):
                    raise
                log.info("kiln: source %s was registered by another process first; building from it",
                         model_hash[:16])
        return model_hash

    @contextlib.contextmanager
    def _connection(self):
        """A connection of its own for a request kilnd answers only after seconds (PUT_SOURCE:
        its worker hashes the source), so that this runtime's other requests (the next block
        class's lookup, the polls) do not queue behind it on the shared one; the caller's
        client where compile_repeated_blocks was given one."""
        if self._given_client:
            yield self.client()
            return
        from ..client import Client

        with Client(self.socket) as c:
            yield c

    def poll(self, job, key):
        """Waits (in the background thread) for the build of `key` to land, then loads it;
        the entry fails with the build's error (await_artifact), and shows its place in
        kilnd's queue meanwhile."""
        e = job.entry

        def queue(builds):
            e.queue = _queue.estimate(builds, e.key_digest, time.time(), self.builds_at_once())

        art, why = self.await_artifact(key, e.key_digest, lambda: self.client().build(key, wait=False), queue)
        if art is not None:
            self.load(job, art)
        elif why is not None:
            e.set("failed", why)

    def await_artifact(self, wire, key_digest, resubmit, on_builds=None, max_delay=2.0):
        """Polls kilnd until the artifact of `wire` (digest `key_digest`) lands: (Artifact,
        None); (None, why) when its build failed (its last error line) or kilnd lost it three
        times (each time resubmit() asks again: a restart while building); (None, None) once
        this runtime stops. A daemon restart is waited out (up to ~60 s unreachable; longer
        raises Unavailable). on_builds(builds): every build kilnd knows of, at each poll."""
        delay, unreachable_since, resubmits = self.poll_interval, None, 0
        while not self._stopped:
            try:
                art = self.client().get(wire)
                if art is not None:
                    return art, None
                # Every build kilnd knows of, once: this key's states and where it stands.
                builds = self.client().build_status()
                mine = [b for b in builds if b.get("key_digest") == key_digest]
                unreachable_since = None
                if on_builds is not None:
                    on_builds(builds)
                if not {"queued", "running", "done"} & {b.get("state") for b in mine}:
                    failed = [b for b in mine if b.get("state") == "failed"]
                    if failed:
                        return None, last_line(failed[-1].get("error", "build failed"))
                    if resubmits >= 3:
                        return None, "kilnd lost the build three times"
                    resubmits += 1
                    resubmit()
            except errors.Unavailable:
                unreachable_since = unreachable_since or time.monotonic()
                if time.monotonic() - unreachable_since > 60:
                    raise
            self._stop.wait(delay)  # stop() ends the wait
            delay = min(delay * 1.5, max_delay)
        return None, None

    def builds_at_once(self):
        """The builds kilnd runs at once (STATUS: each slot's builds_at_once, 1 from a kilnd
        that does not say), asked once per runtime, for the queue estimate."""
        if self._builds_at_once is None:
            try:
                slots = self.client().status().get("build_slots") or []
                self._builds_at_once = max(1, sum(int(s.get("builds_at_once", 1)) for s in slots))
            except errors.KilnError:
                return 1  # asked again at the next poll
        return self._builds_at_once

    def stop(self, wait_s=0.0):
        """Stops taking work: the miss thread ends after its job (an export still waiting
        for its turn gives up), the poller and the prefetch at their next step. With wait_s,
        then waits up to that many seconds for every thread of this runtime to end, so that
        none holds the runtime or a package it loaded; never for the calling thread itself,
        nor at interpreter exit (_stop_at_exit waits there). True when none is left running."""
        self._stop.set()
        self._jobs.put(None)
        if wait_s <= 0 or _stopping.is_set():
            return False
        me, deadline = threading.current_thread(), time.monotonic() + wait_s
        while True:
            alive = [t for t in self._threads if t is not me and t.is_alive()]
            left = deadline - time.monotonic()
            if not alive or left <= 0:
                break
            alive[0].join(left)
        if alive:
            log.info("kiln: stopped; still running after %.0f s: %s", wait_s, ", ".join(t.name for t in alive))
        return not alive

    def release(self):
        """Drops every package and artifact this runtime holds (restore(), once its threads
        stopped): released now, not when a reference cycle through the model's hooks (with
        diffusers, its HookRegistry) is next collected. Entries read eager afterwards."""
        with self._lock:
            entries = list(self.entries.values())
            self._held = []
            self._loads = {}
        for e in entries:
            if e.state == "hit":
                e.state = "eager"
            e.package = e.artifact = None

    def wait_for_builds(self):
        """on_miss="wait": at the end of a model call, waits (at most WAIT_BUILDS_S) for the
        builds its misses asked for, so the next call runs compiled."""
        if self.on_miss == "wait" and not self._stopped:
            self.wait_idle(WAIT_BUILDS_S)

    def wait_idle(self, timeout, variants=False):
        """Waits until no entry is exporting or building (for batch jobs and tests), and with
        variants=True until every variant asked for is decided; looks at least once, so
        timeout=0 asks without waiting."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                pending = self._pending + (self._variant_threads if variants else 0)
            if pending == 0 and not any(e.state in ("exporting", "building") for e in list(self.entries.values())):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)


def block_constants(block):
    """What a package of the block's class is given as user-managed constants: the block's
    own parameters and buffers, and its modules' plain tensor attributes (lifted by the
    export as constants; the package names them through _aoti.read_constant_names), by
    name."""
    consts = dict(block.named_parameters())
    consts.update(dict(block.named_buffers()))
    for path, t in _state.plain_tensors(block):
        consts[path] = t
    return consts


class _Load:
    """One package load in flight or done: `result` (artifact, package) or `error`."""

    __slots__ = ("done", "result", "error")

    def __init__(self):
        self.done = threading.Event()
        self.result = None
        self.error = ""


class _NoCall:
    tensors = ()


_NO_CALL = _NoCall()  # a signature with no tensors, for the key's dtype from parameters alone


def device_index(device):
    """The loader's device index: the CUDA index (the current device when unset), -1 for
    CPU."""
    if device.type != "cuda":
        return -1
    if device.index is not None:
        return device.index
    import torch

    return torch.cuda.current_device()


class Job:
    """What the miss path needs: the entry, the block, the call's inputs (kept only until
    the export), the device, the block's structure and the process token at the call
    (_state.structure, _state.process_token), and its instance-level forward (or None)."""

    def __init__(self, entry, block, signature, device, structure=None, forward=None, process=None):
        self.entry, self.block, self.signature, self.device = entry, block, signature, device
        self.args, self.kwargs = signature.args, signature.kwargs
        self.structure, self.forward, self.process = structure, forward, process

    @contextlib.contextmanager
    def as_called(self):
        """The block in the state of the call that missed, for the export's trace (entered
        with the model paused): as it is when nothing changed; with the call's LoRA
        scalings set back while it runs when only those changed (diffusers' per-call scale
        is undone at every model call's end, before the export's turn comes); StateChanged
        when anything else changed (tensors, fuse, adapters, process globals)."""
        restore = None
        if self.structure is not None:
            now = _state.structure(self.block)
            if now != self.structure:
                restore = _state.rescale_as(self.block, now, self.structure)
                if restore is None:
                    raise StateChanged("the block's state changed before its export")
        try:
            if self.process is not None and _state.process_token() != self.process:
                raise StateChanged("the process's numerics or globals changed before the block's export")
            yield
        finally:
            if restore is not None:
                restore()

    def drop_inputs(self):
        self.args, self.kwargs = (), {}

    def release(self):
        self.drop_inputs()
        self.block = self.forward = None


def last_line(text):
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def describe_signature(signature):
    parts = []
    for t in signature.tensors:
        parts.append(f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}")
    return ", ".join(parts) or "no tensors"
