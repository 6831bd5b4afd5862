"""Issue "A hit is never wrong", on the GPU: a diffusers FluxTransformer2DModel at FLUX.1-dev's
real widths (reduced depth, random bf16 weights; tests/gpu/families_gpu_configs.py) through
this tree's kiln.torch, against a real kilnd building with the real worker.
tests/gpu/lora_devices_run.sh builds kilnd, starts it and runs both parts side by side.

    python3 tests/gpu/lora_devices.py lora WORK OUT_JSON      # part (a), cuda:0
    python3 tests/gpu/lora_devices.py devices WORK OUT_JSON   # part (b), cuda:0 + cuda:1
    python3 tests/gpu/lora_devices.py report DIR RESULTS.md [NOTES.md]   # DIR/lora.json + devices.json

(a) lora: model.add_adapter(peft.LoraConfig(r=16, lora_alpha=16, target_modules=["to_q",
    "to_k", "to_v", "to_out.0"])), lora_B drawn at random (PEFT starts it at zero), an eager
    twin (copy.deepcopy before kiln hooks the model), kiln.torch.compile_repeated_blocks(
    model, on_miss="wait"). States in turn: LoRA at scale 1, per-call scale 0.5
    (joint_attention_kwargs={"scale": 0.5}), fuse_lora(), unfuse_lora(). In each: the twin
    and the model called twice each on the same inputs (twin first); per call the relative
    L2 error of the model's output against the twin's, its block calls compiled / eager
    (kiln.torch.status() deltas), its seconds; per state the builds kilnd ran for the
    model's keys (BUILD_STATUS) and how far the state's eager output is from the previous
    state's (so a stale package would show).
(b) devices: a FLUX without LoRA, its eager output on cuda:0 alone; then split as
    accelerate's "balanced" map splits by memory (embedders and double block 0 on cuda:0;
    double block 1, the single blocks, norm_out and proj_out on cuda:1), each block and
    norm_out/proj_out given a forward pre-hook that moves its tensor inputs to its own device
    (what accelerate's AlignDevicesHook does); the split model's eager output (the reference,
    before kiln); then kiln.torch.compile_repeated_blocks(model, on_miss="wait") and three
    calls (the first misses and waits for the builds); per call the error against both
    references; kiln.torch.status() and the runtime's entries with their device index.

Environment: KILN_SOCKET / KILN_LIBRARY (kiln's), KILN_LORA_DEPTH_LORA (default "1,2") and
KILN_LORA_DEPTH_DEVICES (default "2,2"): double,single blocks of each part's model,
KILN_LORA_DEADLINE_UNIX (the on_miss="wait" waits end before it), KILN_FAMILIES_TINY=1
(families_gpu_configs' CPU dry run: narrow widths, tiny inputs; part (b) on cpu, cpu),
KILN_LORA_PEFT_PATH (a sys.path entry holding the carried peft; dropped again, and the
image's peft used, when that peft fails to import: recorded).
"""
import time

T0 = time.monotonic()

import copy  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

BF16_TOLERANCE = 2e-2  # the worker's check for bfloat16, and the CPU suite's
LORA = dict(r=16, lora_alpha=16, target_modules=["to_q", "to_k", "to_v", "to_out.0"])
# lora_B ~ N(0, 1): at FLUX.1-dev's widths (CPU, 64 image + 32 text tokens) this LoRA moves the
# model's output by ~20% and scale 0.5 against 1 by ~15%, far past the tolerance, so a package
# of another state would show (0.1 moved it by 1%, 0.5 by 6% / 4%).
LORA_B_STD = 1.0


def log(*a):
    print(f"[lora_devices {time.monotonic() - T0:7.1f}s]", *a, flush=True)


# Blocks (double, single) per part. (a) 1 double + 2 single: PEFT's LoRA layers keep their
# own module path (kwargs["target_name"]), which enters kiln's fingerprint, so every LoRA'd
# block is a fingerprint of its own: an export and a source registration (~13 s) per block
# instance and state, inline in the first call (on_miss="wait"), before the last block
# class's build is asked for. Two single blocks keep two instances of one class (each its
# own LoRA weights) with one registration less before the last class's build than 2 + 2.
DEPTH_DEFAULT = {"lora": "1,2", "devices": "2,2"}


def depth(part):
    d, s = (int(x) for x in os.environ.get(f"KILN_LORA_DEPTH_{part.upper()}", DEPTH_DEFAULT[part]).split(","))
    return d, s


def deadline_left():
    dl = float(os.environ.get("KILN_LORA_DEADLINE_UNIX", "0") or 0)
    return dl - time.time() if dl else 1e9


def import_peft(result):
    """peft from KILN_LORA_PEFT_PATH (the carried wheel) before diffusers is imported; if it
    fails, that path is dropped (so diffusers' version check does not see its metadata) and
    the environment's own peft is used. Both recorded."""
    path = os.environ.get("KILN_LORA_PEFT_PATH")
    if path and path not in sys.path:
        sys.path.insert(0, path)
    try:
        import peft

        result["peft"] = peft.__version__
        result["peft_from"] = os.path.dirname(os.path.dirname(peft.__file__))
        return peft
    except Exception as ex:
        result["peft_carried_error"] = f"{type(ex).__name__}: {ex}"
        log("carried peft failed to import:", result["peft_carried_error"])
        for name in [m for m in sys.modules if m == "peft" or m.startswith("peft.")]:
            del sys.modules[name]
        while path in sys.path:
            sys.path.remove(path)
        import peft

        result["peft"] = peft.__version__
        result["peft_from"] = os.path.dirname(os.path.dirname(peft.__file__))
        return peft


def environment(result, part):
    import torch

    import diffusers
    import families_gpu_configs as cfg

    d, s = depth(part)
    fam = cfg.FAMILIES["flux"]
    result.update({
        "torch": torch.__version__, "diffusers": diffusers.__version__, "python": sys.version.split()[0],
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if torch.cuda.is_available() else ["cpu"],
        "kiln_tree": os.environ.get("KILN_LORA_TREE", "working tree"),
        "checkpoint": fam.checkpoint, "depth": f"{d} double + {s} single", "real_depth": fam.real_depth,
        "size": "tiny (KILN_FAMILIES_TINY)" if cfg.TINY else fam.size, "tiny": cfg.TINY,
        "tolerance": BF16_TOLERANCE,
    })


def build_flux(seed, device, part):
    """FluxTransformer2DModel at FLUX.1-dev's widths (families_gpu_configs), the part's depth
    in, bf16 from the seed, on `device`, eval, no grad."""
    import torch

    import families_gpu_configs as cfg

    d, s = depth(part)
    conf = dict(cfg.config_of("flux"), num_layers=d, num_single_layers=s)
    torch.manual_seed(seed)
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            model = cfg.model_class("flux")(**conf)
    finally:
        torch.set_default_dtype(torch.float32)
    return model.eval().requires_grad_(False)


def rel_err(out, ref):
    ref = ref.to(out.device).float()
    return float((out.float() - ref).norm() / ref.norm().clamp_min(1e-12))


def sync():
    import torch

    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            torch.cuda.synchronize(i)


def call_counts(kt, model):
    st = kt.status(model)
    return (sum(e["calls"]["compiled"] for e in st), sum(e["calls"]["eager"] for e in st))


def counted_call(kt, model, call):
    """call() and its seconds, with the model's block calls it made compiled and eager
    (kiln.torch.status() deltas): (output, seconds, compiled, eager)."""
    c0, e0 = call_counts(kt, model)
    t = time.monotonic()
    out = call()
    dt = time.monotonic() - t
    c1, e1 = call_counts(kt, model)
    return out, dt, c1 - c0, e1 - e0


def entries_with_devices(model):
    """kiln.torch.status() has no device; the runtime's entries are keyed (fingerprint,
    numerics, device index): each entry with its device index."""
    state = getattr(model, "_kiln_torch_state", None)
    if state is None:
        return []
    out = []
    for slot, e in list(state.runtime.entries.items()):
        d = e.as_dict()
        d["device_index"] = slot[2]
        d["package_loaded"] = e.package is not None
        out.append(d)
    return out


def kilnd_builds(digests=None):
    import kiln

    with kiln.Client() as c:
        builds = c.build_status()
    if digests is not None:
        builds = [b for b in builds if b.get("key_digest") in digests]
    return builds


def wait_kilnd(limit_s=240):
    """kilnd answers STATUS (its probe may go on: builds wait for it)."""
    import kiln

    t = time.monotonic()
    while True:
        try:
            with kiln.Client() as c:
                st = c.status()
            return {"answered_after_s": round(time.monotonic() - t, 2), "builds_probing": st.get("builds_probing"),
                    "build_slots": st.get("build_slots"), "node": st.get("node")}
        except Exception as ex:
            if time.monotonic() - t > limit_s:
                return {"error": f"kilnd does not answer: {type(ex).__name__}: {ex}"}
            time.sleep(0.5)


def kiln_compile(result, model):
    """Waits for kilnd to answer (result["kilnd"]), then kiln.torch.compile_repeated_blocks(
    model, on_miss="wait"), timed (result["compile_call_s"]): kiln.torch and the blocks."""
    result["kilnd"] = wait_kilnd()
    import kiln.torch as kt

    t = time.monotonic()
    blocks = kt.compile_repeated_blocks(model, on_miss="wait")
    result["compile_call_s"] = round(time.monotonic() - t, 4)
    return kt, blocks


def set_wait_limit():
    """on_miss="wait" waits at a model call's end for its builds (WAIT_BUILDS_S): never past
    the call's deadline, so the JSON and report are written in time."""
    from kiln.torch import _runtime

    _runtime.WAIT_BUILDS_S = max(5.0, deadline_left() - 25.0)


def save(result, path):
    result["wall_s"] = round(time.monotonic() - T0, 2)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1, default=str)
    os.replace(tmp, path)


def run_part(part, body, out_path, **fields):
    """body(result, out_path) on a result {"part": part, "started_unix", **fields}; whatever
    it raises recorded in it; the result written to out_path at the end."""
    result = {"part": part, "started_unix": time.time(), **fields}
    try:
        body(result, out_path)
    except BaseException as ex:
        result["error"] = f"{type(ex).__name__}: {ex}"
        result["traceback"] = traceback.format_exc()[-5000:]
        log("FAILED:", result["error"])
    result["finished_unix"] = time.time()
    save(result, out_path)


# ---------------------------------------------------------------------------------------
# (a) LoRA states


def part_lora(work, out_path):
    run_part("lora", _part_lora, out_path, steps=[])


def _part_lora(result, out_path):
    peft = import_peft(result)
    import torch

    import families_gpu_configs as cfg

    environment(result, "lora")
    dev = cfg.DEVICE if cfg.TINY else "cuda:0"
    model = build_flux(0, dev, "lora")
    model.add_adapter(peft.LoraConfig(**LORA))
    g = torch.Generator(device="cpu").manual_seed(1)
    n_lora = 0
    with torch.no_grad():  # PEFT starts lora_B at zero: a LoRA that changes nothing proves nothing
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_((torch.randn(p.shape, generator=g) * LORA_B_STD).to(p.dtype))
                n_lora += 1
    result["lora"] = dict(LORA, lora_B_std=LORA_B_STD, lora_B_tensors=n_lora,
                          lora_params=sum(p.numel() for n, p in model.named_parameters() if "lora_" in n),
                          params=sum(p.numel() for p in model.parameters()))
    twin = copy.deepcopy(model)
    inputs = cfg.FAMILIES["flux"].inputs(model, 0)
    result["model_ready_s"] = round(time.monotonic() - T0, 2)

    def run(m, extra):
        with torch.no_grad():
            out = m(**{**inputs, **extra}, return_dict=False)[0]
        sync()
        return out

    # How much the LoRA changes the output (twin, eager): a package of another state would show.
    with_lora = run(twin, {}).float().cpu()
    twin.disable_lora()
    without = run(twin, {}).float().cpu()
    twin.enable_lora()
    result["lora_effect_rel"] = rel_err(with_lora, without)
    result["scale_half_effect_rel"] = rel_err(run(twin, {"joint_attention_kwargs": {"scale": 0.5}}).float().cpu(),
                                              with_lora)
    log("LoRA changes the output by", result["lora_effect_rel"], "; scale 0.5 vs 1:", result["scale_half_effect_rel"])

    kt, blocks = kiln_compile(result, model)
    result["blocks"] = [type(b).__name__ for b in blocks]

    steps = [
        ("LoRA at scale 1", lambda m: None, {}),
        ("per-call scale 0.5 (joint_attention_kwargs)", lambda m: None, {"joint_attention_kwargs": {"scale": 0.5}}),
        ("fuse_lora()", lambda m: m.fuse_lora(), {}),
        ("unfuse_lora()", lambda m: m.unfuse_lora(), {}),
    ]
    digests_before = set()
    previous = None
    for name, change, extra in steps:
        if deadline_left() < 10:  # a state that needs builds then records its wait's timeout
            result["steps"].append({"state": name, "skipped": f"{deadline_left():.0f} s left of the call"})
            save(result, out_path)
            continue
        step = {"state": name, "calls": [], "started_s": round(time.monotonic() - T0, 2)}
        result["steps"].append(step)
        try:
            change(model)
            change(twin)
            for i in (1, 2):
                set_wait_limit()
                want = run(twin, extra)
                got, dt, compiled, eager = counted_call(kt, model, lambda: run(model, extra))
                err = rel_err(got, want)
                step["calls"].append({"call": i, "rel_err": err, "seconds": round(dt, 3),
                                      "compiled_block_calls": compiled, "eager_block_calls": eager,
                                      "finite": bool(torch.isfinite(got).all())})
                log(name, f"call {i}: err {err:.3e}, compiled {compiled}, eager {eager}, {dt:.1f} s")
                if i == 1:
                    eager_now = want.float().cpu()
                    if previous is not None:
                        step["eager_change_vs_previous_state_rel"] = rel_err(eager_now, previous)
                    previous = eager_now
            status = kt.status(model)
            digests = {e["key_digest"] for e in status if e.get("key_digest")}
            mine = kilnd_builds(digests)
            step["status"] = status
            step["new_key_digests"] = sorted(digests - digests_before)
            step["builds_for_model_total"] = len(mine)
            step["builds_done_for_model_total"] = sum(1 for b in mine if b.get("state") == "done")
            step["builds_for_new_keys"] = [b for b in mine if b.get("key_digest") in digests - digests_before]
            step["kilnd_builds_all_total"] = len(kilnd_builds())
            step["entries_total"] = len(status)  # one per block fingerprint (and device)
            step["fingerprints_per_class"] = {r: len({e["fingerprint"] for e in status if e["region"] == r})
                                              for r in sorted({e["region"] for e in status})}
            step["sources_total"] = sources_count()
            digests_before |= digests
        except BaseException as ex:
            step["error"] = f"{type(ex).__name__}: {ex}"
            step["traceback"] = traceback.format_exc()[-4000:]
            log("step failed:", name, step["error"])
        step["finished_s"] = round(time.monotonic() - T0, 2)
        save(result, out_path)
    result["status_final"] = kt.status(model)
    result["entries"] = entries_with_devices(model)
    result["builds_for_model"] = kilnd_builds({e["key_digest"] for e in result["status_final"] if e.get("key_digest")})
    result["failed_build_logs"] = failed_logs(result["status_final"])
    kt.restore(model)


def sources_count():
    """Sources kilnd holds (every registration of a new model hash, from either part)."""
    try:
        import kiln

        with kiln.Client() as c:
            return len(c.sources.list())
    except Exception as ex:
        return f"{type(ex).__name__}: {ex}"


def failed_logs(status):
    logs = {}
    try:
        import kiln

        with kiln.Client() as c:
            for e in status:
                if e["state"] == "failed" and e.get("key_digest"):
                    rec = c.logs(e["key_digest"])
                    if rec:
                        logs[e["key_digest"]] = {k: (v[-5000:] if isinstance(v, str) else v) for k, v in rec.items()}
    except Exception as ex:
        logs["error"] = f"{type(ex).__name__}: {ex}"
    return logs


# ---------------------------------------------------------------------------------------
# (b) one model over two devices


def _to(obj, dev):
    import torch

    if isinstance(obj, torch.Tensor):
        return obj if obj.device == dev else obj.to(dev)
    if isinstance(obj, tuple):
        return tuple(_to(x, dev) for x in obj)
    if isinstance(obj, list):
        return [_to(x, dev) for x in obj]
    if isinstance(obj, dict):
        return {k: _to(v, dev) for k, v in obj.items()}
    return obj


def _align_inputs(module, args, kwargs):
    """Forward pre-hook: the module's tensor inputs onto its own device (accelerate's
    AlignDevicesHook does this under device_map)."""
    dev = next(module.parameters()).device
    return _to(args, dev), _to(kwargs, dev)


def split_over(model, devices):
    """The embedders and double block 0 on devices[0]; double blocks 1.., the single blocks,
    norm_out and proj_out on devices[1] (a split by memory, as accelerate's "balanced" map
    makes it: a double block holds ~2.4x a single block's parameters); a moving pre-hook on
    every block and on norm_out/proj_out. Returns {module: device} and parameters per device."""
    import torch

    d0, d1 = (torch.device(d) for d in devices)
    placement = {}
    second = list(model.transformer_blocks)[1:] + list(model.single_transformer_blocks) + [model.norm_out,
                                                                                             model.proj_out]
    second_ids = {id(m) for m in second}
    for name, m in model.named_children():
        if name in ("transformer_blocks", "single_transformer_blocks"):
            for i, b in enumerate(m):
                dev = d1 if id(b) in second_ids else d0
                b.to(dev)
                placement[f"{name}.{i}"] = str(dev)
        else:
            dev = d1 if id(m) in second_ids else d0
            m.to(dev)
            placement[name] = str(dev)
    hooked = list(model.transformer_blocks) + list(model.single_transformer_blocks) + [model.norm_out, model.proj_out]
    for m in hooked:
        m.register_forward_pre_hook(_align_inputs, with_kwargs=True)
    per_device = {}
    for p in model.parameters():
        per_device[str(p.device)] = per_device.get(str(p.device), 0) + p.numel()
    return placement, per_device


def part_devices(work, out_path):
    run_part("devices", _part_devices, out_path, calls=[])


def _part_devices(result, out_path):
    import torch

    import families_gpu_configs as cfg

    environment(result, "devices")
    if cfg.TINY:
        devices = ("cpu", "cpu")
    else:
        if torch.cuda.device_count() < 2:
            raise RuntimeError(f"part (b) needs two GPUs; this process sees {torch.cuda.device_count()}")
        devices = ("cuda:0", "cuda:1")
    result["devices"] = list(devices)
    model = build_flux(0, devices[0], "devices")
    result["params"] = sum(p.numel() for p in model.parameters())
    inputs = cfg.FAMILIES["flux"].inputs(model, 0)  # on the first device, as a pipeline makes them

    def run():
        with torch.no_grad():
            out = model(**inputs, return_dict=False)[0]
        sync()
        return out

    ref_single = run().float().cpu()
    result["placement"], result["params_per_device"] = split_over(model, devices)
    out = run()
    result["output_device"] = str(out.device)
    ref = out.float().cpu()
    result["split_eager_vs_single_device_eager_rel"] = rel_err(ref, ref_single)
    result["reference_finite"] = bool(torch.isfinite(ref).all())
    log("split eager vs one-device eager:", result["split_eager_vs_single_device_eager_rel"])
    result["model_ready_s"] = round(time.monotonic() - T0, 2)
    save(result, out_path)

    kt, blocks = kiln_compile(result, model)
    result["blocks"] = [(type(b).__name__, str(next(b.parameters()).device)) for b in blocks]
    for i in (1, 2, 3):
        if deadline_left() < 20:
            result["calls"].append({"call": i, "skipped": f"{deadline_left():.0f} s left of the call"})
            continue
        set_wait_limit()
        got, dt, compiled, eager = counted_call(kt, model, run)
        row = {"call": i, "rel_err_vs_split_eager": rel_err(got, ref), "rel_err_vs_one_device_eager":
               rel_err(got, ref_single), "seconds": round(dt, 3), "compiled_block_calls": compiled,
               "eager_block_calls": eager, "output_device": str(got.device),
               "finite": bool(torch.isfinite(got).all())}
        result["calls"].append(row)
        log(f"call {i}:", row)
        save(result, out_path)
    result["status"] = kt.status(model)
    result["entries"] = entries_with_devices(model)
    result["all_hit"] = bool(result["status"]) and all(e["state"] == "hit" for e in result["status"])
    digests = {e["key_digest"] for e in result["status"] if e.get("key_digest")}
    result["builds_for_model"] = kilnd_builds(digests)
    result["failed_build_logs"] = failed_logs(result["status"])
    kt.restore(model)


# ---------------------------------------------------------------------------------------
# the report


def _fmt(x, spec=".2e"):
    return "—" if x is None else format(x, spec)


def _ok(errs):
    errs = [e for e in errs if e is not None]
    return bool(errs) and all(e <= BF16_TOLERANCE for e in errs)


def _entries_cell(s):
    if "entries_total" not in s:
        return ""
    short = {"FluxTransformerBlock": "double", "FluxSingleTransformerBlock": "single"}
    per = ", ".join(f"{short.get(k, k)} {v}" for k, v in s.get("fingerprints_per_class", {}).items())
    return f"{s['entries_total']} ({per})"


def _header(w, columns):
    """A Markdown table's header row and separator."""
    w("| " + " | ".join(columns) + " |")
    w("|" + "---|" * len(columns))


def _table(w, title, columns, rows):
    """A titled Markdown table of the rows' cells; nothing when there are no rows."""
    if not rows:
        return
    w(title)
    w("")
    _header(w, columns)
    for cells in rows:
        w("| " + " | ".join(cells) + " |")
    w("")


def report(folder, out_md, notes=None):
    def load(name):
        p = os.path.join(folder, name)
        try:
            return json.load(open(p))
        except Exception as ex:
            return {"error": f"{name} not read: {type(ex).__name__}: {ex}"}

    a, b = load("lora.json"), load("devices.json")
    env = a if a.get("torch") else b
    lines = []
    w = lines.append
    w("# A hit is never wrong: diffusers' LoRA API and a model over two GPUs (GPU)")
    w("")
    w(f"{os.environ.get('KILN_LORA_DATE', '2026-11-28')}, GPUs as torch reports them: "
      f"{', '.join(env.get('gpus') or ['?'])}; torch {env.get('torch')}, diffusers {env.get('diffusers')}, "
      f"peft {a.get('peft')}, Python {env.get('python')}. kiln.torch and kilnd from {env.get('kiln_tree')}; "
      "kilnd with the real worker (`ops/workers/kiln_worker`), `builds_per_gpu = 4`, an empty store. "
      "`tests/gpu/lora_devices_run.sh OUT` (`tests/gpu/lora_devices.py`), one device call.")
    w("")
    w(f"Model: diffusers `FluxTransformer2DModel` at {env.get('checkpoint')}'s widths, reduced depth (part (a): "
      f"{a.get('depth')}, part (b): {b.get('depth')}; real: {env.get('real_depth')}), random bf16 weights (`torch.manual_seed(0)`), input {env.get('size')} "
      "(tests/gpu/families_gpu_configs.py). Error = relative L2 of the output against the eager reference named; "
      f"tolerance {BF16_TOLERANCE} (bf16, the worker's check).")
    w("")
    w("## (a) LoRA through diffusers' API (cuda:0)")
    w("")
    if a.get("lora"):
        lo = a["lora"]
        w(f"`model.add_adapter(peft.LoraConfig(r={lo['r']}, lora_alpha={lo['lora_alpha']}, target_modules="
          f"{lo['target_modules']}))`, {lo['lora_B_tensors']} lora_B tensors drawn from N(0, {lo['lora_B_std']}²) "
          f"({lo['lora_params'] / 1e6:.1f} M LoRA parameters of {lo['params'] / 1e6:.0f} M); twin = `copy.deepcopy` "
          "before `kiln.torch.compile_repeated_blocks(model, on_miss=\"wait\")`. Each state: twin then model, twice, "
          "same inputs. The LoRA moves the eager output by "
          f"{_fmt(a.get('lora_effect_rel'))} (relative, vs adapters disabled); scale 0.5 vs 1: "
          f"{_fmt(a.get('scale_half_effect_rel'))}.")
        w("")
    _header(w, ["state", "call", "error vs twin", "block calls compiled / eager", "s", "new keys",
                "builds for the model's keys (done), cumulative",
                "kiln entries, cumulative (fingerprints per class)", "eager output vs previous state"])
    all_a = []
    for s in a.get("steps", []):
        if s.get("skipped"):
            w(f"| {s['state']} | — | skipped: {s['skipped']} | | | | | | |")
            continue
        for c in s.get("calls", []):
            all_a.append(c["rel_err"])
            first = c["call"] == 1
            w(f"| {s['state'] if first else ''} | {c['call']} | {_fmt(c['rel_err'])} | "
              f"{c['compiled_block_calls']} / {c['eager_block_calls']} | {c['seconds']:.2f} | "
              f"{len(s.get('new_key_digests', [])) if first else ''} | "
              f"{(str(s.get('builds_for_model_total')) + ' (' + str(s.get('builds_done_for_model_total')) + ')') if first and 'builds_for_model_total' in s else ''} | "
              f"{_entries_cell(s) if first else ''} | "
              f"{_fmt(s.get('eager_change_vs_previous_state_rel')) if first else ''} |")
        if s.get("error"):
            w(f"| {s['state']} | error | `{s['error'][:300]}` | | | | | | |")
    w("")
    if a.get("error"):
        w(f"Part (a) failed: `{a['error'][:1500]}`")
        w("")
    def build_row(bb):
        q, st, fi = bb.get("queued_at") or 0, bb.get("started_at") or 0, bb.get("finished_at") or 0
        return [str(bb.get("key_digest"))[:16], f"{bb.get('state')}", f"{(st - q) if st and q else '—'}",
                f"{(fi - st) if fi and st else '—'}", str(bb.get("error") or "")[:200]]

    _table(w, "kilnd's builds for part (a)'s keys (BUILD_STATUS):",
           ["key digest", "state", "queued → started s", "built s", "error"],
           [build_row(bb) for bb in sorted(a.get("builds_for_model") or [], key=lambda x: x.get("queued_at") or 0)])
    _table(w, "kiln.torch.status() at the end of part (a):",
           ["block class", "state", "calls compiled / eager", "key digest", "detail"],
           [[f"{e['region']}", f"{e['state']}", f"{e['calls']['compiled']} / {e['calls']['eager']}",
             str(e.get("key_digest"))[:16], str(e.get("detail") or "")[:200]] for e in a.get("status_final") or []])
    verdict_a = _ok(all_a) and len(all_a) == 8
    skipped = [s["state"] for s in a.get("steps", []) if s.get("skipped")]
    w(f"**Verdict (a):** {'every' if _ok(all_a) else 'NOT every'} kiln call made within {BF16_TOLERANCE} of the "
      f"eager twin ({len(all_a)} of 8 calls made; largest error {_fmt(max(all_a) if all_a else None)})"
      + (f"; not run: {', '.join(skipped)}." if skipped else "."))
    w("")
    w("## (b) One FLUX over two GPUs")
    w("")
    if b.get("placement"):
        w(f"Placement: {', '.join(f'{k} → {v}' for k, v in b['placement'].items())}; parameters per device: "
          f"{', '.join(f'{k} {v / 1e6:.0f} M' for k, v in b['params_per_device'].items())}. A forward pre-hook on "
          "every block and on norm_out/proj_out moves its tensor inputs to its device (accelerate's "
          "AlignDevicesHook does the same). Split eager vs one-device eager: "
          f"{_fmt(b.get('split_eager_vs_single_device_eager_rel'))}; output on {b.get('output_device')}.")
        w("")
    _header(w, ["call", "error vs split eager", "error vs one-device eager", "block calls compiled / eager", "s"])
    all_b = []
    for c in b.get("calls", []):
        if c.get("skipped"):
            w(f"| {c['call']} | skipped: {c['skipped']} | | | |")
            continue
        all_b.append(c["rel_err_vs_split_eager"])
        w(f"| {c['call']} | {_fmt(c['rel_err_vs_split_eager'])} | {_fmt(c['rel_err_vs_one_device_eager'])} | "
          f"{c['compiled_block_calls']} / {c['eager_block_calls']} | {c['seconds']:.2f} |")
    w("")
    if b.get("error"):
        w(f"Part (b) failed: `{b['error'][:1500]}`")
        w("")
    if b.get("entries"):
        _table(w, "kiln.torch's entries (status() with the runtime's device index per entry):",
               ["block class", "device index", "state", "calls compiled / eager", "key digest", "package loaded",
                "detail"],
               [[f"{e['region']}", f"{e['device_index']}", f"{e['state']}",
                 f"{e['calls']['compiled']} / {e['calls']['eager']}", str(e.get("key_digest"))[:16],
                 f"{e.get('package_loaded')}",
                 f"{str(e.get('detail') or '')[:120]}{'…' if len(str(e.get('detail') or '')) > 120 else ''}"]
                for e in b["entries"]])
        bb = b.get("builds_for_model") or []
        w(f"kilnd builds for these keys: {len(bb)} ({', '.join(str(x.get('state')) for x in bb)}).")
        w("")
    hit_dev = sorted({e["device_index"] for e in b.get("entries", []) if e["state"] == "hit"})
    verdict_b = _ok(all_b) and b.get("all_hit") and len(all_b) >= 2
    not_hit = [f"{e['region']} on device {e['device_index']}: {e['state']}" for e in b.get("entries", [])
               if e["state"] != "hit"]
    w(f"**Verdict (b):** {'every' if _ok(all_b) else 'NOT every'} kiln call within {BF16_TOLERANCE} of the split "
      f"model's eager output ({len(all_b)} calls; largest {_fmt(max(all_b) if all_b else None)}); all entries hit: "
      f"{b.get('all_hit')}{' (' + '; '.join(not_hit) + ')' if not_hit else ''}; devices with hit entries: "
      f"{hit_dev}.")
    w("")
    if notes:
        w(open(notes).read().rstrip())
        w("")
    with open(out_md, "w") as f:
        f.write("\n".join(lines))
    return verdict_a, verdict_b


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "lora":
        part_lora(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 4 and sys.argv[1] == "devices":
        part_devices(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 4 and sys.argv[1] == "report":
        print(report(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None))
    else:
        sys.exit(__doc__)
