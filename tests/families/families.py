"""Small but structurally faithful test models for the diffusers transformer families kiln
serves.

Each `Family` names a diffusers class, a constructor config that keeps the real model's
block classes and call structure (same block classes, same optional branches: guidance
embedding, dual attention, `context_pre_only`, qk norms, token refiners, ...) with a few
blocks and narrow widths, and an `inputs(model, seed, scale=1)` that builds the keyword
arguments of one `model(**kwargs)` call the way the family's pipeline makes them (packed
latents, rotary ids, masks, timestep dtype and range), small, on the CPU, without
`return_dict` (every forward takes one; callers pass `return_dict=False`). `scale=2` makes
more image tokens (and, for a family whose block class sees only text, more text tokens),
so the two scales give each block class two input signatures.

`load_like_a_user` loads a family as users do (`from_pretrained(..., torch_dtype=bf16)`),
so diffusers' `_keep_in_fp32_modules` stay fp32: a Wan block holds fp32 and bf16
parameters.

`repeated_block_models()` lists diffusers' own classes with `_repeated_blocks`: a newer
diffusers adds rows by itself; a class without a `FAMILIES` row and without a
`NOT_COVERED` reason is a gap (tests/families/check_configs.py reports it).

Sizes: hidden 32-64, 2 heads of head dim 16 (where the class allows), 1-2 blocks per block
class; one forward well under a second on a CPU.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import torch

__all__ = [
    "Family",
    "FAMILIES",
    "NOT_COVERED",
    "EXTRA_FAMILIES",
    "CI",
    "all_families",
    "repeated_block_models",
    "model_class",
    "block_class_names",
    "load_like_a_user",
    "build",
]


@dataclasses.dataclass(frozen=True)
class Family:
    """One row of the sweep.

    model_class: the diffusers class name. config: its constructor kwargs. inputs(model, seed,
    scale=1): kwargs of one `model(**kwargs)` call, on the CPU, floating activations in
    `model.dtype`, without `return_dict` (callers add `return_dict=False`). block_classes: the block classes kiln compiles, None for the class's
    `_repeated_blocks`. ci: in the fixed CI subset. note: what the row is, where not the
    flagship checkpoint's structure.
    """

    model_class: str
    config: dict
    inputs: Callable[..., dict]
    block_classes: list | None = None
    ci: bool = False
    note: str = ""
    # fills parameters that the class leaves uninitialized (torch.empty) after construction
    init: Callable | None = None


# --------------------------------------------------------------------------------------
# diffusers' classes


def _diffusers_classes():
    import diffusers
    import diffusers.models

    from diffusers import ModelMixin

    found = {}
    for mod in (diffusers.models, diffusers):
        for name in dir(mod):
            if name.startswith("_"):
                continue
            try:
                obj = getattr(mod, name)
            except Exception:  # a lazily imported name whose backend is missing
                continue
            if isinstance(obj, type) and issubclass(obj, ModelMixin) and obj is not ModelMixin:
                found.setdefault(obj.__name__, obj)
    return found


def repeated_block_models():
    """diffusers' model classes (exported from `diffusers.models` / `diffusers`) that list a
    non-empty `_repeated_blocks`, sorted by class name."""
    classes = _diffusers_classes()
    return [classes[n] for n in sorted(classes) if getattr(classes[n], "_repeated_blocks", None)]


def _family(name_or_family):
    if not isinstance(name_or_family, str):
        return name_or_family
    return FAMILIES[name_or_family] if name_or_family in FAMILIES else EXTRA_FAMILIES[name_or_family]


def model_class(name_or_family):
    fam = _family(name_or_family)
    import diffusers

    cls = getattr(diffusers, fam.model_class, None)
    if cls is None:
        cls = _diffusers_classes()[fam.model_class]
    return cls


def block_class_names(name_or_family, model=None):
    """The block classes kiln compiles for this family: `block_classes`, else the model class's
    `_repeated_blocks`. `model` may be the class or an instance."""
    fam = _family(name_or_family)
    if fam.block_classes is not None:
        return list(fam.block_classes)
    cls = model if model is not None else model_class(fam)
    return list(type(cls)._repeated_blocks if not isinstance(cls, type) else cls._repeated_blocks)


def build(name, seed=0):
    """The family's model with random weights, as constructed (fp32)."""
    fam = _family(name)
    torch.manual_seed(seed)
    model = model_class(fam)(**fam.config)
    if fam.init is not None:
        with torch.no_grad():
            fam.init(model)
    bad = [n for n, p in model.named_parameters() if p.is_floating_point() and not torch.isfinite(p).all()]
    if bad:
        raise ValueError(f"{name}: parameters left non-finite after construction (torch.empty?): {bad[:4]}")
    return model


def load_like_a_user(name, folder, seed=0):
    """Build with random weights, save_pretrained(folder), and load it back exactly as a user
    does: `from_pretrained(folder, torch_dtype=torch.bfloat16).eval()`."""
    from diffusers.utils import is_accelerate_available

    if not is_accelerate_available():
        raise RuntimeError(
            "accelerate is not importable: without it diffusers' from_pretrained falls back to "
            "low_cpu_mem_usage=False, which refuses torch_dtype for a class with _keep_in_fp32_modules "
            "(Wan: 'low_cpu_mem_usage cannot be False when keep_in_fp32_modules is True') and leaves "
            "some models' weights float32 (SD3): not how users load. Install accelerate beside diffusers."
        )
    cls = model_class(name)
    model = build(name, seed)
    model.save_pretrained(folder)
    del model
    return cls.from_pretrained(folder, torch_dtype=torch.bfloat16).eval()


# --------------------------------------------------------------------------------------
# input helpers


def _dt(model):
    """Dtype of floating activations: the model's compute dtype (diffusers skips its
    fp32-kept modules when it reports `model.dtype`)."""
    return model.dtype


class _R:
    """Seeded random tensors on the CPU."""

    def __init__(self, seed):
        self.g = torch.Generator().manual_seed(seed)

    def randn(self, *shape, dtype=torch.float32):
        return torch.randn(*shape, generator=self.g).to(dtype)

    def randint(self, lo, hi, *shape, dtype=torch.long):
        return torch.randint(lo, hi, shape, generator=self.g).to(dtype)

    def t(self, lo=1, hi=999, dtype=torch.float32, n=1):
        """Timesteps as a scheduler hands them (float, 0..1000)."""
        return torch.randint(lo, hi, (n,), generator=self.g).to(dtype)


def _flux_ids(h, w, frame=0):
    """FLUX's latent image ids: (h*w, 3) rows [frame, row, col] (float)."""
    ids = torch.zeros(h, w, 3)
    ids[..., 0] = frame
    ids[..., 1] = torch.arange(h)[:, None]
    ids[..., 2] = torch.arange(w)[None, :]
    return ids.reshape(h * w, 3)


def _flux_txt_img_ids(h, w, txt, dt):
    """FLUX's `txt_ids` (zeros) and `img_ids` for `txt` prompt tokens and an h x w token grid."""
    return dict(txt_ids=torch.zeros(txt, 3, dtype=dt), img_ids=_flux_ids(h, w).to(dt))


def _flux2_ids(*sizes):
    """FLUX.2's position ids: every (t, h, w, l) of a grid of `sizes`, as (n, 4) int64 rows."""
    return torch.cartesian_prod(*(torch.arange(n) for n in sizes))


def _ctx(model, seed):
    """What an inputs builder starts from: a seeded random source, the activation dtype, the config."""
    return _R(seed), _dt(model), model.config


def _flow_t(r, dt):
    """A flow-matching pipeline's `timestep / 1000` in the latents' dtype."""
    return (r.t() / 1000).to(dt)


def _dt_t(r, dt):
    """A timestep (0..1000) in the latents' dtype, as pipelines that pass `t.to(latents.dtype)` do."""
    return r.t().to(dt)


def _sched_t(r, dt):
    """A timestep as the scheduler hands it: float32, 0..1000."""
    return r.t()


def _mask(n, dtype=torch.long, pad=0):
    """A (1, n) attention mask of ones, its last `pad` tokens masked out (padding after the prompt)."""
    mask = torch.ones(1, n, dtype=dtype)
    if pad:
        mask[:, -pad:] = 0
    return mask


def _text(r, dt, n, dim, pad=0, dtype=torch.long, suffix=""):
    """`n` prompt tokens `dim` wide and their mask: `encoder_hidden_states{suffix}`,
    `encoder_attention_mask{suffix}`."""
    return {
        f"encoder_hidden_states{suffix}": r.randn(1, n, dim, dtype=dt),
        f"encoder_attention_mask{suffix}": _mask(n, dtype, pad),
    }


def _guidance(kw, c, value, dtype=torch.float32):
    """`kw` with the guidance scale added where the config embeds one."""
    if c.guidance_embeds:
        kw["guidance"] = torch.full((1,), value, dtype=dtype)
    return kw


_XCT = ("hidden_states", "encoder_hidden_states", "timestep")  # latents, prompt, timestep
_XTC = ("hidden_states", "timestep", "encoder_hidden_states")  # latents, timestep, prompt


def _packed(model, seed, scale, order, txt=8, text_dim="joint_attention_dim", t=_flow_t):
    """The start of a FLUX-like call: packed latents, one token per latent pixel of a (4 * scale, 4)
    grid (`hidden_states`), `txt` prompt tokens as wide as the config's `text_dim`
    (`encoder_hidden_states`), the pooled prompt (`pooled_projections`) and `timestep`, drawn in
    `order` (where these families differ). Returns (kwargs, r, dt, c, h, w)."""
    r, dt, c = _ctx(model, seed)
    h, w = 4 * scale, 4
    draw = {
        "hidden_states": lambda: r.randn(1, h * w, c.in_channels, dtype=dt),
        "encoder_hidden_states": lambda: r.randn(1, txt, getattr(c, text_dim), dtype=dt),
        "pooled_projections": lambda: r.randn(1, c.pooled_projection_dim, dtype=dt),
        "timestep": lambda: t(r, dt),
    }
    return {k: draw[k]() for k in order}, r, dt, c, h, w


def _video(model, seed, scale, frames=2, t=_sched_t):
    """The start of a Wan-like call: latents (1, in_channels, frames, 8 * scale, 8), `timestep`
    (the scheduler's float32 by default, expanded to the batch), 8 prompt tokens `text_dim` wide.
    Returns (kwargs, r, dt, c)."""
    r, dt, c = _ctx(model, seed)
    kw = dict(
        hidden_states=r.randn(1, c.in_channels, frames, 8 * scale, 8, dtype=dt),
        timestep=t(r, dt),
        encoder_hidden_states=r.randn(1, 8, c.text_dim, dtype=dt),
    )
    return kw, r, dt, c


# --------------------------------------------------------------------------------------
# config pieces most rows share

_HEADS = dict(attention_head_dim=16, num_attention_heads=2)  # 2 heads of head dim 16
_MMDIT = dict(_HEADS, joint_attention_dim=32)  # plus a 32-wide prompt
# FLUX-like: 2 double + 2 single stream blocks over 64 packed channels, 3-axis rope
_FLUX_LIKE = dict(_MMDIT, patch_size=1, in_channels=64, num_layers=2, num_single_layers=2, axes_dims_rope=(4, 6, 6))

# ======================================================================================
# FLUX.1-dev: 19 double + 38 single stream blocks, guidance embedding, packed 2x2 latents.


def _flux_inputs(model, seed, scale=1):
    order = ("hidden_states", "encoder_hidden_states", "pooled_projections", "timestep")
    kw, r, dt, c, h, w = _packed(model, seed, scale, order)
    kw.update(img_ids=_flux_ids(h, w).to(dt), txt_ids=torch.zeros(8, 3, dtype=dt), joint_attention_kwargs=None)
    return _guidance(kw, c, 3.5)


FLUX = Family(
    model_class="FluxTransformer2DModel",
    config=dict(_FLUX_LIKE, out_channels=None, pooled_projection_dim=32, guidance_embeds=True),
    inputs=_flux_inputs,
    ci=True,
)

# ======================================================================================
# Wan 2.1 T2V 1.3B: loaded in bf16, each WanTransformerBlock keeps scale_shift_table and its affine
# norm2 in fp32 (norm1/norm3 have no parameters); blocks are called positionally.


def _wan_inputs(model, seed, scale=1, frames=2):
    kw, r, dt, c = _video(model, seed, scale, frames)
    if c.image_dim is not None:
        kw["encoder_hidden_states_image"] = r.randn(1, 4, c.image_dim, dtype=dt)
    return kw


_WAN_LIKE = dict(
    _HEADS, patch_size=(1, 2, 2), in_channels=16, out_channels=16, text_dim=32, freq_dim=32, ffn_dim=64,
    num_layers=2, cross_attn_norm=True, eps=1e-6,
)
_WAN_QK = dict(qk_norm="rms_norm_across_heads")
_WAN_CONFIG = dict(_WAN_LIKE, **_WAN_QK, image_dim=None, added_kv_proj_dim=None, rope_max_seq_len=1024)
_WAN_I2V = dict(in_channels=36, image_dim=32, added_kv_proj_dim=32)  # CLIP image tokens

WAN = Family(model_class="WanTransformer3DModel", config=_WAN_CONFIG, inputs=_wan_inputs, ci=True)

# Wan 2.1 I2V 14B: CLIP image tokens through added k/v projections (image_dim, added_kv_proj_dim).
WAN_I2V = Family(
    model_class="WanTransformer3DModel",
    config=dict(_WAN_CONFIG, **_WAN_I2V),
    inputs=_wan_inputs,
    note="Wan 2.1 I2V: image_dim / added_kv_proj_dim",
)

# ======================================================================================
# Qwen-Image: one dual-stream block class, 60 of them; rotary as complex, masks, img_shapes.


def _qwen_inputs(model, seed, scale=1):
    kw, r, dt, c, h, w = _packed(model, seed, scale, _XCT)
    # the pipeline drops an all-ones mask
    kw.update(encoder_hidden_states_mask=None, img_shapes=[[(1, h, w)]], attention_kwargs=None)
    return _guidance(kw, c, 4.0)


_QWEN_LIKE = dict(_MMDIT, patch_size=2, in_channels=64, out_channels=16, axes_dims_rope=(4, 6, 6))

QWEN_IMAGE = Family(
    model_class="QwenImageTransformer2DModel",
    config=dict(_QWEN_LIKE, num_layers=2, guidance_embeds=False),
    inputs=_qwen_inputs,
    ci=True,
)

# ======================================================================================
# SD3.5-medium: one block class, three structures: dual-attention blocks (0-12), plain
# blocks, and a last block with context_pre_only=True returning (None, hidden_states).


def _sd3_inputs(model, seed, scale=1):
    r, dt, c = _ctx(model, seed)
    return dict(
        hidden_states=r.randn(1, c.in_channels, 8 * scale, 8, dtype=dt),
        encoder_hidden_states=r.randn(1, 8, c.joint_attention_dim, dtype=dt),
        pooled_projections=r.randn(1, c.pooled_projection_dim, dtype=dt),
        timestep=r.t(),  # float32 0..1000
        joint_attention_kwargs=None,
    )


SD35_MEDIUM = Family(
    model_class="SD3Transformer2DModel",
    config=dict(
        _MMDIT, sample_size=16, patch_size=2, in_channels=16,
        num_layers=3,  # 0: dual attention, 1: plain, 2: context_pre_only
        caption_projection_dim=32, pooled_projection_dim=32, out_channels=16, pos_embed_max_size=32,
        dual_attention_layers=(0,), qk_norm="rms_norm",
    ),
    block_classes=["JointTransformerBlock"],
    inputs=_sd3_inputs,
    ci=True,
)

# SD3-medium / SD3.5-large: no dual attention (SD3.5-large adds qk_norm).
SD3_MEDIUM = Family(
    model_class="SD3Transformer2DModel",
    config=dict(SD35_MEDIUM.config, num_layers=2, dual_attention_layers=(), qk_norm=None),
    block_classes=["JointTransformerBlock"],
    inputs=_sd3_inputs,
    note="SD3-medium: no dual attention, no qk norm",
)

# ======================================================================================
# LTX-Video 0.9: one block class; the block returns a tensor; mask as an additive bias.


def _ltx_inputs(model, seed, scale=1):
    r, dt, c = _ctx(model, seed)
    f, h, w, txt = 2, 4 * scale, 4, 8
    return dict(
        hidden_states=r.randn(1, f * h * w, c.in_channels, dtype=dt),
        **_text(r, dt, txt, c.caption_channels),
        timestep=r.t(),
        num_frames=f, height=h, width=w, rope_interpolation_scale=(8 / 25, 32, 32), attention_kwargs=None,
    )


_LTX_LIKE = dict(
    _HEADS, in_channels=128, out_channels=128, patch_size=1, patch_size_t=1, cross_attention_dim=32,
    num_layers=2, qk_norm="rms_norm_across_heads", caption_channels=32,
)

LTX_VIDEO = Family(
    model_class="LTXVideoTransformer3DModel",
    config=dict(
        _LTX_LIKE, activation_fn="gelu-approximate", norm_elementwise_affine=False, norm_eps=1e-6,
        attention_bias=True, attention_out_bias=True,
    ),
    inputs=_ltx_inputs,
    ci=True,
)

# ======================================================================================
# HunyuanVideo: double + single stream blocks in two ModuleLists, a token refiner (text
# only) and a patch embed, all four in _repeated_blocks.


def _hunyuan_video_inputs(model, seed, scale=1):
    r, dt, c = _ctx(model, seed)
    txt = 8 * scale  # the token refiner sees only text
    kw = dict(
        hidden_states=r.randn(1, c.in_channels, 2, 8 * scale, 8, dtype=dt),
        timestep=r.t().to(dt),  # pipeline: t.to(latents.dtype)
        **_text(r, dt, txt, c.text_embed_dim),
        pooled_projections=r.randn(1, c.pooled_projection_dim, dtype=dt),
        attention_kwargs=None,
    )
    return _guidance(kw, c, 6.0 * 1000, dt)


# HunyuanVideo-like: blocks of 2 heads, 32-wide prompt, rms qk norms
_HUNYUAN_LIKE = dict(_HEADS, num_layers=2, mlp_ratio=4.0, qk_norm="rms_norm", text_embed_dim=32, rope_theta=256.0)

HUNYUAN_VIDEO = Family(
    model_class="HunyuanVideoTransformer3DModel",
    config=dict(
        _HUNYUAN_LIKE, in_channels=16, out_channels=16, num_single_layers=2, num_refiner_layers=2, patch_size=2,
        patch_size_t=1, guidance_embeds=True, pooled_projection_dim=32, rope_axes_dim=(4, 6, 6),
        image_condition_type=None,
    ),
    inputs=_hunyuan_video_inputs,
    ci=True,
)


# ======================================================================================
# FLUX-like image models (double + single stream blocks)


def _chroma_inputs(model, seed, scale=1):
    kw, r, dt, c, h, w = _packed(model, seed, scale, _XTC)
    txt = 8
    mask = torch.ones(1, txt + h * w, dtype=dt)
    mask[:, txt - 2 : txt] = 0  # T5 padding after the prompt (the pipeline keeps one pad token)
    return dict(kw, **_flux_txt_img_ids(h, w, txt, dt), attention_mask=mask, joint_attention_kwargs=None)


CHROMA = Family(
    model_class="ChromaTransformer2DModel",
    config=dict(_FLUX_LIKE, approximator_num_channels=16, approximator_hidden_dim=32, approximator_layers=2),
    inputs=_chroma_inputs,
)


def _flux2_inputs(model, seed, scale=1):
    kw, r, dt, c, h, w = _packed(model, seed, scale, _XCT)
    # (B, S, 4) int64, as the pipeline makes them
    kw.update(img_ids=_flux2_ids(1, h, w, 1)[None], txt_ids=_flux2_ids(1, 1, 1, 8)[None], joint_attention_kwargs=None)
    return _guidance(kw, c, 4.0)


# FLUX.2-like: 4-axis rope over 128 packed channels
_FLUX2_LIKE = dict(_MMDIT, in_channels=128, num_single_layers=2, mlp_ratio=3.0, axes_dims_rope=(4, 4, 4, 4), eps=1e-6)

FLUX2 = Family(
    model_class="Flux2Transformer2DModel",
    config=dict(
        _FLUX2_LIKE, patch_size=1, num_layers=2, timestep_guidance_channels=256, rope_theta=2000,
        guidance_embeds=True,
    ),
    inputs=_flux2_inputs,
)


def _flux3_inputs(model, seed, scale=1):
    txt = 8 * scale  # the text mode blocks see only text
    kw, r, dt, c, h, w = _packed(model, seed, scale, _XCT, txt=txt)
    return dict(kw, img_ids=_flux2_ids(1, h, w, 1), txt_ids=_flux2_ids(1, 1, 1, txt), attention_kwargs=None)


FLUX3 = Family(
    model_class="Flux3Transformer2DModel",
    config=dict(
        _FLUX2_LIKE, cond_in_channels=128, num_layers=1, timestep_channels=256, rope_theta=10000, flow_map=False
    ),
    inputs=_flux3_inputs,
)


def _longcat_inputs(model, seed, scale=1):
    kw, r, dt, c, h, w = _packed(model, seed, scale, _XTC)
    tid = torch.zeros(8, 3)
    tid[:, 1] = tid[:, 2] = torch.arange(8)
    iid = _flux_ids(h, w, frame=1)
    iid[:, 1:] += 512  # images start after the tokenizer's max length
    return dict(kw, txt_ids=tid, img_ids=iid)


LONGCAT_IMAGE = Family(
    model_class="LongCatImageTransformer2DModel",
    config=dict(_FLUX_LIKE, pooled_projection_dim=32),
    inputs=_longcat_inputs,
)


def _ovis_inputs(model, seed, scale=1):
    kw, r, dt, c, h, w = _packed(model, seed, scale, _XTC)
    return dict(kw, **_flux_txt_img_ids(h, w, 8, dt), joint_attention_kwargs=None)


OVIS_IMAGE = Family(
    model_class="OvisImageTransformer2DModel", config=dict(_FLUX_LIKE, out_channels=64), inputs=_ovis_inputs
)


def _bria_fibo_inputs(model, seed, scale=1):
    # the pipeline passes t (0..1000) in the latents' dtype
    kw, r, dt, c, h, w = _packed(model, seed, scale, _XTC, t=_dt_t)
    layers = [r.randn(1, 8, c.text_encoder_dim, dtype=dt) for _ in range(c.num_layers + c.num_single_layers)]
    return dict(kw, text_encoder_layers=layers, **_flux_txt_img_ids(h, w, 8, dt), joint_attention_kwargs=None)


BRIA_FIBO = Family(
    model_class="BriaFiboTransformer2DModel",
    config=dict(
        _FLUX_LIKE, in_channels=48, pooled_projection_dim=None, guidance_embeds=False, text_encoder_dim=32
    ),
    inputs=_bria_fibo_inputs,
)


def _bria_fibo2_inputs(model, seed, scale=1):
    r, dt, c = _ctx(model, seed)
    return dict(
        hidden_states=r.randn(1, c.in_channels, 8 * scale, 8, dtype=dt),
        timestep=r.t() / 1000,  # float32 in [0, 1]
        encoder_hidden_states=r.randn(1, 1 + len(c.injection_layer_ids), 8, c.cap_feat_dim, dtype=dt),
        encoder_attention_mask=None,
    )


# Lumina-like (Z-Image, FIBO 2): 2 blocks of 2 heads, 1 refiner block per stream
_LUMINA_LIKE = dict(
    dim=32, n_layers=2, n_refiner_layers=1, n_heads=2, norm_eps=1e-5, cap_feat_dim=32, rope_theta=256.0,
    t_scale=1000.0,
)

BRIA_FIBO2 = Family(
    model_class="BriaFibo2Transformer2DModel",
    config=dict(
        _LUMINA_LIKE, in_channels=32, patch_size=2,
        injection_layer_ids=(1,),  # block 0 plain, block 1 reads its own text bundle
        perceiver_num_layers=1, min_num_gist_tokens=4, max_num_gist_tokens=8, gist_step=4, gist_min_text_len=8,
        gist_max_text_len=16, axes_dims=(4, 6, 6), axes_lens=(64, 32, 32),
    ),
    inputs=_bria_fibo2_inputs,
)


def _hunyuan_image_inputs(model, seed, scale=1):
    r, dt, c = _ctx(model, seed)
    kw = dict(
        hidden_states=r.randn(1, c.in_channels, 4 * scale, 4, dtype=dt),
        timestep=r.t().to(dt),
        **_text(r, dt, 8, c.text_embed_dim, pad=2),
        attention_kwargs=None,
    )
    if c.text_embed_2_dim is not None:
        kw.update(_text(r, dt, 4, c.text_embed_2_dim, suffix="_2"))
    _guidance(kw, c, 3.5 * 1000, dt)
    if c.use_meanflow:
        kw["timestep_r"] = r.t().to(dt)
    return kw


HUNYUAN_IMAGE = Family(
    model_class="HunyuanImageTransformer2DModel",
    config=dict(
        _HUNYUAN_LIKE, in_channels=64, out_channels=64, num_single_layers=2, num_refiner_layers=1,
        patch_size=(1, 1), guidance_embeds=False,
        text_embed_2_dim=32,  # the byT5 glyph branch of HunyuanImage-2.1
        rope_axes_dim=(8, 8), use_meanflow=False,
    ),
    inputs=_hunyuan_image_inputs,
)

# HunyuanImage-2.1 distilled: guidance embedding and meanflow (timestep_r).
HUNYUAN_IMAGE_DISTILLED = Family(
    model_class="HunyuanImageTransformer2DModel",
    config=dict(HUNYUAN_IMAGE.config, guidance_embeds=True, use_meanflow=True),
    inputs=_hunyuan_image_inputs,
    note="HunyuanImage-2.1 distilled: guidance + meanflow",
)


def _qwen21_inputs(model, seed, scale=1):
    kw, r, dt, c, h, w = _packed(model, seed, scale, _XCT, text_dim="context_in_dim")
    txt = 8
    img_mask = torch.cat([torch.zeros(1, txt, dtype=torch.bool), torch.ones(1, h * w // 4, dtype=torch.bool)], 1)
    return dict(
        kw, img_shapes=[[(1, h, w)]], img_mask=img_mask, encoder_hidden_states_mask=_mask(txt, torch.bool),
        attention_kwargs=None, kv_cache=None, kv_cache_mode=None,
    )


QWEN_IMAGE21 = Family(
    model_class="QwenImage21Transformer2DModel",
    config=dict(
        _HEADS, patch_size=1, in_channels=64, out_channels=64, num_layers=2, context_in_dim=32, mlp_ratio=3,
        axes_dims_rope=(4, 6, 6), eps=1e-6, causal_condition=True,
    ),
    inputs=_qwen21_inputs,
    note="without the pipeline's prefix KV cache (kv_cache=None)",
)


# ======================================================================================
# single-stream and other image models


def _krea2_inputs(model, seed, scale=1):
    kw, r, dt, c, h, w = _packed(model, seed, scale, ("hidden_states",))
    txt = 8
    pos = torch.zeros(txt + h * w, 3)
    pos[txt:, 1] = torch.arange(h).repeat_interleave(w)
    pos[txt:, 2] = torch.arange(w).repeat(h)
    return dict(
        kw, encoder_hidden_states=r.randn(1, txt, c.num_text_layers, c.text_hidden_dim, dtype=dt),
        timestep=_flow_t(r, dt), position_ids=pos, encoder_attention_mask=_mask(txt, torch.bool, pad=2),
        attention_kwargs=None,
    )


KREA2 = Family(
    model_class="Krea2Transformer2DModel",
    config=dict(
        in_channels=64, num_layers=2, attention_head_dim=16, num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query attention, as the real 48/12
        intermediate_size=64, timestep_embed_dim=32, text_hidden_dim=32, num_text_layers=3,
        text_num_attention_heads=2, text_num_key_value_heads=2, text_intermediate_size=32,
        num_layerwise_text_blocks=1, num_refiner_text_blocks=1, axes_dims_rope=(4, 6, 6), rope_theta=1000.0,
        norm_eps=1e-5,
    ),
    inputs=_krea2_inputs,
)


def _z_image_inputs(model, seed, scale=1):
    r, dt, c = _ctx(model, seed)
    # Z-Image pads image and text tokens to multiples of 32: 16 -> 32 and 64 image tokens, 8 -> 32
    # and 40 -> 64 text tokens (the context refiner blocks see only text).
    txt = 8 if scale == 1 else 40
    return dict(
        x=[r.randn(c.in_channels, 1, 8 * scale, 8 * scale, dtype=dt)],  # one (C, F, H, W) latent per sample
        t=(1000 - r.t()) / 1000,  # float32, 0 = noise
        cap_feats=[r.randn(txt, c.cap_feat_dim, dtype=dt)],
        joint_attention_kwargs=None,
    )


Z_IMAGE = Family(
    model_class="ZImageTransformer2DModel",
    config=dict(
        _LUMINA_LIKE, all_patch_size=(2,), all_f_patch_size=(1,), in_channels=16, n_kv_heads=2, qk_norm=True,
        axes_dims=[4, 6, 6], axes_lens=[1024, 512, 512],
    ),
    inputs=_z_image_inputs,
)


def _ernie_inputs(model, seed, scale=1):
    r, dt, c = _ctx(model, seed)
    return dict(
        hidden_states=r.randn(1, c.in_channels, 4 * scale, 4, dtype=dt),
        timestep=r.t().to(dt),  # the pipeline fills t (0..1000) in the prompt dtype
        text_bth=r.randn(1, 8, c.text_in_dim, dtype=dt),
        text_lens=torch.tensor([8 - 2]),
    )


ERNIE_IMAGE = Family(
    model_class="ErnieImageTransformer2DModel",
    config=dict(
        hidden_size=32, num_attention_heads=2, num_layers=2, ffn_hidden_size=64, in_channels=128,
        out_channels=128, patch_size=1, text_in_dim=32, rope_theta=256, rope_axes_dim=(4, 6, 6), eps=1e-6,
        qk_layernorm=True,
    ),
    inputs=_ernie_inputs,
)


def _glm_image_inputs(model, seed, scale=1):
    from diffusers.models.transformers.transformer_glm_image import GlmImageKVCache

    r, dt, c = _ctx(model, seed)
    h, w, p = 4 * scale, 4, c.patch_size
    prior = r.randint(0, c.prior_vq_quantizer_codebook_size, 1, (h // p) * (w // p))
    return dict(
        hidden_states=r.randn(1, c.in_channels, h, w, dtype=dt),
        encoder_hidden_states=r.randn(1, 8, c.text_embed_dim, dtype=dt),
        prior_token_id=prior,
        prior_token_drop=torch.zeros_like(prior, dtype=torch.bool),
        timestep=r.t() - 1,  # float32
        target_size=torch.tensor([[h * 8.0, w * 8.0]], dtype=dt),
        crop_coords=torch.zeros(1, 2, dtype=dt),
        attention_kwargs=None,
        kv_caches=GlmImageKVCache(num_layers=c.num_layers),  # the pipeline always passes one
    )


GLM_IMAGE = Family(
    model_class="GlmImageTransformer2DModel",
    config=dict(
        _HEADS, patch_size=2, in_channels=16, out_channels=16, num_layers=2, text_embed_dim=32,
        time_embed_dim=32, condition_dim=16, prior_vq_quantizer_codebook_size=64,
    ),
    inputs=_glm_image_inputs,
)


def _ideogram4_inputs(model, seed, scale=1):
    from diffusers.models.transformers import transformer_ideogram4 as m

    r, dt, c = _ctx(model, seed)
    txt, gh, gw = 8, 4 * scale, 4
    n_img = gh * gw
    seq = txt + n_img
    hidden = torch.zeros(1, seq, c.in_channels, dtype=dt)
    hidden[:, txt:] = r.randn(1, n_img, c.in_channels, dtype=dt)
    feats = torch.zeros(1, seq, c.llm_features_dim, dtype=dt)
    feats[:, :txt] = r.randn(1, txt, c.llm_features_dim, dtype=dt)
    pos = torch.zeros(1, seq, 3, dtype=torch.long)
    tp = torch.arange(txt)
    pos[0, :txt] = torch.stack([tp, tp, tp], 1)
    hi = torch.arange(gh).view(-1, 1).expand(gh, gw).reshape(-1)
    wi = torch.arange(gw).view(1, -1).expand(gh, gw).reshape(-1)
    pos[0, txt:] = torch.stack([torch.zeros_like(hi), hi, wi], 1) + m.IMAGE_POSITION_OFFSET
    indicator = torch.full((1, seq), m.OUTPUT_IMAGE_INDICATOR, dtype=torch.long)
    indicator[:, :txt] = m.LLM_TOKEN_INDICATOR
    return dict(
        hidden_states=hidden,
        timestep=(1.0 - r.t() / 1000).to(dt),
        encoder_hidden_states=feats,
        position_ids=pos,
        segment_ids=torch.ones(1, seq, dtype=torch.long),
        indicator=indicator,
        attention_kwargs=None,
    )


IDEOGRAM4 = Family(
    model_class="Ideogram4Transformer2DModel",
    config=dict(
        _HEADS, in_channels=128, num_layers=2, intermediate_size=64, adaln_dim=16, llm_features_dim=32,
        rope_theta=5000000, mrope_section=(4, 2, 2), norm_eps=1e-5,
    ),
    inputs=_ideogram4_inputs,
)


def _nucleus_inputs(model, seed, scale=1):
    kw, r, dt, c, h, w = _packed(model, seed, scale, _XTC)
    return dict(kw, encoder_hidden_states_mask=_mask(8), img_shapes=[(1, h, w)], attention_kwargs=None)


def _init_nucleus_experts(model):
    """NucleusMoEImage's expert weights are `nn.Parameter(torch.empty(...))`, never initialized
    (a checkpoint fills them): garbage, often NaN, in a freshly built model."""
    for name, p in model.named_parameters():
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            p.normal_(0.0, 0.02)


NUCLEUS_MOE_IMAGE = Family(
    model_class="NucleusMoEImageTransformer2DModel",
    config=dict(
        _QWEN_LIKE,
        num_layers=5,  # leave_first_three_and_last_block_dense: blocks 0-2 and 4 dense, block 3 MoE
        num_key_value_heads=None, mlp_ratio=4.0, moe_enabled=True,
        dense_moe_strategy="leave_first_three_and_last_block_dense",
        num_experts=8,  # capacity = ceil(8.0 * tokens / 8): every expert may take every token
        moe_intermediate_dim=16, capacity_factors=8.0, use_sigmoid=False, route_scale=2.5, use_grouped_mm=False,
    ),
    inputs=_nucleus_inputs,
    init=_init_nucleus_experts,
)


# ======================================================================================
# Wan-derived video models (fp32 norms and scale_shift_table inside each block)

# ChronoEdit-14B: Wan 2.1 I2V with CLIP image tokens, temporal-reasoning rope skip.
CHRONO_EDIT = Family(
    model_class="ChronoEditTransformer3DModel",
    config=dict(_WAN_CONFIG, **_WAN_I2V, rope_temporal_skip_len=8),
    inputs=_wan_inputs,
)

# SkyReels-V2 T2V (1.3B/14B): Wan blocks of its own class.
SKYREELS_V2 = Family(
    model_class="SkyReelsV2Transformer3DModel",
    config=dict(_WAN_CONFIG, inject_sample_info=False, num_frame_per_block=1),
    inputs=_wan_inputs,
)


def _skyreels_df_inputs(model, seed, scale=1):
    kw = _wan_inputs(model, seed, scale)
    frames = kw["hidden_states"].shape[2]
    kw["timestep"] = _R(seed + 1).t(n=frames)[None]  # one timestep per latent frame: (B, F)
    kw["enable_diffusion_forcing"] = True
    return kw


SKYREELS_V2_DF = Family(
    model_class="SkyReelsV2Transformer3DModel",
    config=SKYREELS_V2.config,
    inputs=_skyreels_df_inputs,
    note="SkyReels-V2 diffusion forcing: per-frame timesteps",
)


def _wan_vace_inputs(model, seed, scale=1):
    kw = _wan_inputs(model, seed, scale)
    r, dt, c = _ctx(model, seed + 1)
    _, _, f, h, w = kw["hidden_states"].shape
    kw["control_hidden_states"] = r.randn(1, c.vace_in_channels, f, h, w, dtype=dt)
    kw["control_hidden_states_scale"] = torch.ones(len(c.vace_layers))
    return kw


# Wan 2.1 VACE: WanTransformerBlock plus WanVACETransformerBlock at vace_layers.
WAN_VACE = Family(
    model_class="WanVACETransformer3DModel",
    config=dict(_WAN_CONFIG, num_layers=4, vace_layers=[0, 2], vace_in_channels=96),
    inputs=_wan_vace_inputs,
)


def _wan_animate_inputs(model, seed, scale=1):
    f = 3  # latent frames; pose has f - 1; 5 face frames -> 2 motion frames + 1 pad = f
    kw, r, dt, c = _video(model, seed, scale, frames=f)
    h, w, size = 8 * scale, 8, c.motion_encoder_size
    kw["encoder_hidden_states_image"] = r.randn(1, 4, c.image_dim, dtype=dt)
    kw["pose_hidden_states"] = r.randn(1, c.latent_channels, f - 1, h, w, dtype=dt)
    kw["face_pixel_values"] = r.randn(1, 3, 5, size, size, dtype=dt)
    return kw


WAN_ANIMATE = Family(
    model_class="WanAnimateTransformer3DModel",
    config=dict(
        _WAN_LIKE, **_WAN_QK, in_channels=36, latent_channels=16, image_dim=32, rope_max_seq_len=1024,
        motion_encoder_channel_sizes={"4": 16, "8": 16, "16": 16}, motion_encoder_size=16, motion_style_dim=8,
        motion_dim=4, motion_encoder_dim=16, face_encoder_hidden_dim=16, face_encoder_num_heads=2,
        inject_face_latents_blocks=1,
    ),
    inputs=_wan_animate_inputs,
)


def _helios_inputs(model, seed, scale=1):
    kw, r, dt, c = _video(model, seed, scale)
    ch, f, h, w = c.in_channels, 2, 8 * scale, 8
    long_, mid, short = 4, 2, 1  # history_sizes, largest first, as the pipeline sorts them
    i_long, i_mid, i_short, i_hidden = torch.arange(long_ + mid + short + f).split([long_, mid, short, f])
    kw.update(
        indices_hidden_states=i_hidden[None],
        indices_latents_history_short=i_short[None],
        indices_latents_history_mid=i_mid[None],
        indices_latents_history_long=i_long[None],
    )
    for name, n in (("short", short), ("mid", mid), ("long", long_)):
        kw[f"latents_history_{name}"] = r.randn(1, ch, n, h, w, dtype=dt)
    return kw


HELIOS = Family(
    model_class="HeliosTransformer3DModel",
    config=dict(
        _WAN_LIKE, **_WAN_QK, rope_dim=(4, 6, 6), rope_theta=10000.0, guidance_cross_attn=True,
        zero_history_timestep=True, has_multi_term_memory_patch=True, is_amplify_history=False,
        history_scale_mode="per_head",
    ),
    inputs=_helios_inputs,
)


def _anyflow_frames(model, seed, scale, f):
    """AnyFlow's (B, F, C, H, W) latents of `f` frames and a (timestep, r_timestep) pair per
    frame. Returns (kwargs, r, dt, c)."""
    r, dt, c = _ctx(model, seed)
    t = r.t().to(dt)
    kw = dict(
        hidden_states=r.randn(1, f, c.in_channels, 8 * scale, 8, dtype=dt),
        timestep=t.expand(1, f).contiguous(),
        r_timestep=(t / 2).expand(1, f).contiguous(),
    )
    return kw, r, dt, c


def _anyflow_inputs(model, seed, scale=1):
    kw, r, dt, c = _anyflow_frames(model, seed, scale, 2)
    return dict(kw, encoder_hidden_states=r.randn(1, 8, c.text_dim, dtype=dt), attention_kwargs=None)


def _anyflow_far_inputs(model, seed, scale=1):
    part = [1, 2]
    # the prompt as _anyflow_inputs draws it; latents and timesteps of sum(part) frames from the same seed
    latents = _anyflow_frames(model, seed, scale, sum(part))[0]
    return dict(_anyflow_inputs(model, seed, scale), **latents, chunk_partition=part)


_ANYFLOW_CONFIG = dict(_WAN_LIKE, image_dim=None, rope_max_seq_len=1024, gate_value=0.25, deltatime_type="r")

ANYFLOW = Family(model_class="AnyFlowTransformer3DModel", config=_ANYFLOW_CONFIG, inputs=_anyflow_inputs)

ANYFLOW_FAR = Family(
    model_class="AnyFlowFARTransformer3DModel",
    config=dict(_ANYFLOW_CONFIG, compressed_patch_size=(1, 4, 4), full_chunk_limit=3, chunk_partition=(1, 2)),
    inputs=_anyflow_far_inputs,
)


def _joyimage_inputs(model, seed, scale=1):
    return _video(model, seed, scale, frames=1, t=_dt_t)[0]


_JOY_CONFIG = dict(
    patch_size=[1, 2, 2], in_channels=16, out_channels=None, hidden_size=32, num_attention_heads=2, text_dim=32,
    mlp_width_ratio=4.0, num_layers=2, rope_dim_list=[4, 6, 6], rope_type="rope", theta=256,
)

JOYIMAGE_EDIT = Family(model_class="JoyImageEditTransformer3DModel", config=_JOY_CONFIG, inputs=_joyimage_inputs)


def _joyimage_plus_inputs(model, seed, scale=1):
    r, dt, c = _ctx(model, seed)
    h, w = 4 * scale, 4  # tokens per side of the target and of the reference image
    # already patchified by the pipeline: (B, tokens, C, pt, ph, pw), target first, then the reference
    return dict(
        hidden_states=r.randn(1, 2 * h * w, c.in_channels, *c.patch_size, dtype=dt),
        timestep=r.t().to(dt),
        encoder_hidden_states=r.randn(1, 8, c.text_dim, dtype=dt),
        encoder_hidden_states_mask=_mask(8),
        shape_list=[[(1, h, w), (1, h, w)]],
    )


JOYIMAGE_EDIT_PLUS = Family(
    model_class="JoyImageEditPlusTransformer3DModel", config=_JOY_CONFIG, inputs=_joyimage_plus_inputs
)


# ======================================================================================
# other video models


def _ltx2_inputs(model, seed, scale=1):
    r, dt, c = _ctx(model, seed)
    f, h, w, txt, af = 2, 4 * scale, 4, 8, 5
    t = r.t()
    mask = _mask(txt, torch.bool)
    return dict(
        hidden_states=r.randn(1, f * h * w, c.in_channels, dtype=dt),
        audio_hidden_states=r.randn(1, af, c.audio_in_channels, dtype=dt),
        # both come from the pipeline's text connectors, caption_channels wide
        encoder_hidden_states=r.randn(1, txt, c.caption_channels, dtype=dt),
        audio_encoder_hidden_states=r.randn(1, txt, c.caption_channels, dtype=dt),
        timestep=t, sigma=t, encoder_attention_mask=mask, audio_encoder_attention_mask=mask,
        num_frames=f, height=h, width=w, fps=24.0, audio_num_frames=af, isolate_modalities=False,
        spatio_temporal_guidance_blocks=None, perturbation_mask=None,
        use_cross_timestep=True,  # the pipeline's default
        attention_kwargs=None,
    )


LTX2 = Family(
    model_class="LTX2VideoTransformer3DModel",
    config=dict(
        _LTX_LIKE, audio_in_channels=16, audio_out_channels=16, audio_num_attention_heads=2,
        audio_attention_head_dim=8, audio_cross_attention_dim=16,
    ),
    inputs=_ltx2_inputs,
)


def _hv15_inputs(model, seed, scale=1):
    r, dt, c = _ctx(model, seed)
    txt = 8 * scale  # the token refiner sees only text
    lat = c.out_channels
    latents = r.randn(1, lat, 2, 4 * scale, 4, dtype=dt)
    # t2v: zero condition latents and mask concatenated to the latents
    cond = torch.zeros(1, c.in_channels - lat, *latents.shape[2:], dtype=dt)
    return dict(
        hidden_states=torch.cat([latents, cond], 1),
        image_embeds=torch.zeros(1, 4, c.image_embed_dim, dtype=dt),
        timestep=r.t().to(dt),
        **_text(r, dt, txt, c.text_embed_dim),
        **_text(r, dt, 4, c.text_embed_2_dim, suffix="_2"),
        attention_kwargs=None,
    )


HUNYUAN_VIDEO15 = Family(
    model_class="HunyuanVideo15Transformer3DModel",
    config=dict(
        _HUNYUAN_LIKE, in_channels=65, out_channels=32, num_refiner_layers=2, patch_size=1, patch_size_t=1,
        text_embed_2_dim=32, image_embed_dim=32, rope_axes_dim=(4, 6, 6), target_size=640, task_type="i2v",
        use_meanflow=False,
    ),
    inputs=_hv15_inputs,
)


def _motif_inputs(model, seed, scale=1):
    r, dt, c = _ctx(model, seed)
    return dict(
        hidden_states=r.randn(1, c.in_channels, 3, 4 * scale, 4, dtype=dt),  # latents + condition + mask
        timestep=r.t(),
        **_text(r, dt, 8, c.text_embed_dim, pad=2),
        attention_kwargs=None,
    )


MOTIF_VIDEO = Family(
    model_class="MotifVideoTransformer3DModel",
    config=dict(
        _HUNYUAN_LIKE, in_channels=33, out_channels=16, num_single_layers=2, num_decoder_layers=0, patch_size=2,
        patch_size_t=1, norm_type="layer_norm", image_embed_dim=None, rope_axes_dim=(4, 6, 6),
        enable_text_cross_attention_dual=False, enable_text_cross_attention_single=False,
    ),
    inputs=_motif_inputs,
)


# Kandinsky 5 (T2V Lite): text encoder blocks, then visual decoder blocks; (B, T, H, W, C) latents.


def _kandinsky(model, seed, scale):
    """The start of a Kandinsky 5 / 6 call: (B, T, H, W, C) latents of a (2, 4 * scale, 4) grid (with
    the t2v zero conditioning latent and mask where `visual_cond`), 8 * scale prompt tokens (the
    text blocks see only text), the pooled prompt, `timestep`. Returns (kwargs, r, dt, c)."""
    r, dt, c = _ctx(model, seed)
    f, h, w = 2, 4 * scale, 4  # latent grid; tokens are (f, h/2, w/2)
    lat = r.randn(1, f, h, w, c.in_visual_dim, dtype=dt)
    if c.visual_cond:
        lat = torch.cat([lat, torch.zeros(1, f, h, w, c.in_visual_dim + 1, dtype=dt)], -1)
    return dict(
        hidden_states=lat,
        encoder_hidden_states=r.randn(1, 8 * scale, c.in_text_dim, dtype=dt),
        pooled_projections=r.randn(1, c.in_text_dim2, dtype=dt),
        timestep=r.t().to(dt),
    ), r, dt, c


def _k5_inputs(model, seed, scale=1):
    kw, r, dt, c = _kandinsky(model, seed, scale)
    _, f, h, w, _ = kw["hidden_states"].shape
    kw.update(
        visual_rope_pos=[torch.arange(f), torch.arange(h // 2), torch.arange(w // 2)],
        text_rope_pos=torch.arange(kw["encoder_hidden_states"].shape[1]),
        scale_factor=(1, 2, 2),
        sparse_params=None,
    )
    return kw


_KANDINSKY_LIKE = dict(
    in_visual_dim=16, out_visual_dim=16, time_dim=32, model_dim=32, ff_dim=64, num_visual_blocks=2, axes_dims=(4, 6, 6)
)
_KANDINSKY_T2V = dict(
    _KANDINSKY_LIKE, in_text_dim=32, in_text_dim2=32, patch_size=(1, 2, 2), num_text_blocks=2, visual_cond=True
)

KANDINSKY5 = Family(
    model_class="Kandinsky5Transformer3DModel",
    config=dict(_KANDINSKY_T2V, attention_type="regular"),
    inputs=_k5_inputs,
)


def _k6_inputs(model, seed, scale=1):
    kw, r, dt, c = _kandinsky(model, seed, scale)
    kw.update(audio_hidden_states=r.randn(1, 6, c.in_audio_dim, dtype=dt), encoder_attention_mask=None)
    return kw


KANDINSKY6 = Family(
    model_class="Kandinsky6Transformer3DModel",
    config=dict(
        _KANDINSKY_T2V, in_audio_dim=20, out_audio_dim=20, model_dim_a=32, time_dim_a=32, ff_dim_a=64,
        axes_dims_a=(16,),
    ),
    inputs=_k6_inputs,
)


def _k6sr_inputs(model, seed, scale=1):
    r, dt, c = _ctx(model, seed)
    h, w = 8 * scale, 8  # token grid divisible by NABLA's 8x8 blocks
    return dict(hidden_states=r.randn(1, 1, h, w, 2 * c.in_visual_dim + 1, dtype=dt), timestep=r.t())


KANDINSKY6_SR = Family(
    model_class="Kandinsky6SRTransformer3DModel",
    config=dict(
        _KANDINSKY_LIKE, patch_size=(1, 1, 1), scale_factor=(1.0, 2.0, 2.0), nabla_threshold=0.8,
        nabla_window=(3, 3, 3),
    ),
    inputs=_k6sr_inputs,
)


# ======================================================================================
# audio models and the UNet


def _stable_audio3_inputs(model, seed, scale=1):
    r, dt, c = _ctx(model, seed)
    return dict(
        hidden_states=r.randn(1, c.io_channels, 16 * scale, dtype=dt),
        timestep=r.t() / 1000,  # float32 in [0, 1]
        encoder_hidden_states=r.randn(1, 8, c.cond_token_dim, dtype=dt),
        global_hidden_states=r.randn(1, c.global_cond_dim, dtype=dt),
    )


STABLE_AUDIO3 = Family(
    model_class="StableAudio3DiTModel",
    config=dict(
        io_channels=32, patch_size=1, embed_dim=32, depth=2, num_heads=2, cond_token_dim=32, global_cond_dim=32,
        local_add_cond_dim=9, timestep_features_dim=32, ff_mult=4.0, num_memory_tokens=4,
        use_differential_attention=True,  # as the released SA3 Medium
    ),
    inputs=_stable_audio3_inputs,
)


def _longcat_audio_inputs(model, seed, scale=1):
    r, dt, c = _ctx(model, seed)
    n = 16 * scale
    kw = dict(
        hidden_states=r.randn(1, n, c.latent_dim, dtype=dt),
        **_text(r, dt, 8, c.dit_text_dim, dtype=torch.bool),
        timestep=r.t() / 1000,
        attention_mask=_mask(n, torch.bool),
    )
    if c.use_latent_condition:
        kw["latent_cond"] = r.randn(1, n, c.latent_dim, dtype=dt)
    return kw


LONGCAT_AUDIO_DIT = Family(
    model_class="LongCatAudioDiTTransformer",
    config=dict(
        dit_dim=32, dit_depth=2, dit_heads=2, dit_text_dim=32, latent_dim=16, text_conv=True,
        use_latent_condition=True, long_skip=True,
    ),
    inputs=_longcat_audio_inputs,
)


def _minimax_music3_inputs(model, seed, scale=1):
    r, dt, c = _ctx(model, seed)
    n = 16 * scale
    return dict(
        hidden_states=r.randn(1, c.in_channels, n, dtype=dt),
        timestep=_flow_t(r, dt),  # its Fourier projection multiplies by a weight in the model's dtype
        encoder_hidden_states=r.randn(1, n, c.condition_dim, dtype=dt),  # frame-aligned conditions
    )


MINIMAX_MUSIC3 = Family(
    model_class="MiniMaxMusic3Transformer1DModel",
    config=dict(
        _HEADS, in_channels=32, condition_dim=32, num_layers=2, ff_inner_dim=64, rotary_dim=8,
        fourier_embedding_dim=16,
    ),
    inputs=_minimax_music3_inputs,
)


def _sdxl_unet_inputs(model, seed, scale=1):
    r, dt, c = _ctx(model, seed)
    h, w = 8 * scale, 8
    pooled = c.projection_class_embeddings_input_dim - 6 * c.addition_time_embed_dim
    return dict(
        sample=r.randn(1, c.in_channels, h, w, dtype=dt),
        timestep=r.t(),
        encoder_hidden_states=r.randn(1, 8, c.cross_attention_dim, dtype=dt),
        timestep_cond=None,
        cross_attention_kwargs=None,
        added_cond_kwargs={
            "text_embeds": r.randn(1, pooled, dtype=dt),
            "time_ids": torch.tensor([[h * 8.0, w * 8.0, 0.0, 0.0, h * 8.0, w * 8.0]], dtype=dt),
        },
    )


# small UNets: 4 latent channels, one layer per block, 32-wide prompt
_UNET_LIKE = dict(
    sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, norm_num_groups=8, cross_attention_dim=32
)

# SDXL's UNet: BasicTransformerBlock inside Transformer2DModel at two resolutions, 1 and 2 layers deep.
SDXL_UNET = Family(
    model_class="UNet2DConditionModel",
    config=dict(
        _UNET_LIKE,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
        block_out_channels=(32, 32, 64), transformer_layers_per_block=(1, 1, 2), attention_head_dim=(2, 2, 4),
        use_linear_projection=True, addition_embed_type="text_time", addition_time_embed_dim=8,
        projection_class_embeddings_input_dim=32 + 6 * 8,
    ),
    inputs=_sdxl_unet_inputs,
)


# ======================================================================================
# MiniMax-H3 (joint video + audio), its video VAE, Wan-Animate 2, Cosmos 3, DreamLite


def _minimax_h3_inputs(model, seed, scale=1):
    r, dt, c = _ctx(model, seed)
    n_txt, n_aud, n_vid = 4 * scale, 6, 8 * scale  # the token refiner blocks see the text rows
    n = n_txt + n_aud + n_vid
    text = torch.arange(n_txt)
    audio = torch.arange(n_txt, n_txt + n_aud)
    video = torch.arange(n_txt + n_aud, n)
    tags = torch.empty(n, dtype=torch.long)  # 0 video, 1 text, 2 audio
    tags[text], tags[audio], tags[video] = 1, 2, 0
    t_idx = torch.zeros(n, dtype=torch.long)
    t_idx[audio] = 1  # audio rows follow their own schedule
    pos = torch.zeros(n, 3)
    pos[:, 0] = torch.arange(n, dtype=torch.float32)
    pos[video, 1] = (torch.arange(n_vid) // 2).float()
    pos[video, 2] = (torch.arange(n_vid) % 2).float()
    p = c.patch_size
    return dict(
        hidden_states=r.randn(1, n_vid, c.in_channels * p[0] * p[1] * p[2], dtype=dt),
        audio_hidden_states=r.randn(1, n_aud, c.audio_in_channels, dtype=dt),
        encoder_hidden_states=r.randn(1, n_txt, c.text_dim, dtype=dt),
        timestep=torch.tensor([0.7, 0.3]),
        timestep_indices=t_idx, token_tags=tags, position_ids=pos,
        video_indices=video, audio_indices=audio, text_indices=text,
        attention_kwargs=None,
    )


MINIMAX_H3 = Family(
    model_class="MiniMaxH3Transformer3DModel",
    config=dict(
        num_attention_heads=2, attention_head_dim=32,
        hidden_size=48,  # != heads * head_dim, as in the released checkpoint
        num_layers=2, num_refiner_layers=2, ffn_dim=64, in_channels=24, audio_in_channels=32, patch_size=(1, 2, 2),
        text_dim=32, freq_dim=32, time_embed_hidden_dim=48, time_embed_dim=32, rope_freq_dim=4,
    ),
    inputs=_minimax_h3_inputs,
)


def _wan_animate2_inputs(model, seed, scale=1):
    """A denoising step (`kv_cache_mode="cached"`). Its cache comes from the reference pass
    (`"extract"`), which the pipeline runs once per segment: this runs it here, on the model."""
    from diffusers.models.transformers.transformer_wan_animate_2 import WanAnimate2KVCache

    r, dt, c = _ctx(model, seed)
    lat, cond = c.out_dim, c.in_dim - c.out_dim
    h, w, ref_f, gen_f = 4 * scale, 4, 2, 3
    txt = [r.randn(8, c.text_dim, dtype=dt)]
    clip = r.randn(1, 4, 1280, dtype=dt)  # MLPProj takes CLIP's 1280-wide tokens
    grid = torch.tensor([[ref_f, h // 2, w // 2]], dtype=torch.long)
    cache = WanAnimate2KVCache(c.num_layers)

    def call(frames, timestep, mode):
        """One call's kwargs for `frames` latent frames; draws latents, `timestep()`, condition latents."""
        return dict(
            hidden_states=[r.randn(lat, frames, h, w, dtype=dt)],
            timestep=timestep(),
            encoder_hidden_states=txt,
            condition_latents=[r.randn(cond, frames, h, w, dtype=dt)],
            encoder_hidden_states_image=clip, kv_cache=cache, kv_cache_mode=mode,
            seq_len=frames * (h // 2) * (w // 2),
        )

    with torch.no_grad():
        model(**call(ref_f, lambda: torch.tensor([1.0], dtype=dt), "extract"), offset_grid_sizes=grid)
    step = call(gen_f, lambda: r.t().to(dt), "cached")
    return dict(step, reference_grid_sizes=grid, origin_len=5, origin_area=[h * 8, w * 8])


WAN_ANIMATE2 = Family(
    model_class="WanAnimate2Transformer3DModel",
    config=dict(
        patch_size=(1, 2, 2), text_len=16, in_dim=36, dim=32, ffn_dim=64, freq_dim=32, text_dim=32, out_dim=16,
        num_heads=2, num_layers=2, cross_attn_norm=True, eps=1e-6, use_img_emb=True,
    ),
    inputs=_wan_animate2_inputs,
    note="inputs() runs the reference (extract) pass to fill the KV cache the step reads",
)


def _minimax_h3_vae_inputs(model, seed, scale=1):
    r, dt = _R(seed), _dt(model)  # model.dtype is bf16; its encoder is kept in fp32
    return dict(sample=r.randn(1, 3, 22, 8 * scale, 8, dtype=dt))


# MiniMax-H3's video VAE: a ViT decoder of MiniMaxH3VideoTransformerBlock; forward = encode + decode.
MINIMAX_H3_VAE = Family(
    model_class="AutoencoderKLMiniMaxH3",
    config=dict(
        in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(8, 16), layers_per_block=1,
        spatial_downsample_factors=(2, 2), temporal_downsample_factors=(2, 2), norm_num_groups=8,
        decoder_num_layers=2, decoder_num_attention_heads=2, decoder_attention_head_dim=16,
        decoder_num_register_tokens=2, decoder_ffn_mult=2, clip_length=17, token_drop=3,
        latents_mean=(0.0,) * 4, latents_std=(1.0,) * 4,
    ),
    inputs=_minimax_h3_vae_inputs,
    note="encoder fp32; decoder blocks mix fp32 norms/scales with bf16 weights",
)


def _cosmos3_inputs(model, seed, scale=1):
    """One unbatched packed sequence: text tokens (the "understanding" part), then one video's
    patch tokens (the generated part)."""
    r, dt, c = _ctx(model, seed)
    txt, f, h, w = 8, 1, 4 * scale, 4
    p = c.latent_patch_size
    n_vis = f * (h // p) * (w // p)
    seq = txt + n_vis
    vis = torch.arange(txt, seq)
    pos = torch.zeros(3, seq, dtype=torch.long)
    pos[:, :txt] = torch.arange(txt)
    pos[0, txt:] = txt
    pos[1, txt:] = txt + torch.arange(h // p).repeat_interleave(w // p)
    pos[2, txt:] = txt + torch.arange(w // p).repeat(h // p)
    return dict(
        input_ids=r.randint(0, c.vocab_size, txt),
        text_indexes=torch.arange(txt),
        position_ids=pos,
        und_len=txt,
        sequence_length=seq,
        vision_tokens=[r.randn(1, c.latent_channel, f, h, w, dtype=dt)],
        vision_token_shapes=[(f, h // p, w // p)],
        vision_sequence_indexes=vis,
        vision_mse_loss_indexes=vis,
        vision_timesteps=torch.full((n_vis,), float(r.t().item())),
        vision_noisy_frame_indexes=[torch.tensor([0])],
    )


COSMOS3 = Family(
    model_class="Cosmos3OmniTransformer",
    config=dict(
        head_dim=16, hidden_size=32, intermediate_size=64, latent_channel=16, latent_patch_size=2,
        num_attention_heads=2, num_hidden_layers=2, num_key_value_heads=1, patch_latent_dim=16 * 2 * 2,
        qk_norm_for_text=True, rms_norm_eps=1e-6, rope_axes_dim=[2, 3, 3], vocab_size=64,
    ),
    inputs=_cosmos3_inputs,
)


def _dreamlite_inputs(model, seed, scale=1):
    r, dt, c = _ctx(model, seed)
    return dict(
        sample=r.randn(1, c.in_channels, 8 * scale, 8, dtype=dt),
        timestep=r.t(),
        encoder_hidden_states=r.randn(1, 8, c.cross_attention_dim, dtype=dt),
    )


# DreamLite's UNet: cross-attention-only blocks at high resolution, full blocks deeper.
DREAMLITE_UNET = Family(
    model_class="DreamLiteUNetModel",
    config=dict(_UNET_LIKE, block_out_channels=(16, 32, 64), attention_head_dim=8, transformer_layers_per_block=1),
    inputs=_dreamlite_inputs,
)


# ======================================================================================
# RFD4-Proteina (protein structure generation). Its released feature lists read annotations that
# only the external `rfd4-proteina-prep` package produces (hbond, pistack, ...); these rows keep
# the features the model computes from its own inputs. The input projections narrow; the trunk
# layers and pair updates are the same classes, called the same way.


def _protein(n):
    """`n` unpadded residues of token type 0, none in-context, every one with a local latent."""
    return dict(
        padding_mask=torch.ones(1, n, dtype=torch.bool),
        token_type=torch.zeros(1, n, dtype=torch.long),
        conditioning={
            "is_in_context_conditioning": torch.zeros(1, n, dtype=torch.bool),
            "supports_local_latent": torch.ones(1, n, dtype=torch.bool),
        },
    )


def _rfd4_inputs(model, seed, scale=1):
    r, dt, c = _ctx(model, seed)
    n = 12 * scale  # tokens (residues)
    return dict(
        bb_ca=r.randn(1, n, 3, dtype=dt),
        local_latents=r.randn(1, n, c.latent_dim, dtype=dt),
        bb_ca_time=_flow_t(r, dt),
        local_latents_time=_flow_t(r, dt),
        atom37_mask=torch.ones(1, n, 37, dtype=torch.bool),
        **_protein(n),
        recycle_depth=0,
        attention_kwargs=None,
    )


RFD4_PROTEINA = Family(
    model_class="RFD4ProteinaTransformer",
    config=dict(
        nlayers=3,  # pair updates at range(0, nlayers - 1, 2): one, after trunk layer 0
        token_dim=32, nheads=2, dim_cond=32, pair_repr_dim=16, latent_dim=8, token_type_emb_dim=8, cath_emb_dim=8,
        t_emb_dim=16, seq_sep_dim=8, xt_pair_dist_dim=8, update_pair_repr_every_n=2, tri_mult_c=16,
        feats_seq=("xt_bb_ca", "xt_local_latents", "token_type"),
        feats_cond_seq=("time_emb_bb_ca", "time_emb_local_latents", "recycle_remaining"),
        feats_pair_repr=("xt_bb_ca_pair_dists",),
        feats_pair_cond=("time_emb_bb_ca", "time_emb_local_latents"),
    ),
    inputs=_rfd4_inputs,
    note="feature lists reduced to what the model computes itself",
)


def _rfd4_ae_inputs(model, seed, scale=1):
    r, dt, c = _ctx(model, seed)
    n = 12 * scale
    return dict(z_latent=r.randn(1, n, c.latent_dim, dtype=dt), ca_coors_nm=r.randn(1, n, 3, dtype=dt), **_protein(n))


RFD4_PROTEINA_AE = Family(
    model_class="RFD4ProteinaAutoencoder",
    config=dict(
        atom37_mask=[[True] * 37] * 147, allowed_residue_types=[[True] * 147] * 7, latent_dim=8,
        n_residue_types=147, num_token_types=7, nlayers=2, token_dim=32, nheads=2, dim_cond=16, pair_repr_dim=16,
        token_type_emb_dim=8, decoder_feats_seq=("ca_coors_nm", "z_latent_seq", "token_type"),
    ),
    inputs=_rfd4_ae_inputs,
    note="forward = decode; decoder feature list without cond_residue_type",
)


def _sana_wm_refiner_inputs(model, seed, scale=1):
    """One window of the refiner without its streaming KV cache (the pipeline's sliding window
    injects and captures K/V through a cache object and a mode string)."""
    r, dt, c = _ctx(model, seed)
    f, h, w, txt = 2, 4 * scale, 4, 8
    n = f * h * w
    rope = model.build_rotary_emb_for_absolute_positions(
        batch_size=1, frame_positions=list(range(f)), height=h, width=w, device=torch.device("cpu"), fps=24.0
    )
    return dict(
        hidden_states=r.randn(1, n, c.in_channels, dtype=dt),
        **_text(r, dt, txt, c.caption_channels),
        timestep=torch.full((1, n), 0.5 * c.timestep_scale_multiplier),
        video_rotary_emb=rope,
        kv_cache=None,
        kv_cache_mode=None,
    )


SANA_WM_REFINER = Family(
    model_class="SanaWMLTX2RefinerTransformer3DModel",
    config=dict(LTX2.config),
    inputs=_sana_wm_refiner_inputs,
    note="no KV cache",
)


def _sana_wm_inputs(model, seed, scale=1):
    """A camera-controlled step: identity camera poses through the pipeline's own `prepare_camera`
    (VAE strides 8 x 32 x 32), per-frame timesteps, Sana's `(B, 1, L, D)` caption layout."""
    import numpy as np

    from diffusers.pipelines.sana_wm.cam_utils import prepare_camera

    r, dt, c = _ctx(model, seed)
    f, h, w, txt = 2, 4 * scale, 4, 8
    frames = (f - 1) * 8 + 1
    c2w = np.tile(np.eye(4, dtype=np.float32), (frames, 1, 1))
    intr = np.tile(np.array([w * 32, w * 32, w * 16, h * 16], dtype=np.float32), (frames, 1))
    cam = prepare_camera(c2w, intr, target_size=(h * 32, w * 32), vae_stride=(8, 32, 32))
    t = r.t()
    return dict(
        hidden_states=r.randn(1, c.in_channels, f, h, w, dtype=dt),
        timestep=torch.stack([torch.zeros(()), t[0]]).view(1, 1, f),  # first latent frame is the clean anchor
        encoder_hidden_states=r.randn(1, 1, txt, c.caption_channels, dtype=dt),
        mask=_mask(txt),
        data_info={"img_hw": torch.tensor([[h * 32.0, w * 32.0]])},
        # cast to the model's dtype as the pipeline does (bf16 is refused on the CPU: NOT_COVERED)
        camera_conditions=cam["raymap"][None].to(dt),
        chunk_plucker=cam["chunk_plucker"][None].to(dt),
    )


SANA_WM = Family(
    model_class="SanaWMTransformer3DModel",
    config=dict(
        in_channels=16,
        num_layers=4,  # softmax attention every 4th block, linear attention in the others
        hidden_size=64, num_attention_heads=2, softmax_every_n=4, linear_head_dim=32, chunk_plucker_channels=48,
        chunk_plucker_post_attn_blocks=4, caption_channels=32, image_size=128,
    ),
    inputs=_sana_wm_inputs,
)


# ======================================================================================

FAMILIES: dict[str, Family] = {
    "flux": FLUX,
    "wan2.1": WAN,
    "qwen-image": QWEN_IMAGE,
    "sd3.5-medium": SD35_MEDIUM,
    "ltx-video": LTX_VIDEO,
    "hunyuan-video": HUNYUAN_VIDEO,
    "wan2.1-i2v": WAN_I2V,
    "sd3-medium": SD3_MEDIUM,
    "chroma": CHROMA,
    "flux2": FLUX2,
    "flux3": FLUX3,
    "longcat-image": LONGCAT_IMAGE,
    "ovis-image": OVIS_IMAGE,
    "bria-fibo": BRIA_FIBO,
    "bria-fibo2": BRIA_FIBO2,
    "hunyuan-image2.1": HUNYUAN_IMAGE,
    "hunyuan-image2.1-distilled": HUNYUAN_IMAGE_DISTILLED,
    "qwen-image2.1": QWEN_IMAGE21,
    "krea2": KREA2,
    "z-image": Z_IMAGE,
    "ernie-image": ERNIE_IMAGE,
    "glm-image": GLM_IMAGE,
    "ideogram4": IDEOGRAM4,
    "nucleus-moe-image": NUCLEUS_MOE_IMAGE,
    "chronoedit": CHRONO_EDIT,
    "skyreels-v2": SKYREELS_V2,
    "skyreels-v2-df": SKYREELS_V2_DF,
    "wan2.1-vace": WAN_VACE,
    "wan2.2-animate": WAN_ANIMATE,
    "helios": HELIOS,
    "anyflow": ANYFLOW,
    "anyflow-far": ANYFLOW_FAR,
    "joyimage-edit": JOYIMAGE_EDIT,
    "joyimage-edit-plus": JOYIMAGE_EDIT_PLUS,
    "ltx2": LTX2,
    "hunyuan-video1.5": HUNYUAN_VIDEO15,
    "motif-video": MOTIF_VIDEO,
    "kandinsky5": KANDINSKY5,
    "kandinsky6": KANDINSKY6,
    "kandinsky6-sr": KANDINSKY6_SR,
    "stable-audio3": STABLE_AUDIO3,
    "longcat-audio-dit": LONGCAT_AUDIO_DIT,
    "minimax-music3": MINIMAX_MUSIC3,
    "sdxl-unet": SDXL_UNET,
    "minimax-h3": MINIMAX_H3,
    "minimax-h3-vae": MINIMAX_H3_VAE,
    "cosmos3": COSMOS3,
    "dreamlite-unet": DREAMLITE_UNET,
    "rfd4-proteina": RFD4_PROTEINA,
    "rfd4-proteina-ae": RFD4_PROTEINA_AE,
    "sana-wm-refiner": SANA_WM_REFINER,
}

CI = [name for name, fam in FAMILIES.items() if fam.ci]

# Rows written out but left out of the sweep: each one's class is in NOT_COVERED with the reason.
# They are kept for a GPU run (`check_configs.py --extra`), where the reason may not hold.
EXTRA_FAMILIES: dict[str, Family] = {
    "wan-animate2": WAN_ANIMATE2,
    "sana-wm": SANA_WM,
}

# class name (of repeated_block_models()) -> why no FAMILIES row covers it
NOT_COVERED: dict[str, str] = {
    "WanAnimate2Transformer3DModel": (
        "too slow on the CPU: the cached denoising step builds its flex-attention BlockMask with "
        "create_block_mask(_compile=True), an Inductor compile per shape: 12.5 s and 2.6 s for the two sizes "
        "with a cold Inductor cache, 3.0 s and 1.0 s warm; its blocks also take a per-layer KV cache object "
        "and a mode string; row 'wan-animate2' in EXTRA_FAMILIES"
    ),
    "SanaWMTransformer3DModel": (
        "no bf16 on the CPU: its camera unprojection (create_grid) refuses bfloat16 on the CPU, and with "
        "float32 camera tensors the block's UCPE einsum mixes dtypes; the row runs in float32 on the CPU "
        "(checked) and is meant for bf16 on a GPU; row 'sana-wm' in EXTRA_FAMILIES"
    ),
}


def all_families():
    """FAMILIES and EXTRA_FAMILIES together."""
    return {**FAMILIES, **EXTRA_FAMILIES}
