"""On the GPU machine: a LoRA'd FLUX block (FLUX.1 widths, PEFT r=16 on to_q/to_k/to_v) on
cuda is fingerprinted without refusal, equally in a process that imported more, and cheaply
per call. Prints one JSON line. Through the device tool (carry .carry/wheels: diffusers,
peft), from the repository root:
    python3 -m pip install -q --no-index --no-deps --target /tmp/pylib .carry/wheels/*.whl
    PYTHONPATH=/tmp/pylib KILN_PY=$PWD/client/python python3 tests/gpu/fingerprint_lora_check.py
and again in a python that imported transformers, torch._inductor, triton, ... first (runpy)."""
import json, os, sys, time
sys.path.insert(0, os.environ["KILN_PY"])
import torch
from kiln.torch import _fingerprint, _state
from kiln.torch._signature import capture
DEV = "cuda" if torch.cuda.is_available() else "cpu"

def make():
    from diffusers.models.transformers.transformer_flux import FluxSingleTransformerBlock, FluxTransformerBlock
    from peft import LoraConfig, inject_adapter_in_model
    torch.manual_seed(0)
    out = []
    for cls in (FluxTransformerBlock, FluxSingleTransformerBlock):
        b = cls(dim=3072, num_attention_heads=24, attention_head_dim=128).to(DEV, torch.bfloat16)
        inject_adapter_in_model(LoraConfig(r=16, target_modules=["to_q", "to_k", "to_v"]), b)
        out.append(b)
    dev = torch.device(DEV)
    h, e, t = torch.zeros(1, 64, 3072, device=dev, dtype=torch.bfloat16), torch.zeros(1, 16, 3072, device=dev, dtype=torch.bfloat16), torch.zeros(1, 3072, device=dev, dtype=torch.bfloat16)
    sig = capture((), {"hidden_states": h, "encoder_hidden_states": e, "temb": t, "joint_attention_kwargs": None})
    return out, sig, dev

if __name__ == "__main__":
    blocks, sig, dev = make()
    res = {"sys_modules": len(sys.modules)}
    for b in blocks:
        t0 = time.perf_counter()
        try:
            res[type(b).__name__] = _fingerprint.fingerprint(b, sig, dev)
        except _fingerprint.Undescribable as ex:
            res[type(b).__name__] = "UNDESCRIBABLE " + str(ex)
        res[type(b).__name__ + "_s"] = round(time.perf_counter() - t0, 4)
    for i in range(3):
        t0 = time.perf_counter(); _state.process_token(); res[f"process_token_us_{i}"] = round((time.perf_counter() - t0) * 1e6)
    t0 = time.perf_counter()
    for _ in range(100):
        _state.structure(blocks[0])
    res["structure_us"] = round((time.perf_counter() - t0) * 1e4, 1)
    print(json.dumps(res))
