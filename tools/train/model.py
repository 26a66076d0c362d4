"""The Llama-architecture model that tools/train trains, written to compute exactly what a
llama GGUF means: RMSNorm (eps 1e-5), rotary embeddings on adjacent pairs (ggml's "normal"
rope, so Q and K export without any permutation), grouped-query attention, SwiGLU feed-forward,
a final RMSNorm and an output projection tied to the token embeddings."""
import math
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    vocab: int = 2048
    dim: int = 256
    layers: int = 6
    heads: int = 8
    kv_heads: int = 4
    ffn: int = 768
    ctx: int = 512
    rope_base: float = 10000.0
    eps: float = 1e-5

    def to_dict(self):
        return asdict(self)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_tables(cfg, n, device=None, dtype=torch.float32):
    hd = cfg.dim // cfg.heads
    inv = cfg.rope_base ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = torch.arange(n, dtype=torch.float64)[:, None] * inv[None, :]
    return ang.cos().to(dtype), ang.sin().to(dtype)


def apply_rope(x, cos, sin):
    # x: [b, h, t, hd]; rotate (x[2i], x[2i+1]) by angle pos * base^(-2i/hd).
    x0, x1 = x[..., 0::2], x[..., 1::2]
    c, s = cos[: x.shape[2]], sin[: x.shape[2]]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        hd = cfg.dim // cfg.heads
        self.cfg = cfg
        self.attn_norm = nn.Parameter(torch.ones(cfg.dim))
        self.wq = nn.Linear(cfg.dim, cfg.heads * hd, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.kv_heads * hd, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.kv_heads * hd, bias=False)
        self.wo = nn.Linear(cfg.heads * hd, cfg.dim, bias=False)
        self.ffn_norm = nn.Parameter(torch.ones(cfg.dim))
        self.w_gate = nn.Linear(cfg.dim, cfg.ffn, bias=False)
        self.w_up = nn.Linear(cfg.dim, cfg.ffn, bias=False)
        self.w_down = nn.Linear(cfg.ffn, cfg.dim, bias=False)

    def forward(self, x, cos, sin, mask):
        cfg = self.cfg
        b, t, _ = x.shape
        hd = cfg.dim // cfg.heads
        h = rms_norm(x, self.attn_norm, cfg.eps)
        q = self.wq(h).view(b, t, cfg.heads, hd).transpose(1, 2)
        k = self.wk(h).view(b, t, cfg.kv_heads, hd).transpose(1, 2)
        v = self.wv(h).view(b, t, cfg.kv_heads, hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = cfg.heads // cfg.kv_heads
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        att = att.masked_fill(mask[:t, :t], float("-inf")).softmax(-1)
        x = x + self.wo((att @ v).transpose(1, 2).reshape(b, t, cfg.heads * hd))
        h = rms_norm(x, self.ffn_norm, cfg.eps)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class Llama(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.layers)])
        self.out_norm = nn.Parameter(torch.ones(cfg.dim))
        cos, sin = rope_tables(cfg, cfg.ctx)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.register_buffer("mask", torch.triu(torch.ones(cfg.ctx, cfg.ctx, dtype=torch.bool), 1),
                             persistent=False)
        self.apply(self._init)
        # Scaled init of the residual projections (GPT-2 style) keeps deep stacks stable.
        for blk in self.blocks:
            for lin in (blk.wo, blk.w_down):
                nn.init.normal_(lin.weight, std=0.02 / math.sqrt(2 * cfg.layers))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, ids):
        x = self.embed(ids)
        for blk in self.blocks:
            x = blk(x, self.cos, self.sin, self.mask)
        x = rms_norm(x, self.out_norm, self.cfg.eps)
        return x @ self.embed.weight.t()  # tied output projection

    def num_params(self):
        return sum(p.numel() for p in self.parameters())
