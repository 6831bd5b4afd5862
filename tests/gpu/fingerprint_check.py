"""Which part of a diffusers FLUX block's fingerprint description changes with its first
call (tests/gpu/RESULTS-python.md: one single-stream instance fingerprinted apart from the
others on the first forward). Prints the description paths that differ before and after a
forward, for each block.

    PYTHONPATH=client/python:.carry/diffusers/src python3 tests/gpu/fingerprint_check.py
"""
import json

import torch
from diffusers import FluxTransformer2DModel

from kiln.torch import _fingerprint

captured = []
_orig = _fingerprint.canonical_json


def _capture(value):
    captured.append(value)
    return _orig(value)


_fingerprint.canonical_json = _capture


def description(block):
    _fingerprint._descriptions.pop(block, None)
    captured.clear()
    _fingerprint.describe(block)
    return json.loads(json.dumps(captured[-1], default=str))


def diff(a, b, path=""):
    if type(a) is not type(b):
        yield path, a, b
    elif isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            yield from diff(a.get(k), b.get(k), f"{path}.{k}")
    elif isinstance(a, list):
        if len(a) != len(b):
            yield path + "[len]", len(a), len(b)
        for i, (x, y) in enumerate(zip(a, b)):
            yield from diff(x, y, f"{path}[{i}]")
    elif a != b:
        yield path, a, b


torch.manual_seed(0)
with torch.device("cuda"):
    model = FluxTransformer2DModel(patch_size=1, in_channels=64, num_layers=1, num_single_layers=3,
                                   attention_head_dim=128, num_attention_heads=24, joint_attention_dim=4096,
                                   pooled_projection_dim=768, guidance_embeds=True, axes_dims_rope=(16, 56, 56)).to(
                                       torch.bfloat16)
blocks = list(model.transformer_blocks) + list(model.single_transformer_blocks)
before = [description(b) for b in blocks]
n, dev, bf = 64 * 64, "cuda", torch.bfloat16
x = dict(hidden_states=torch.randn(1, n, 64, device=dev, dtype=bf), encoder_hidden_states=torch.randn(1, 512, 4096, device=dev, dtype=bf),
         pooled_projections=torch.randn(1, 768, device=dev, dtype=bf), timestep=torch.tensor([0.5], device=dev, dtype=bf),
         img_ids=torch.zeros(n, 3, device=dev), txt_ids=torch.zeros(512, 3, device=dev),
         guidance=torch.tensor([3.5], device=dev, dtype=bf), return_dict=False)
with torch.no_grad():
    model(**x)
after = [description(b) for b in blocks]
for i, (a, b) in enumerate(zip(before, after)):
    d = list(diff(a, b))
    print(f"block {i} ({type(blocks[i]).__name__}): {len(d)} differences across its first forward")
    for path, u, v in d[:20]:
        print(f"  {path}: {str(u)[:120]!s} -> {str(v)[:120]!s}")
for i in range(1, len(after)):
    if type(blocks[i]) is type(blocks[i - 1]):
        d = list(diff(after[i - 1], after[i]))
        print(f"blocks {i - 1} and {i} after the forward: {len(d)} differences")
        for path, u, v in d[:10]:
            print(f"  {path}: {str(u)[:120]!s} -> {str(v)[:120]!s}")
