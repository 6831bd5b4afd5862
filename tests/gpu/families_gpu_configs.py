"""Six diffusers families at their real widths, for tests/gpu/families_gpu.py.

Each `GpuFamily` is the diffusers class, its constructor config with the released
checkpoint's WIDTHS (hidden size, heads, head dim, FFN, text/pooled dims: the values of the
model cards' transformer/config.json) and a REDUCED DEPTH (`depth` says how many blocks of
each block class, `real_depth` how many the checkpoint has), and `inputs(model, seed)`: the
keyword arguments of one `model(**kwargs)` call as the family's pipeline makes them, at a
realistic size (`size` says which), on the GPU. The call structures are those of
tests/families/families.py (dtypes of timesteps and guidance, masks, rotary ids, None
kwargs), scaled up. Random weights from the config after torch.manual_seed(seed); nothing
is downloaded.

Wan 2.1 is loaded as users load it, `from_pretrained(folder, torch_dtype=torch.bfloat16)`,
so its `_keep_in_fp32_modules` (norm1/norm2/norm3, scale_shift_table inside every
WanTransformerBlock) stay float32: `prepare_folder` writes the folder once (fp32 weights
from the seed); the other families are built in bf16 directly on the GPU.

    from families_gpu_configs import FAMILIES, build_model
    model = build_model("flux", seed=0, work="/tmp/kiln-families")
    out = model(**FAMILIES["flux"].inputs(model, 0), return_dict=False)[0]

KILN_FAMILIES_TINY=1 (a CPU dry run of the scripts, no GPU): narrow widths, 1 block per
class, tiny inputs, on the CPU.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable

TINY = "1" in (os.environ.get("KILN_FAMILIES_TINY"), os.environ.get("FAMILIES_TINY"))  # FAMILIES_: a wheel run's row
DEVICE = "cpu" if TINY else "cuda"


@dataclasses.dataclass(frozen=True)
class GpuFamily:
    model_class: str
    config: dict
    inputs: Callable[..., dict]
    depth: str        # blocks per block class here
    real_depth: str   # in the released checkpoint
    size: str         # the input size used
    checkpoint: str   # whose config the widths are
    block_classes: list | None = None  # None: the class's _repeated_blocks
    from_pretrained: bool = False      # load as users do (keeps _keep_in_fp32_modules fp32)


def _gen(seed):
    import torch

    return torch.Generator(device=DEVICE).manual_seed(1000 + seed)


def _randn(g, *shape, dtype):
    import torch

    return torch.randn(*shape, generator=g, device=DEVICE, dtype=torch.float32).to(dtype)


def _dt(model):
    return model.dtype  # diffusers skips fp32-kept modules when it reports it


def _ctx(model, seed, tiny, real):
    """An input builder's generator, the model's dtype, its config, and its sizes: `tiny`
    under KILN_FAMILIES_TINY, else `real`."""
    return _gen(seed), _dt(model), model.config, (tiny if TINY else real)


FAMILIES: dict[str, GpuFamily] = {}  # name -> family, in the order of the @_family builders below
# KILN_FAMILIES_TINY: the CPU dry run's narrow widths (same classes and structures), per name.
_TINY_WIDTHS: dict[str, dict] = {}


def _family(name, tiny, **fields):
    """Registers the decorated input builder as FAMILIES[name] (a GpuFamily of the fields,
    `inputs` the builder) and `tiny` as the name's KILN_FAMILIES_TINY widths."""
    def register(inputs):
        FAMILIES[name] = GpuFamily(inputs=inputs, **fields)
        _TINY_WIDTHS[name] = tiny
        return inputs

    return register


# ---------------------------------------------------------------------------------------
# FLUX.1-dev: 1024x1024 -> 64x64 packed latents = 4096 image tokens, 512 T5 tokens.

def _flux_ids(h, w):
    import torch

    ids = torch.zeros(h, w, 3, device=DEVICE)
    ids[..., 1] = torch.arange(h, device=DEVICE)[:, None]
    ids[..., 2] = torch.arange(w, device=DEVICE)[None, :]
    return ids.reshape(h * w, 3)


@_family("flux", model_class="FluxTransformer2DModel", checkpoint="black-forest-labs/FLUX.1-dev",
         depth="2 double + 4 single", real_depth="19 double + 38 single",
         size="1024x1024: 4096 image + 512 text tokens",
         config=dict(patch_size=1, in_channels=64, out_channels=None, num_layers=2, num_single_layers=4,
                     attention_head_dim=128, num_attention_heads=24, joint_attention_dim=4096,
                     pooled_projection_dim=768, guidance_embeds=True, axes_dims_rope=(16, 56, 56)),
         tiny=dict(attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32,
                   axes_dims_rope=(4, 6, 6), num_layers=1, num_single_layers=1))
def _flux_inputs(model, seed):
    import torch

    g, dt, c, (h, w, txt) = _ctx(model, seed, tiny=(4, 4, 8), real=(64, 64, 512))
    return dict(
        hidden_states=_randn(g, 1, h * w, c.in_channels, dtype=dt),
        encoder_hidden_states=_randn(g, 1, txt, c.joint_attention_dim, dtype=dt),
        pooled_projections=_randn(g, 1, c.pooled_projection_dim, dtype=dt),
        timestep=torch.tensor([0.75], device=DEVICE).to(dt),  # pipeline: t.to(latents.dtype) / 1000
        img_ids=_flux_ids(h, w).to(dt),
        txt_ids=torch.zeros(txt, 3, device=DEVICE, dtype=dt),
        guidance=torch.full((1,), 3.5, device=DEVICE, dtype=torch.float32),
        joint_attention_kwargs=None,
    )


# ---------------------------------------------------------------------------------------
# Wan 2.1 T2V 1.3B: 480x832, 33 frames -> latents 16 x 9 x 60 x 104, patch (1,2,2) =
# 14040 tokens; 512 umT5 tokens; scheduler timesteps float32.

@_family("wan2.1", model_class="WanTransformer3DModel", checkpoint="Wan-AI/Wan2.1-T2V-1.3B-Diffusers",
         depth="4", real_depth="30", size="480x832, 33 frames: 14040 video tokens + 512 text tokens",
         from_pretrained=True,
         config=dict(patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128, in_channels=16,
                     out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=8960, num_layers=4, cross_attn_norm=True,
                     qk_norm="rms_norm_across_heads", eps=1e-6, image_dim=None, added_kv_proj_dim=None,
                     rope_max_seq_len=1024),
         tiny=dict(num_attention_heads=2, attention_head_dim=16, text_dim=32, freq_dim=32, ffn_dim=64, num_layers=1))
def _wan_inputs(model, seed):
    import torch

    g, dt, c, (f, h, w, txt) = _ctx(model, seed, tiny=(2, 8, 8, 8), real=(9, 60, 104, 512))
    return dict(
        hidden_states=_randn(g, 1, c.in_channels, f, h, w, dtype=dt),
        timestep=torch.tensor([750.0], device=DEVICE),
        encoder_hidden_states=_randn(g, 1, txt, c.text_dim, dtype=dt),
    )


# ---------------------------------------------------------------------------------------
# Qwen-Image: 1024x1024 -> 128x128 latents, patch 2 = 4096 image tokens; 128 text tokens
# (Qwen2.5-VL embeddings of the prompt after the template is dropped; the pipeline drops an
# all-ones mask).

@_family("qwen-image", model_class="QwenImageTransformer2DModel", checkpoint="Qwen/Qwen-Image",
         depth="4", real_depth="60", size="1024x1024: 4096 image + 128 text tokens",
         config=dict(patch_size=2, in_channels=64, out_channels=16, num_layers=4, attention_head_dim=128,
                     num_attention_heads=24, joint_attention_dim=3584, guidance_embeds=False,
                     axes_dims_rope=(16, 56, 56)),
         tiny=dict(num_layers=1, attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                   axes_dims_rope=(4, 6, 6)))
def _qwen_inputs(model, seed):
    import torch

    g, dt, c, (h, w, txt) = _ctx(model, seed, tiny=(4, 4, 8), real=(64, 64, 128))
    return dict(
        hidden_states=_randn(g, 1, h * w, c.in_channels, dtype=dt),
        encoder_hidden_states=_randn(g, 1, txt, c.joint_attention_dim, dtype=dt),
        encoder_hidden_states_mask=None,
        timestep=torch.tensor([0.75], device=DEVICE).to(dt),
        img_shapes=[[(1, h, w)]],
        attention_kwargs=None,
    )


# ---------------------------------------------------------------------------------------
# SD3.5-medium: 1024x1024 -> 16 x 128 x 128 latents, patch 2 = 4096 tokens; 333 text tokens
# (77 CLIP + 256 T5); pooled 2048; timestep float32 0..1000. Blocks 0-1 dual attention
# (real: 0-12), block 2 plain, block 3 the last one (context_pre_only, returns (None, h)).

@_family("sd3.5-medium", model_class="SD3Transformer2DModel", checkpoint="stabilityai/stable-diffusion-3.5-medium",
         depth="4: 2 dual-attention, 1 plain, 1 last (context_pre_only)",
         real_depth="24: 13 dual-attention, 10 plain, 1 last", size="1024x1024: 4096 image + 333 text tokens",
         block_classes=["JointTransformerBlock"],
         config=dict(sample_size=128, patch_size=2, in_channels=16, num_layers=4, attention_head_dim=64,
                     num_attention_heads=24, joint_attention_dim=4096, caption_projection_dim=1536,
                     pooled_projection_dim=2048, out_channels=16, pos_embed_max_size=384,
                     dual_attention_layers=(0, 1), qk_norm="rms_norm"),
         tiny=dict(sample_size=16, num_layers=3, attention_head_dim=16, num_attention_heads=2,
                   joint_attention_dim=32, caption_projection_dim=32, pooled_projection_dim=32,
                   pos_embed_max_size=32, dual_attention_layers=(0,)))
def _sd3_inputs(model, seed):
    import torch

    g, dt, c, (hw, txt) = _ctx(model, seed, tiny=(16, 8), real=(128, 333))
    return dict(
        hidden_states=_randn(g, 1, c.in_channels, hw, hw, dtype=dt),
        encoder_hidden_states=_randn(g, 1, txt, c.joint_attention_dim, dtype=dt),
        pooled_projections=_randn(g, 1, c.pooled_projection_dim, dtype=dt),
        timestep=torch.tensor([750.0], device=DEVICE),
        joint_attention_kwargs=None,
    )


# ---------------------------------------------------------------------------------------
# LTX-Video 0.9 (2B): 480x704, 161 frames -> latents 21 x 15 x 22 (VAE 8x temporal, 32x
# spatial, patch 1) = 6930 tokens; 128 T5 tokens with their mask; rope scale (8/25, 32, 32).

@_family("ltx-video", model_class="LTXVideoTransformer3DModel", checkpoint="Lightricks/LTX-Video (0.9)",
         depth="4", real_depth="28", size="480x704, 161 frames: 6930 video tokens + 128 text tokens",
         config=dict(in_channels=128, out_channels=128, patch_size=1, patch_size_t=1, num_attention_heads=32,
                     attention_head_dim=64, cross_attention_dim=2048, num_layers=4, activation_fn="gelu-approximate",
                     qk_norm="rms_norm_across_heads", norm_elementwise_affine=False, norm_eps=1e-6,
                     caption_channels=4096, attention_bias=True, attention_out_bias=True),
         tiny=dict(num_attention_heads=2, attention_head_dim=16, cross_attention_dim=32, num_layers=1,
                   caption_channels=32))
def _ltx_inputs(model, seed):
    import torch

    g, dt, c, (f, h, w, txt) = _ctx(model, seed, tiny=(2, 4, 4, 8), real=(21, 15, 22, 128))
    return dict(
        hidden_states=_randn(g, 1, f * h * w, c.in_channels, dtype=dt),
        encoder_hidden_states=_randn(g, 1, txt, c.caption_channels, dtype=dt),
        timestep=torch.tensor([750.0], device=DEVICE),
        encoder_attention_mask=torch.ones(1, txt, dtype=torch.long, device=DEVICE),
        num_frames=f,
        height=h,
        width=w,
        rope_interpolation_scale=(8 / 25, 32, 32),
        attention_kwargs=None,
    )


# ---------------------------------------------------------------------------------------
# HunyuanVideo: 480x832, 33 frames -> latents 16 x 9 x 60 x 104, patch (1,2,2) = 14040
# tokens (the model card's 720x1280x129 would be 120k tokens); 256 LLaVA tokens with their
# mask, CLIP pooled 768, guidance 6.0 * 1000; block classes: double, single, the token
# refiner (2 layers, as released) and the patch embed (diffusers' _repeated_blocks).

@_family("hunyuan-video", model_class="HunyuanVideoTransformer3DModel",
         checkpoint="hunyuanvideo-community/HunyuanVideo",
         depth="2 double + 4 single + token refiner (2 layers) + patch embed",
         real_depth="20 double + 40 single + token refiner (2 layers) + patch embed",
         size="480x832, 33 frames: 14040 video tokens + 256 text tokens (smaller than the card's 720p x 129 frames)",
         config=dict(in_channels=16, out_channels=16, num_attention_heads=24, attention_head_dim=128, num_layers=2,
                     num_single_layers=4, num_refiner_layers=2, mlp_ratio=4.0, patch_size=2, patch_size_t=1,
                     qk_norm="rms_norm", guidance_embeds=True, text_embed_dim=4096, pooled_projection_dim=768,
                     rope_theta=256.0, rope_axes_dim=(16, 56, 56), image_condition_type=None),
         tiny=dict(num_attention_heads=2, attention_head_dim=16, num_layers=1, num_single_layers=1,
                   text_embed_dim=32, pooled_projection_dim=32, rope_axes_dim=(4, 6, 6)))
def _hunyuan_video_inputs(model, seed):
    import torch

    g, dt, c, (f, h, w, txt) = _ctx(model, seed, tiny=(2, 8, 8, 8), real=(9, 60, 104, 256))
    return dict(
        hidden_states=_randn(g, 1, c.in_channels, f, h, w, dtype=dt),
        timestep=torch.tensor([750.0], device=DEVICE).to(dt),
        encoder_hidden_states=_randn(g, 1, txt, c.text_embed_dim, dtype=dt),
        encoder_attention_mask=torch.ones(1, txt, dtype=torch.long, device=DEVICE),
        pooled_projections=_randn(g, 1, c.pooled_projection_dim, dtype=dt),
        guidance=torch.full((1,), 6.0 * 1000, device=DEVICE, dtype=dt),
        attention_kwargs=None,
    )


def config_of(name):
    fam = FAMILIES[name]
    return dict(fam.config, **_TINY_WIDTHS[name]) if TINY else dict(fam.config)


def model_class(name):
    import diffusers

    return getattr(diffusers, FAMILIES[name].model_class)


def block_classes(name):
    """The block class names kiln and regional compile use for this family."""
    fam = FAMILIES[name]
    return list(fam.block_classes) if fam.block_classes else list(model_class(name)._repeated_blocks)


def folder_of(name, work):
    return os.path.join(work, "pretrained", name)


def prepare_folder(name, work, seed=0):
    """Writes the from_pretrained folder of a family that is loaded that way (fp32 weights
    from the seed, as a checkpoint holds them); nothing for the others. Idempotent."""
    import torch

    fam = FAMILIES[name]
    folder = folder_of(name, work)
    if not fam.from_pretrained or os.path.exists(os.path.join(folder, "config.json")):
        return folder
    torch.manual_seed(seed)
    with torch.device(DEVICE):
        model = model_class(name)(**config_of(name))
    model.save_pretrained(folder + ".tmp")
    os.replace(folder + ".tmp", folder)
    return folder


def build_model(name, seed, work):
    """The family's model on DEVICE, eval, no grad: bf16 from the seed, or (Wan) the folder
    prepare_folder wrote, loaded with from_pretrained(torch_dtype=torch.bfloat16)."""
    import torch

    fam = FAMILIES[name]
    cls = model_class(name)
    if fam.from_pretrained:
        folder = prepare_folder(name, work, seed)
        model = cls.from_pretrained(folder, torch_dtype=torch.bfloat16).to(DEVICE)
    else:
        torch.manual_seed(seed)
        torch.set_default_dtype(torch.bfloat16)
        try:
            with torch.device(DEVICE):
                model = cls(**config_of(name))
        finally:
            torch.set_default_dtype(torch.float32)
    return model.eval().requires_grad_(False)


def describe(model):
    """Parameter count and dtypes (Wan: bf16 and fp32 side by side)."""
    import collections

    n, dtypes = 0, collections.Counter()
    for p in model.parameters():
        n += p.numel()
        dtypes[str(p.dtype).replace("torch.", "")] += p.numel()
    return {"params": n, "param_dtypes": dict(dtypes)}
