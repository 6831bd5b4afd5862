"""What a key says about a source, checked against the exported program, and the numeric
check every build passes before it is handed over: random weights, random inputs of the
key's signature, compiled against eager within the dtype's tolerance."""
import json
import os

import call_structure
import model_hash as model_hashing
from report import WorkerError, log
from spelling import dtype_name
from weight_free import strip_weights  # noqa: F401  (signature.strip_weights, as before)

# Relative L2 error allowed between compiled and eager outputs, by the key's dtype.
TOLERANCE = {"bfloat16": 2e-2, "float16": 5e-3, "float32": 1e-3, "float64": 1e-6}
_UNBOUNDED = 2**63 - 1


def load_source(path, device="cuda", model_hash=None):
    """The exported program of a source. A weight-free source (schema/sources.md) holds
    its parameters and persistent buffers as meta tensors; with a device they are given
    values of the recorded shapes and dtypes, enough to compile and check the block.
    With `model_hash`, the source must hash to it, computed on the program as stored
    (before it is moved to the device, which rewrites device arguments)."""
    import torch

    try:
        ep = torch.export.load(path)
    except Exception as e:  # noqa: BLE001 - report what torch said about the file
        raise WorkerError(f"source {path} is not a loadable torch.export archive: {type(e).__name__}: {e}")
    if model_hash is not None:
        check_model_hash(ep, model_hash)
    if device is not None:
        materialize_weights(ep)
        tensors = list(state_tensors(ep).values())
        kind = torch.device(device).type
        if any(t.device.type != kind for t in tensors):
            from torch.export.passes import move_to_device_pass
            # An indexed device: the pass rewrites device arguments to exactly this text, and
            # torch's own metadata asserts then compare "cuda" with the tensors' "cuda:0" and
            # fail (seen on the GPU machine with a plain tensor attribute moved by .to()).
            ep = move_to_device_pass(ep, "cuda:0" if device == "cuda" else device)
        materialize_example_inputs(ep, device)
    return ep


def materialize_example_inputs(ep, device="cuda"):
    """Gives a source without example inputs (a weight-free source drops them: they are the
    user's activations) zeros of its inputs' recorded shapes, strides and dtypes, and its
    constant inputs' values: AOTInductor refuses to compile a program without them ("
    exported_program.example_inputs is required", seen on the H100). In place."""
    import torch
    from torch.utils import _pytree as pytree

    if getattr(ep, "example_inputs", None) is not None:
        return
    values = []
    for kind, v in _user_leaves(ep):
        if kind == "const":
            values.append(v)
            continue
        # A GPU block's CPU inputs stay on the CPU; a CPU build puts every input there.
        dev = device if v.device.type == "cuda" or device == "cpu" else v.device.type
        t = torch.empty_strided([int(d) for d in v.shape], [int(d) for d in v.stride()], dtype=v.dtype, device=dev)
        values.append(t.zero_())
    ep.example_inputs = pytree.tree_unflatten(values, ep.call_spec.in_spec)


def is_weight_free(ep):
    return any(getattr(t, "is_meta", False) for t in ep.state_dict.values())


def _initial_value(name, t, g):
    """A value of t's shape and dtype in the range a trained weight has: 1-D norm weights
    near 1, biases near 0, matrices scaled by 1/sqrt(fan_in)."""
    import torch

    if not t.dtype.is_floating_point:
        return torch.zeros(t.shape, dtype=t.dtype)
    if t.dim() <= 1:
        base = 1.0 if name.endswith("weight") else 0.0
        return (base + 0.02 * torch.randn(t.shape, generator=g)).to(t.dtype)
    fan_in = max(1, t.shape[-1])
    return (torch.randn(t.shape, generator=g) / fan_in ** 0.5).to(t.dtype)


def materialize_weights(ep, seed=3):
    """Replaces the meta tensors of a weight-free source with values (in place)."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    sd = ep.state_dict
    for name in sorted(sd):
        t = sd[name]
        if not getattr(t, "is_meta", False):
            continue
        v = _initial_value(name, t, g)
        sd[name] = torch.nn.Parameter(v, requires_grad=t.requires_grad) if isinstance(t, torch.nn.Parameter) else v


def state_tensors(ep):
    """Every weight-like tensor the program takes: parameters, buffers, lifted constants."""
    import torch

    out = dict(ep.state_dict)
    out.update({k: v for k, v in ep.constants.items() if isinstance(v, torch.Tensor)})
    return out


def _user_leaves(ep):
    """The program's user inputs in torch.export's flat order: ("tensor", fake value) or
    ("const", value) for an input torch.export specialized to a constant."""
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    leaves = []
    for spec in ep.graph_signature.input_specs:
        if spec.kind.name != "USER_INPUT":
            continue
        arg = spec.arg
        if type(arg).__name__ == "ConstantArgument":
            leaves.append(("const", arg.value))
            continue
        name = getattr(arg, "name", None)
        val = placeholders[name].meta.get("val") if name in placeholders else None
        if val is None or not hasattr(val, "shape"):
            raise WorkerError(f"source input {name!r} is a {type(arg).__name__} ({val!r}); kiln keys describe "
                              "tensors and constants (a symbolic int or float input is not supported)")
        leaves.append(("tensor", val))
    return leaves


def call_signature(ep):
    """(inputs, call, order): the key's `inputs` and `call` (schema/key.md) for the call the
    block was exported with, and order[k] = the flat leaf index of the k-th tensor leaf."""
    leaves = _user_leaves(ep)
    tree = call_structure.tree_from_spec(ep.call_spec.in_spec, leaves)
    call, order = call_structure.canonical(tree)
    return [_input_json(ep, leaves[i][1]) for i in order], call, order


def key_inputs(ep):
    """The source's input signature in the key's JSON form (schema/key.md), canonical order."""
    return call_signature(ep)[0]


def _input_json(ep, val):
    import torch

    shape = []
    for d in val.shape:
        if isinstance(d, int):
            shape.append(d)
            continue
        r = ep.range_constraints.get(d.node.expr)
        lo = int(r.lower) if r is not None else 0
        hi = int(r.upper) if r is not None and r.upper.is_finite else _UNBOUNDED
        shape.append({"min": lo, "max": hi})
    layout = "strided" if val.layout == torch.strided else str(val.layout).replace("torch.", "")
    return {"shape": shape, "dtype": dtype_name(val.dtype), "layout": layout}


def weight_dtype(ep):
    """The key's `dtype` of this program by the one rule (key_dtype.py, which is kiln.torch's
    own _dtype_rule.py): counted over the block's parameters and buffers (the state_dict
    and the non-persistent buffers, as the block's module holds them), else its inputs."""
    import torch
    from key_dtype import key_dtype

    tensors = dict(ep.state_dict)
    for name in getattr(ep.graph_signature, "non_persistent_buffers", ()) or ():
        t = ep.constants.get(name)
        if isinstance(t, torch.Tensor):
            tensors[name] = t
    counts = {}
    for t in tensors.values():
        if t.is_floating_point():
            counts[dtype_name(t.dtype)] = counts.get(dtype_name(t.dtype), 0) + t.numel()
    inputs = [i["dtype"] for i in key_inputs(ep) if i["dtype"].startswith(("float", "bfloat"))]
    return key_dtype(counts, inputs)


def _norm_dim(d):
    if isinstance(d, dict):
        return (int(d["min"]), int(d["max"]))
    return (int(d), int(d))


def check_key(ep, key):
    """Refuses a key that does not describe the source: its call structure, then its inputs."""
    have, call, _ = call_signature(ep)
    want_call = key.get("call") or call_structure.positional(len(key.get("inputs") or []))
    if want_call != call:
        raise WorkerError(f"key.call is {json.dumps(want_call, sort_keys=True)} but the source was exported with the "
                          f"call {json.dumps(call, sort_keys=True)}")
    want = key.get("inputs") or []
    if len(want) != len(have):
        raise WorkerError(f"key.inputs has {len(want)} inputs but the source takes {len(have)}: {json.dumps(have)}")
    for i, (w, h) in enumerate(zip(want, have)):
        if len(w.get("shape", [])) != len(h["shape"]):
            raise WorkerError(f"key.inputs[{i}].shape has rank {len(w.get('shape', []))}; the source's is {h['shape']}")
        for j, (wd, hd) in enumerate(zip(w["shape"], h["shape"])):
            if _norm_dim(wd) != _norm_dim(hd):
                raise WorkerError(f"key.inputs[{i}].shape[{j}] is {wd} but the source was exported with {hd}")
        if w.get("dtype") != h["dtype"]:
            raise WorkerError(f"key.inputs[{i}].dtype is {w.get('dtype')} but the source's is {h['dtype']}")
        if w.get("layout", "strided") != h["layout"]:
            raise WorkerError(f"key.inputs[{i}].layout is {w.get('layout')} but the source's is {h['layout']}")
    wd = weight_dtype(ep)
    if key.get("dtype") != wd:
        raise WorkerError(f"key.dtype is {key.get('dtype')} but the source's is {wd} (schema/key.md, \"dtype\": "
                          "the dtype holding most parameter and buffer elements)")


def check_node(key):
    """Refuses to build an artifact that would be filed under another GPU or toolchain."""
    import toolchain

    # Without the CPU ISA probe: torch finds it by running compilers (~25 s); the daemon
    # learned it once at start and put it in the key.
    desc = toolchain.describe(with_cpu_isa=False)
    have = dict(desc["toolchain"])
    if is_cpu_key(key):  # a CPU block: built and checked on this host's CPU (schema/key.md)
        have["gpu_arch"] = have["gpu_name"] = "cpu"
    elif not desc["gpus"]:
        raise WorkerError("this worker sees no CUDA GPU (CUDA_VISIBLE_DEVICES="
                          f"{os.environ.get('CUDA_VISIBLE_DEVICES')!r}); it builds only keys of gpu_arch \"cpu\"")
    else:
        have["gpu_arch"] = desc["gpus"][0]["arch"]
        have["gpu_name"] = desc["gpus"][0]["name"]
    for field, value in have.items():
        if value is not None and key.get(field) and key[field] != value:
            raise WorkerError(f"key.{field} is {key[field]!r} but this node has {value!r}")


def is_cpu_key(key):
    """A key for a CPU-resident block (gpu_arch "cpu", schema/key.md): built for the CPU."""
    return key.get("gpu_arch") == "cpu"


def build_device(key):
    """Where the key's block runs, so where it is built and checked: "cpu" or "cuda"."""
    return "cpu" if is_cpu_key(key) else "cuda"


def compile_options(key):
    opts = key.get("compile_options") or {}
    if isinstance(opts, str):
        opts = json.loads(opts or "{}")
    unknown = set(opts) - {"mode", "inductor", "dynamic", "numerics"}
    if unknown:
        raise WorkerError(f"key.compile_options has unknown fields {sorted(unknown)} (known: mode, inductor, dynamic, numerics)")
    apply_numerics(opts.get("numerics") or {})
    return opts


def apply_numerics(numerics):
    """Sets the numerics flags the key names (schema/key.md; absent = torch's defaults), so
    the build and its check run with the consumer's flags."""
    import torch

    torch.use_deterministic_algorithms(bool(numerics.get("deterministic", False)))
    torch.backends.cudnn.allow_tf32 = bool(numerics.get("cudnn_allow_tf32", True))
    m = torch.backends.cuda.matmul
    m.allow_bf16_reduced_precision_reduction = bool(numerics.get("bf16_reduced_precision_reduction", True))
    m.allow_fp16_reduced_precision_reduction = bool(numerics.get("fp16_reduced_precision_reduction", True))
    # The flags kiln.torch keys only when a process moved them from torch's defaults.
    if "fp16_accumulation" in numerics:
        m.allow_fp16_accumulation = bool(numerics["fp16_accumulation"])
    torch.backends.cudnn.deterministic = bool(numerics.get("cudnn_deterministic", False))
    cuda = torch.backends.cuda
    for name, enable in (("sdp_flash", cuda.enable_flash_sdp), ("sdp_mem_efficient", cuda.enable_mem_efficient_sdp),
                         ("sdp_math", cuda.enable_math_sdp), ("sdp_cudnn", getattr(cuda, "enable_cudnn_sdp", None))):
        if enable is not None:
            enable(bool(numerics.get(name, True)))
    precision = numerics.get("fp32_precision")
    if precision:  # torch >= 2.9's API; never mixed with the legacy setter below (torch refuses to read a mix)
        targets = {"matmul": cuda.matmul, "cudnn_conv": torch.backends.cudnn.conv,
                   "cudnn_rnn": torch.backends.cudnn.rnn, "mkldnn_matmul": torch.backends.mkldnn.matmul}
        for name, value in precision.items():
            if name not in targets:
                raise WorkerError(f"key.compile_options.numerics.fp32_precision.{name} is not a flag this worker knows")
            targets[name].fp32_precision = value
    else:
        torch.set_float32_matmul_precision(numerics.get("float32_matmul_precision", "highest"))


def inductor_configs(opts):
    """Inductor config dict for the key's mode and explicit inductor options."""
    cfg = {}
    mode = opts.get("mode")
    if mode and mode != "default":
        from torch._inductor import list_mode_options
        cfg.update(list_mode_options(mode))
    cfg.update(opts.get("inductor") or {})
    return cfg


def input_strides(ep, order):
    """The strides the program's tensor inputs were exported with, in the key's input order
    (`order` as call_signature gives it; None for an input with a symbolic stride). A package's kernels index its inputs with
    these strides and AOTInductor checks none at run time: a check that fed contiguous
    tensors where diffusers passes a transposed view (HunyuanVideo's hidden states) read
    them wrongly and refused a correct package."""
    leaves = _user_leaves(ep)
    out = []
    for i in order:
        try:
            out.append([int(x) for x in leaves[i][1].stride()])
        except (TypeError, ValueError):
            out.append(None)
    return out


def random_inputs(spec, device="cuda", seed=1, strides=None):
    """Random tensors of the key's inputs; with `strides` (input_strides), laid out as the
    program was exported."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    strides = strides or [None] * len(spec)
    out = []
    for s, stride in zip(spec, strides):
        shape = [lo if hi == _UNBOUNDED else hi for lo, hi in map(_norm_dim, s["shape"])]
        dt = getattr(torch, s["dtype"])
        if dt.is_floating_point:
            t = torch.randn(shape, generator=g).to(dt)
        elif dt == torch.bool:
            t = torch.rand(shape, generator=g) > 0.5
        else:
            t = torch.randint(0, 2, shape, generator=g).to(dt)
        if stride is not None and list(stride) != list(t.stride()):
            out.append(torch.empty_strided(shape, stride, dtype=dt, device=device).copy_(t))
            continue
        out.append(t.to(device))
    return out


def perturbed_weights(ep, device="cuda", seed=2):
    """Random weights of the source's names, shapes and dtypes, at the source's scale."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    out = {}
    for name, t in sorted(state_tensors(ep).items()):
        if getattr(t, "is_meta", False):
            out[name] = _initial_value(name, t, g).to(device).contiguous()
        elif t.is_floating_point():
            scale = float(t.detach().float().std()) if t.numel() > 1 else 1.0
            noise = torch.randn(t.shape, generator=g) * (0.5 * scale if scale > 0 else 0.02)
            out[name] = (t.detach().float().cpu() + noise).to(t.dtype).to(device).contiguous()
        else:
            out[name] = t.detach().to(device).contiguous()
    return out


def eager_outputs(ep, weights, inputs, call):
    """The eager block's outputs, called exactly as it was exported (`call`, schema/key.md)."""
    import torch

    mod = ep.module()
    # Lifted constants (a block's plain tensor attributes) too: the package is given the
    # perturbed ones, so eager must compute with them, not with the export's own values.
    own = {**dict(mod.named_parameters()), **dict(mod.named_buffers()), **ep.constants}
    args, kwargs = call_structure.build_arguments(call, inputs)
    with torch.no_grad():
        out = torch.func.functional_call(mod, {k: v for k, v in weights.items() if k in own}, tuple(args), kwargs)
    return flatten(out)


def key_call(key):
    return key.get("call") or call_structure.positional(len(key.get("inputs") or []))


def check_model_hash(ep, want):
    """A source is never trusted to match the hash it was registered under: recomputed here."""
    have = model_hashing.model_hash(ep)
    if have != want:
        raise WorkerError(f"the source registered under model hash {want} hashes to {have} on this "
                          "node; refusing to build from it (register the block's own export with kilnctl source add)")


def flatten(out):
    import torch.utils._pytree as pytree

    return [t for t in pytree.tree_leaves(out)]


def compare(outs, refs, dtype):
    import torch

    tol = TOLERANCE.get(dtype, 2e-2)
    if len(outs) != len(refs):
        raise WorkerError(f"compiled block returned {len(outs)} outputs, eager {len(refs)}")
    worst = {"rel_err": 0.0, "max_abs_err": 0.0, "tolerance": tol, "outputs": len(outs)}
    for i, (o, r) in enumerate(zip(outs, refs)):
        # A constant output (SD3's last JointTransformerBlock returns (None, hidden_states)):
        # the package returns it as it is, and it must be eager's.
        if not isinstance(o, torch.Tensor) or not isinstance(r, torch.Tensor):
            if isinstance(o, torch.Tensor) or isinstance(r, torch.Tensor) or o != r:
                raise WorkerError(f"output {i}: compiled {o!r:.40} but eager {r!r:.40}")
            continue
        if tuple(o.shape) != tuple(r.shape):
            raise WorkerError(f"output {i}: compiled shape {tuple(o.shape)} != eager {tuple(r.shape)}")
        o, r = o.float(), r.float()
        if not torch.isfinite(o).all():
            raise WorkerError(f"output {i}: compiled block produced non-finite values")
        rel = float((o - r).norm() / r.norm().clamp_min(1e-12))
        worst["rel_err"] = max(worst["rel_err"], rel)
        worst["max_abs_err"] = max(worst["max_abs_err"], float((o - r).abs().max()))
    worst["passed"] = worst["rel_err"] <= tol
    log(f"check: rel_err {worst['rel_err']:.3e} (tolerance {tol:.1e}), max_abs_err {worst['max_abs_err']:.3e}")
    if not worst["passed"]:
        raise WorkerError(f"compiled block differs from eager: relative error {worst['rel_err']:.3e} "
                          f"> {tol:.1e} allowed for {dtype}; not storing it")
    return worst


def file_digest(path):
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def folded_weights(ep, weights, fqns):
    """The block's weights the program uses that the package does not take as constants:
    AOTInductor folded them at compile time (BriaFibo2's `cross_attn_gate`, used only as
    tanh(cross_attn_gate), becomes one baked value). A weight-free package with such a
    weight computes with the builder's value of it, not the caller's, so it is refused.
    `weights` as package_constant_names returned it."""
    taken = {id(weights[f]) for f in fqns if f in weights}
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    used = set()
    for spec in ep.graph_signature.input_specs:
        # Parameters and buffers, which callers attach (their own values). A lifted
        # CONSTANT_TENSOR (a tensor literal of forward, a plain tensor attribute) keeps its
        # value in the source and the model hash covers that value (model_hash.py), so a
        # package that folds it is right for every caller of that hash (HunyuanVideo's
        # token refiner folds `lifted_tensor_0`).
        if spec.target is None or spec.kind.name not in ("PARAMETER", "BUFFER"):
            continue
        node = placeholders.get(getattr(spec.arg, "name", None))
        if node is not None and node.users:
            used.add(spec.target)
    return sorted(n for n in used if n in weights and id(weights[n]) not in taken)


def package_constant_names(ep, weights, fqns):
    """(weights under the names an AOTI package asks for, {package name: source name} of
    those renamed). A plain tensor attribute of the block is lifted by torch.export as a
    CONSTANT_TENSOR named by its attribute, but the package names the n-th one
    `_tensor_constant<n>`: map them in signature order. The renames go into the package
    (aoti.record_constant_names) so that a process loading it gives each its attribute."""
    missing = [f for f in fqns if f not in weights]
    if not missing:
        return weights, {}
    consts = [s.target for s in ep.graph_signature.input_specs if s.kind.name == "CONSTANT_TENSOR"]
    out, renamed = dict(weights), {}
    for f in missing:
        if f.startswith("_tensor_constant") and f[len("_tensor_constant"):].isdigit():
            n = int(f[len("_tensor_constant"):])
            if n < len(consts) and consts[n] in weights:
                out[f] = weights[consts[n]]
                renamed[f] = consts[n]
                log(f"aoti: package constant {f} is the source's constant {consts[n]}")
    return out, renamed
