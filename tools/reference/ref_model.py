"""A plain, obviously correct transformer forward pass in float64 numpy: kvserve's reference.

In the spirit of llama2.c's run.c: one function per step of the math, a shape comment on every
array, no cleverness. Weights are dequantized once (tools/reference/gguf_ref.py) and kept in
float64; every product, the softmax and the norms run in float64.

Supported `general.architecture` values and what they change (llama.cpp's conventions):
  llama : RoPE on ADJACENT pairs (x[2i], x[2i+1]) ("normal" rope). The HF->GGUF converter
          permutes the rows of attn_q / attn_k so that this pairing is right for the file.
  qwen2 : NEOX rope, pairs (x[i], x[i + n_rot/2]); biases on q, k, v projections.
  qwen3 : NEOX rope; per-head RMSNorm of q and k (attn_q_norm / attn_k_norm, weight [head_dim])
          applied before rope; head_dim from `{arch}.attention.key_length`.

Per layer:  h = x + Wo · Attn(RoPE(Wq·n), RoPE(Wk·n), Wv·n),  n = RMSNorm(x) * attn_norm
            x' = h + Wdown · (silu(Wgate·m) * (Wup·m)),       m = RMSNorm(h) * ffn_norm
Logits = Woutput · (RMSNorm(x_L) * output_norm); output.weight absent -> token_embd (tied).

CLI:
  /usr/bin/python3 tools/reference/ref_model.py --model M.gguf --ids 1,2,3 [--out logits.npy]
                                                [--greedy N]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_ref import GGUFFile  # noqa: E402

# Rope pairing per architecture: "adjacent" = (2i, 2i+1), "neox" = (i, i + n_rot/2).
ARCHITECTURES = {
    "llama": {"rope": "adjacent", "qkv_bias": False, "qk_norm": False},
    "qwen2": {"rope": "neox", "qkv_bias": True, "qk_norm": False},
    "qwen3": {"rope": "neox", "qkv_bias": False, "qk_norm": True},
}


@dataclass
class Config:
    arch: str
    n_layers: int
    dim: int            # embedding_length
    ffn_dim: int        # feed_forward_length
    n_heads: int
    n_kv_heads: int
    head_dim: int       # key_length (= value_length here)
    n_rot: int          # rope.dimension_count: leading dims of each head that rope rotates
    vocab_size: int
    norm_eps: float
    rope_base: float
    rope_style: str     # "adjacent" | "neox"
    rope_scaling: str = "none"  # "none" | "linear" | "yarn"
    rope_factor: float = 1.0
    rope_orig_ctx: int = 0
    yarn_beta_fast: float = 32.0
    yarn_beta_slow: float = 1.0

    @staticmethod
    def from_gguf(f: GGUFFile) -> "Config":
        arch = f.get("general.architecture")
        if arch not in ARCHITECTURES:
            raise ValueError(f"architecture {arch!r} not supported (want one of "
                             f"{sorted(ARCHITECTURES)})")

        def key(name, default=None):
            v = f.get(f"{arch}.{name}", default)
            if v is None:
                raise ValueError(f"missing metadata key {arch}.{name}")
            return v

        dim = int(key("embedding_length"))
        n_heads = int(key("attention.head_count"))
        n_kv_heads = int(key("attention.head_count_kv", n_heads))
        head_dim = int(key("attention.key_length", dim // n_heads))
        value_dim = int(key("attention.value_length", head_dim))
        if value_dim != head_dim:
            raise ValueError("key_length != value_length is not supported")
        if n_heads % n_kv_heads:
            raise ValueError(f"head_count {n_heads} not a multiple of head_count_kv {n_kv_heads}")
        emb = f.tensors["token_embd.weight"]
        scaling = f.get(f"{arch}.rope.scaling.type", "none")
        factor = float(f.get(f"{arch}.rope.scaling.factor", 1.0) or 1.0)
        if scaling == "none" and f.get(f"{arch}.rope.scale_linear"):  # older files
            scaling, factor = "linear", float(f.get(f"{arch}.rope.scale_linear"))
        if scaling != "none" and factor == 1.0:
            scaling = "none"
        if scaling not in ("none", "linear", "yarn"):
            raise ValueError(f"rope scaling type {scaling!r} not supported")
        return Config(
            arch=arch,
            n_layers=int(key("block_count")),
            dim=dim,
            ffn_dim=int(key("feed_forward_length")),
            n_heads=n_heads,
            n_kv_heads=n_kv_heads,
            head_dim=head_dim,
            n_rot=int(key("rope.dimension_count", head_dim)),
            vocab_size=int(emb.dims[1]),
            norm_eps=float(key("attention.layer_norm_rms_epsilon")),
            rope_base=float(key("rope.freq_base", 10000.0)),
            rope_style=ARCHITECTURES[arch]["rope"],
            rope_scaling=scaling,
            rope_factor=factor,
            rope_orig_ctx=int(f.get(f"{arch}.rope.scaling.original_context_length",
                                    f.get(f"{arch}.context_length", 0)) or 0),
        )


class Weights:
    """All tensors dequantized to float64, in numpy (row-major) shapes."""

    def __init__(self, f: GGUFFile, c: Config):
        def w(name, shape=None, optional=False):
            if name not in f.tensors:
                if optional:
                    return None
                raise ValueError(f"missing tensor {name}")
            a = f.tensor(name).astype(np.float64)
            if shape is not None and a.shape != shape:
                raise ValueError(f"tensor {name}: shape {a.shape}, expected {shape}")
            return a

        q_dim, kv_dim = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
        arch = ARCHITECTURES[c.arch]
        self.token_embd = w("token_embd.weight", (c.vocab_size, c.dim))   # [vocab, dim]
        self.output_norm = w("output_norm.weight", (c.dim,))               # [dim]
        out = w("output.weight", (c.vocab_size, c.dim), optional=True)      # [vocab, dim]
        self.output = self.token_embd if out is None else out
        self.output_type = f.tensors["token_embd.weight" if out is None else "output.weight"] \
            .type_name
        # Llama-3 style per-frequency divisors of the rope angle.
        self.rope_freqs = w("rope_freqs.weight", (c.n_rot // 2,), optional=True)  # [n_rot/2]
        self.layers = []
        for i in range(c.n_layers):
            p = f"blk.{i}."
            layer = {
                "attn_norm": w(p + "attn_norm.weight", (c.dim,)),           # [dim]
                "wq": w(p + "attn_q.weight", (q_dim, c.dim)),               # [q_dim, dim]
                "wk": w(p + "attn_k.weight", (kv_dim, c.dim)),              # [kv_dim, dim]
                "wv": w(p + "attn_v.weight", (kv_dim, c.dim)),              # [kv_dim, dim]
                "wo": w(p + "attn_output.weight", (c.dim, q_dim)),          # [dim, q_dim]
                "ffn_norm": w(p + "ffn_norm.weight", (c.dim,)),             # [dim]
                "w_gate": w(p + "ffn_gate.weight", (c.ffn_dim, c.dim)),     # [ffn, dim]
                "w_up": w(p + "ffn_up.weight", (c.ffn_dim, c.dim)),         # [ffn, dim]
                "w_down": w(p + "ffn_down.weight", (c.dim, c.ffn_dim)),     # [dim, ffn]
            }
            # Storage type of each matrix (only used to emulate ggml's activation rounding).
            layer["types"] = {
                key: f.tensors[p + name].type_name for key, name in [
                    ("wq", "attn_q.weight"), ("wk", "attn_k.weight"), ("wv", "attn_v.weight"),
                    ("wo", "attn_output.weight"), ("w_gate", "ffn_gate.weight"),
                    ("w_up", "ffn_up.weight"), ("w_down", "ffn_down.weight")]}
            bias = arch["qkv_bias"]
            layer["bq"] = w(p + "attn_q.bias", (q_dim,), optional=not bias)   # [q_dim]
            layer["bk"] = w(p + "attn_k.bias", (kv_dim,), optional=not bias)  # [kv_dim]
            layer["bv"] = w(p + "attn_v.bias", (kv_dim,), optional=not bias)  # [kv_dim]
            norm = arch["qk_norm"]
            layer["q_norm"] = w(p + "attn_q_norm.weight", (c.head_dim,), optional=not norm)
            layer["k_norm"] = w(p + "attn_k_norm.weight", (c.head_dim,), optional=not norm)
            self.layers.append(layer)


# ----------------------------------------------------------------------------------------------
# The building blocks.


def rmsnorm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x [..., n], weight [n] -> [..., n]: x / sqrt(mean(x^2) + eps) * weight."""
    ms = np.mean(x * x, axis=-1, keepdims=True)  # [..., 1]
    return x / np.sqrt(ms + eps) * weight


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, float64; -inf entries get probability 0."""
    m = np.max(x, axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=-1, keepdims=True)


def _round_q8_blocks(x: np.ndarray, block: int, signed_max: bool) -> np.ndarray:
    """Rounds rows of x [T, n] to 8-bit blocks as ggml quantizes activations (float32 math).

    q8_0 (block 32): d = amax/127 stored as f16, q = round(x * 127/amax).
    q8_K (block 256): iscale = -127/max where max is the entry of largest |x| (sign kept),
                      q = min(127, round(iscale * x)), d = 1/iscale (float32).
    """
    xb = x.astype(np.float32).reshape(x.shape[0], -1, block)            # [T, n/block, block]
    amax = np.max(np.abs(xb), axis=-1, keepdims=True)                  # [T, n/block, 1]
    nz = amax > 0
    if signed_max:  # q8_K
        idx = np.argmax(np.abs(xb), axis=-1)[..., None]
        mx = np.take_along_axis(xb, idx, axis=-1)                      # [T, n/block, 1]
        iscale = np.where(nz, np.float32(-127.0) / np.where(nz, mx, 1), 0).astype(np.float32)
        q = np.minimum(127, np.rint(xb * iscale))
        d = np.where(nz, 1 / np.where(nz, iscale, 1), 0).astype(np.float32)
    else:  # q8_0
        d = (amax / np.float32(127.0)).astype(np.float16).astype(np.float32)
        inv = np.where(nz, np.float32(127.0) / np.where(nz, amax, 1), 0).astype(np.float32)
        q = np.rint(xb * inv)
    return (q * d).reshape(x.shape).astype(np.float64)


def round_activations_like_ggml(x: np.ndarray, weight_type: str) -> np.ndarray:
    """x [T, n] -> x rounded to the type ggml's CPU matmul converts activations to before the
    dot products with weights of `weight_type` (its "vec_dot_type"): f16 for F16, bf16 for BF16,
    q8_0 for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 (q8_1 has the same values), q8_K for the K-quants."""
    if weight_type == "F16":
        return x.astype(np.float16).astype(np.float64)
    if weight_type == "BF16":  # round-to-nearest-even on the top 16 bits of the f32
        bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        return bits.astype(np.uint32).view(np.float32).astype(np.float64)
    if weight_type in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"):
        return _round_q8_blocks(x, 32, signed_max=False)
    if weight_type in ("Q4_K", "Q5_K", "Q6_K"):
        return _round_q8_blocks(x, 256, signed_max=True)
    return x


def rope_angles(c: Config, positions: np.ndarray, freq_factors) -> tuple:
    """positions [T] -> (cos [T, n_rot/2], sin [T, n_rot/2]) for pair index i.

    theta(pos, i) = pos * base^(-2i/n_rot), divided by freq_factors[i] if the file has them.
    linear scaling: theta *= 1/factor.
    yarn (llama.cpp's ggml rope_yarn with ext_factor 1, attn_factor 1): a per-pair blend of the
    interpolated (theta/factor) and extrapolated (theta) angle, ramped between the "correction
    dims" computed from beta_fast=32 / beta_slow=1 and original_context_length, and both cos
    and sin scaled by mscale = 1 + 0.1 * ln(factor).
    """
    half = c.n_rot // 2
    i = np.arange(half, dtype=np.float64)                          # [n_rot/2]
    inv_freq = c.rope_base ** (-2.0 * i / c.n_rot)                 # [n_rot/2]
    if freq_factors is not None:
        inv_freq = inv_freq / freq_factors
    theta = positions[:, None].astype(np.float64) * inv_freq[None, :]  # [T, n_rot/2]
    mscale = 1.0
    if c.rope_scaling == "linear":
        theta = theta / c.rope_factor
    elif c.rope_scaling == "yarn":
        def corr_dim(n_rotations):
            return (c.n_rot * math.log(c.rope_orig_ctx / (n_rotations * 2 * math.pi))
                    / (2 * math.log(c.rope_base)))
        low = max(0.0, math.floor(corr_dim(c.yarn_beta_fast)))
        high = min(c.n_rot - 1.0, math.ceil(corr_dim(c.yarn_beta_slow)))
        ramp = 1.0 - np.clip((i - low) / max(0.001, high - low), 0.0, 1.0)  # [n_rot/2]
        theta_interp = theta / c.rope_factor                       # [T, n_rot/2]
        theta = theta_interp * (1.0 - ramp) + theta * ramp
        mscale = 1.0 + 0.1 * math.log(c.rope_factor)
    return np.cos(theta) * mscale, np.sin(theta) * mscale


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, n_rot: int, style: str):
    """x [T, H, head_dim], cos/sin [T, n_rot/2] -> rotated copy; dims >= n_rot pass through."""
    out = x.copy()
    half = n_rot // 2
    if style == "adjacent":
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]     # [T, H, n_rot/2] each
    else:  # neox
        a, b = x[..., :half], x[..., half:n_rot]          # [T, H, n_rot/2] each
    cs, sn = cos[:, None, :], sin[:, None, :]             # [T, 1, n_rot/2]
    ra = a * cs - b * sn
    rb = a * sn + b * cs
    if style == "adjacent":
        out[..., 0:n_rot:2], out[..., 1:n_rot:2] = ra, rb
    else:
        out[..., :half], out[..., half:n_rot] = ra, rb
    return out


# ----------------------------------------------------------------------------------------------
# The model.


class Transformer:
    """Holds config, float64 weights and a growing KV cache (one sequence)."""

    def __init__(self, path: str, ggml_activations: bool = False):
        """ggml_activations: round each matmul's input as ggml's CPU backend does (see
        round_activations_like_ggml) to reproduce llama.cpp's own numbers on quantized files.
        Off by default: the reference is exact float64 math on the dequantized weights."""
        self.ggml_activations = ggml_activations
        self.file = GGUFFile(path)
        self.config = Config.from_gguf(self.file)
        self.weights = Weights(self.file, self.config)
        self.reset()

    def reset(self):
        c = self.config
        # Per layer: keys / values of all positions so far, [n_past, n_kv_heads, head_dim].
        self.k_cache = [np.zeros((0, c.n_kv_heads, c.head_dim)) for _ in range(c.n_layers)]
        self.v_cache = [np.zeros((0, c.n_kv_heads, c.head_dim)) for _ in range(c.n_layers)]

    def linear(self, x: np.ndarray, weight: np.ndarray, weight_type: str) -> np.ndarray:
        """x [T, n_in], weight [n_out, n_in] -> x @ weight.T [T, n_out]."""
        if self.ggml_activations:
            x = round_activations_like_ggml(x, weight_type)
        return x @ weight.T

    @property
    def n_past(self) -> int:
        return self.k_cache[0].shape[0]

    def attention(self, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
        """q [T, H, hd], k/v [T, Hkv, hd] (new tokens) -> [T, H*hd]; appends k/v to the cache.

        Query t (absolute position n_past + t) attends to cached positions 0..n_past+t.
        Head h reads kv head h // (H / Hkv) (GQA; MQA when Hkv == 1, MHA when Hkv == H).
        """
        c = self.config
        n_past = self.k_cache[layer].shape[0]
        self.k_cache[layer] = np.concatenate([self.k_cache[layer], k], axis=0)  # [S, Hkv, hd]
        self.v_cache[layer] = np.concatenate([self.v_cache[layer], v], axis=0)  # [S, Hkv, hd]
        keys, values = self.k_cache[layer], self.v_cache[layer]
        n_new, n_all = q.shape[0], keys.shape[0]
        q_pos = n_past + np.arange(n_new)                               # [T]
        mask = np.arange(n_all)[None, :] > q_pos[:, None]               # [T, S] True = future
        group = c.n_heads // c.n_kv_heads
        out = np.zeros((n_new, c.n_heads, c.head_dim))                  # [T, H, hd]
        for h in range(c.n_heads):
            kvh = h // group
            scores = q[:, h, :] @ keys[:, kvh, :].T / math.sqrt(c.head_dim)  # [T, S]
            scores[mask] = -np.inf
            att = softmax(scores)                                       # [T, S]
            out[:, h, :] = att @ values[:, kvh, :]                      # [T, hd]
        return out.reshape(n_new, c.n_heads * c.head_dim)

    def forward(self, tokens) -> np.ndarray:
        """Feeds `tokens` after the cached ones; returns logits [len(tokens), vocab] (float64)."""
        c, w = self.config, self.weights
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.min() < 0 or tokens.max() >= c.vocab_size:
            raise ValueError(f"token id out of range [0, {c.vocab_size})")
        n_new = tokens.shape[0]
        positions = self.n_past + np.arange(n_new)                      # [T]
        cos, sin = rope_angles(c, positions, w.rope_freqs)              # [T, n_rot/2] each
        x = w.token_embd[tokens]                                        # [T, dim]
        for li, L in enumerate(w.layers):
            xb = rmsnorm(x, L["attn_norm"], c.norm_eps)                 # [T, dim]
            ty = L["types"]
            q = self.linear(xb, L["wq"], ty["wq"])                      # [T, H*hd]
            k = self.linear(xb, L["wk"], ty["wk"])                      # [T, Hkv*hd]
            v = self.linear(xb, L["wv"], ty["wv"])                      # [T, Hkv*hd]
            if L["bq"] is not None:
                q, k, v = q + L["bq"], k + L["bk"], v + L["bv"]
            q = q.reshape(n_new, c.n_heads, c.head_dim)                 # [T, H, hd]
            k = k.reshape(n_new, c.n_kv_heads, c.head_dim)              # [T, Hkv, hd]
            v = v.reshape(n_new, c.n_kv_heads, c.head_dim)              # [T, Hkv, hd]
            if L["q_norm"] is not None:
                q = rmsnorm(q, L["q_norm"], c.norm_eps)                 # per head, [T, H, hd]
                k = rmsnorm(k, L["k_norm"], c.norm_eps)                 # [T, Hkv, hd]
            q = apply_rope(q, cos, sin, c.n_rot, c.rope_style)          # [T, H, hd]
            k = apply_rope(k, cos, sin, c.n_rot, c.rope_style)          # [T, Hkv, hd]
            att = self.attention(li, q, k, v)                           # [T, H*hd]
            x = x + self.linear(att, L["wo"], ty["wo"])                 # [T, dim]
            xb = rmsnorm(x, L["ffn_norm"], c.norm_eps)                  # [T, dim]
            gate = silu(self.linear(xb, L["w_gate"], ty["w_gate"]))     # [T, ffn]
            up = self.linear(xb, L["w_up"], ty["w_up"])                 # [T, ffn]
            x = x + self.linear(gate * up, L["w_down"], ty["w_down"])   # [T, dim]
        x = rmsnorm(x, w.output_norm, c.norm_eps)                       # [T, dim]
        return self.linear(x, w.output, w.output_type)                  # [T, vocab]

    def logits(self, ids) -> np.ndarray:
        """Logits [len(ids), vocab] of a fresh sequence."""
        self.reset()
        return self.forward(ids)

    def greedy(self, ids, n: int):
        """Greedy continuation: returns (generated ids [n], top-2 logit margins [n])."""
        self.reset()
        last = self.forward(ids)[-1]                                    # [vocab]
        out, margins = [], []
        for step in range(n):
            top2 = np.sort(last)[-2:]
            margins.append(float(top2[1] - top2[0]))
            tok = int(np.argmax(last))  # first index among equal maxima
            out.append(tok)
            if step + 1 < n:
                last = self.forward([tok])[-1]
        return out, margins


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True, help="comma-separated prompt token ids")
    ap.add_argument("--out", help="write logits [n_ids, vocab] (float32) to this .npy")
    ap.add_argument("--greedy", type=int, default=0, help="generate N tokens greedily")
    ap.add_argument("--ggml-activations", action="store_true",
                    help="round matmul inputs as ggml's CPU backend does (f16 / q8_0 / q8_K)")
    args = ap.parse_args(argv)
    ids = [int(s) for s in args.ids.split(",") if s.strip()]
    model = Transformer(args.model, ggml_activations=args.ggml_activations)
    c = model.config
    print(f"{c.arch}: layers={c.n_layers} dim={c.dim} ffn={c.ffn_dim} heads={c.n_heads}/"
          f"{c.n_kv_heads} head_dim={c.head_dim} n_rot={c.n_rot} vocab={c.vocab_size} "
          f"rope={c.rope_style} base={c.rope_base} scaling={c.rope_scaling}", file=sys.stderr)
    logits = model.logits(ids)
    if args.out:
        np.save(args.out, logits.astype(np.float32))
    print("argmax per position:", ",".join(str(int(i)) for i in logits.argmax(axis=1)))
    if args.greedy:
        gen, _ = model.greedy(ids, args.greedy)
        print("greedy:", ",".join(str(t) for t in gen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
