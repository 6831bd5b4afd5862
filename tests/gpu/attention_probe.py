"""Which attention kernel torch picks on this GPU, against the others it has (issue "Misses
that reach compiled speed ...": faster packages).

  python3 tests/gpu/attention_probe.py OUT_DIR

SDPA alone at the families' attention shapes (tests/gpu/families_gpu_configs.py, bf16):
each backend torch offers (flash = FlashAttention-2, efficient, cuDNN) and torch's own
choice with all of them enabled ("default"), median of CUDA-event timings, and each one's
error against the math backend in float32. If torch's choice is already the fastest, a
package variant with another attention kernel has nothing to win. Also lists what torch
has for plugging in other FlashAttention implementations (FA3). Writes
OUT_DIR/attention_probe.json and prints each row as it lands.
"""
import json
import os
import statistics
import sys
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION}
# (label, batch, heads, q tokens, kv tokens, head dim): the families' self- and cross-attention
SHAPES = [("flux/qwen-like joint 4608", 1, 24, 4608, 4608, 128), ("qwen joint 4224", 1, 24, 4224, 4224, 128),
          ("wan self 14040", 1, 12, 14040, 14040, 128), ("wan cross 14040x512", 1, 12, 14040, 512, 128)]


def timed(fn, warm=10, runs=40):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return statistics.median(out)


def rel(a, b):
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


def sdpa_rows():
    import torch.nn.functional as F
    rows = []
    for label, b, h, sq, sk, d in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(b, h, sq, d, device="cuda", generator=g, dtype=torch.bfloat16)
        k = torch.randn(b, h, sk, d, device="cuda", generator=g, dtype=torch.bfloat16)
        v = torch.randn(b, h, sk, d, device="cuda", generator=g, dtype=torch.bfloat16)
        with sdpa_kernel(SDPBackend.MATH):
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
        row = {"shape": label}
        for name, be in BACKENDS.items():
            try:
                with sdpa_kernel(be):
                    out = F.scaled_dot_product_attention(q, k, v)
                    ms = timed(lambda: F.scaled_dot_product_attention(q, k, v))
                row[name] = {"ms": round(ms, 3), "rel_err": rel(out, ref)}
            except Exception as ex:  # noqa: BLE001 - a backend refusing a shape is a result
                row[name] = {"error": str(ex)[:300]}
        with sdpa_kernel(list(BACKENDS.values()) + [SDPBackend.MATH]):
            row["default_ms"] = round(timed(lambda: F.scaled_dot_product_attention(q, k, v)), 3)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def _impls():
    """The FlashAttention implementations torch can switch SDPA's flash backend to (FA3 is
    one only where a package registered it), or why it cannot say."""
    listing = getattr(torch.nn.attention, "list_flash_attention_impls", None)
    try:
        return {"registered": list(listing()), "current": torch.nn.attention.current_flash_attention_impl()} \
            if listing else "this torch cannot switch implementations"
    except Exception as ex:  # noqa: BLE001 - reported as found
        return f"{type(ex).__name__}: {ex}"


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "cudnn": torch.backends.cudnn.version(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "flash_attention_impls": _impls()}
    print(json.dumps(result), flush=True)
    result["sdpa"] = sdpa_rows()
    with open(os.path.join(out_dir, "attention_probe.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
