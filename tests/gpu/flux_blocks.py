"""FLUX-shaped transformer blocks, the project's own code, for kiln's GPU proof.

Shapes follow FLUX.1: hidden 3072, 24 heads of 128, MLP ratio 4, 4096 image + 512 text
tokens, bf16. Weights are random: kiln's artifacts are weight-free, so any weights do.

Both blocks take the rotary embedding as two float32 tensors (cos, sin) of shape
(tokens, head_dim), interleaved pairs as in FLUX, and the conditioning vector `temb`.
"""
import torch
import torch.nn.functional as F
from torch import nn

HIDDEN = 3072
HEADS = 24
HEAD_DIM = 128
MLP_RATIO = 4
IMG_TOKENS = 4096
TXT_TOKENS = 512


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x * self.weight.float()).to(dtype)


def apply_rope(x, cos, sin):
    # x: (B, H, L, D); cos/sin: (L, D) float32, pairs interleaved (x0, x1) -> (-x1, x0).
    xf = x.float()
    pairs = xf.unflatten(-1, (-1, 2))
    rotated = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    return (xf * cos + rotated * sin).to(x.dtype)


def layer_norm(x):
    return F.layer_norm(x, (x.shape[-1],), eps=1e-6)


class QKNorm(nn.Module):
    """Holds the per-head RMS norms of queries and keys (called by the blocks)."""

    def __init__(self):
        super().__init__()
        self.query_norm = RMSNorm(HEAD_DIM)
        self.key_norm = RMSNorm(HEAD_DIM)


def split_heads(t):
    b, l, _ = t.shape
    return t.view(b, l, HEADS, HEAD_DIM).transpose(1, 2)


def merge_heads(t):
    b, h, l, d = t.shape
    return t.transpose(1, 2).reshape(b, l, h * d)


class Modulation(nn.Module):
    def __init__(self, dim: int, n: int):
        super().__init__()
        self.n = n
        self.lin = nn.Linear(dim, n * dim)

    def forward(self, vec):
        return self.lin(F.silu(vec))[:, None, :].chunk(self.n, dim=-1)


class StreamWeights(nn.Module):
    """One stream's weights in the double-stream block (image or text)."""

    def __init__(self):
        super().__init__()
        mlp = HIDDEN * MLP_RATIO
        self.mod = Modulation(HIDDEN, 6)
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
        self.norm = QKNorm()
        self.proj = nn.Linear(HIDDEN, HIDDEN)
        self.mlp_in = nn.Linear(HIDDEN, mlp)
        self.mlp_out = nn.Linear(mlp, HIDDEN)

    def pre_attention(self, x, mods):
        shift, scale = mods[0], mods[1]
        x = layer_norm(x) * (1 + scale) + shift
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = split_heads(q), split_heads(k), split_heads(v)
        return self.norm.query_norm(q), self.norm.key_norm(k), v

    def post_attention(self, x, attn, mods):
        _, _, gate1, shift2, scale2, gate2 = mods
        x = x + gate1 * self.proj(attn)
        h = layer_norm(x) * (1 + scale2) + shift2
        return x + gate2 * self.mlp_out(F.gelu(self.mlp_in(h), approximate="tanh"))


class FluxDoubleStreamBlock(nn.Module):
    """Image and text streams with their own weights, joint attention over both."""

    def __init__(self):
        super().__init__()
        self.img = StreamWeights()
        self.txt = StreamWeights()

    def forward(self, img, txt, temb, cos, sin):
        img_mods = self.img.mod(temb)
        txt_mods = self.txt.mod(temb)
        iq, ik, iv = self.img.pre_attention(img, img_mods)
        tq, tk, tv = self.txt.pre_attention(txt, txt_mods)
        q = apply_rope(torch.cat((tq, iq), dim=2), cos, sin)
        k = apply_rope(torch.cat((tk, ik), dim=2), cos, sin)
        v = torch.cat((tv, iv), dim=2)
        attn = merge_heads(F.scaled_dot_product_attention(q, k, v))
        n_txt = txt.shape[1]
        txt_attn, img_attn = attn[:, :n_txt], attn[:, n_txt:]
        img = self.img.post_attention(img, img_attn, img_mods)
        txt = self.txt.post_attention(txt, txt_attn, txt_mods)
        return img, txt


class FluxSingleStreamBlock(nn.Module):
    """One stream over the concatenated text+image tokens; attention and MLP in parallel."""

    def __init__(self):
        super().__init__()
        mlp = HIDDEN * MLP_RATIO
        self.mod = Modulation(HIDDEN, 3)
        self.linear1 = nn.Linear(HIDDEN, 3 * HIDDEN + mlp)
        self.norm = QKNorm()
        self.linear2 = nn.Linear(HIDDEN + mlp, HIDDEN)

    def forward(self, x, temb, cos, sin):
        shift, scale, gate = self.mod(temb)
        h = layer_norm(x) * (1 + scale) + shift
        qkv, mlp = torch.split(self.linear1(h), [3 * HIDDEN, HIDDEN * MLP_RATIO], dim=-1)
        q, k, v = qkv.chunk(3, dim=-1)
        q = self.norm.query_norm(split_heads(q))
        k = self.norm.key_norm(split_heads(k))
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        attn = merge_heads(F.scaled_dot_product_attention(q, k, split_heads(v)))
        return x + gate * self.linear2(torch.cat((attn, F.gelu(mlp, approximate="tanh")), dim=-1))


def rope_tables(tokens: int, device, theta: float = 10000.0):
    freqs = 1.0 / theta ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32, device=device) / HEAD_DIM)
    angles = torch.outer(torch.arange(tokens, dtype=torch.float32, device=device), freqs)
    cos = angles.cos().repeat_interleave(2, dim=-1)
    sin = angles.sin().repeat_interleave(2, dim=-1)
    return cos.contiguous(), sin.contiguous()


def example_inputs(block: str, device="cuda", dtype=torch.bfloat16, seed: int = 0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    tokens = IMG_TOKENS + TXT_TOKENS
    cos, sin = rope_tables(tokens, device)
    temb = torch.randn(1, HIDDEN, generator=g).to(device, dtype)
    if block == "double":
        img = torch.randn(1, IMG_TOKENS, HIDDEN, generator=g).to(device, dtype)
        txt = torch.randn(1, TXT_TOKENS, HIDDEN, generator=g).to(device, dtype)
        return (img, txt, temb, cos, sin)
    x = torch.randn(1, tokens, HIDDEN, generator=g).to(device, dtype)
    return (x, temb, cos, sin)


def make_block(block: str, device="cuda", dtype=torch.bfloat16, seed: int = 0):
    torch.manual_seed(seed)
    m = FluxDoubleStreamBlock() if block == "double" else FluxSingleStreamBlock()
    return m.to(device, dtype).eval()
