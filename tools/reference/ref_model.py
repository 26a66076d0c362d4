"""A plain, obviously correct transformer forward pass in float64 numpy: kvserve's reference.

In the spirit of llama2.c's run.c: one function per step of the math, a shape comment on every
array, no cleverness. Weights are dequantized once (tools/reference/gguf_ref.py) and kept in
float64; every product, the softmax and the norms run in float64.

Supported `general.architecture` values and what they change (llama.cpp's conventions):
  llama    : RoPE on ADJACENT pairs (x[2i], x[2i+1]) ("normal" rope). The HF->GGUF converter
             permutes the rows of attn_q / attn_k so that this pairing is right for the file.
             With `llama.expert_count` > 0 (Mixtral) every FFN is a mixture of experts of
             feed_forward_length: softmax router, top-k, weights renormalised to sum 1.
  qwen2    : NEOX rope, pairs (x[i], x[i + n_rot/2]); biases on q, k, v projections.
  qwen3    : NEOX rope; per-head RMSNorm of q and k (attn_q_norm / attn_k_norm, weight [head_dim])
             applied before rope; head_dim from `{arch}.attention.key_length`.
  qwen3moe : qwen3's attention; every FFN a mixture of experts of expert_feed_forward_length
             (or feed_forward_length / expert_used_count without it): softmax, top-k,
             renormalised (llm_build_qwen3moe passes norm = true whatever the file says).
  deepseek2: multi-head latent attention (MLA) + DeepSeek MoE, see below; rope on adjacent
             pairs (llama_model_rope_type: "normal" for deepseek2; the converter permutes
             nothing, DeepSeek's HF code de-interleaves before its rotate-half).
  gemma2   : NEOX rope; the Gemma block below; sliding window on layers il % 2 == 0 (window
             `attention.sliding_window`, 4096 when absent); attention and final soft-capping
             (`attn_logit_softcapping` / `final_logit_softcapping`, 50 / 30 when absent, none
             when <= 0); tied output unless the file has output.weight.
  gemma3   : the Gemma block with qwen3's per-head q/k RMSNorm before rope; with
             `attention.sliding_window` W > 0, layer il is windowed ("local") iff il % P < P - 1,
             P = `attention.sliding_window_pattern` or 6 (5, 11, ... are global); local layers
             use rope base `rope.freq_base_swa` (default 10000) without rope scaling, global
             layers `rope.freq_base` and the file's scaling; soft-capping only when the file
             has the keys.
  phi3     : NEOX rope; the llama block with a fused attn_qkv (rows: q, then k, then v; or
             separate attn_q / attn_k / attn_v) and a fused ffn_up (first feed_forward_length
             rows the gate, the rest the up projection); LongRoPE factors (below); every layer
             windowed when `attention.sliding_window` > 0 (absent: llama.cpp's defaults for the
             released Phi-3 shapes, else an error); output.weight (llama.cpp's February 2025
             loader requires it; without it the output is tied, as for the others).
  gpt-oss  : NEOX rope over the whole head (head size = key_length = rope.dimension_count);
             q/k/v and output biases; attention sinks; sliding window
             `attention.sliding_window` (required) on layers il % 2 == 0 (or
             `attention.sliding_window_pattern`); every FFN a mixture of biased experts with
             the clamped SwiGLU and softmax-over-the-chosen routing (the gpt-oss block below).
  Any architecture with `{arch}.attention.sliding_window` W > 0 and no pattern of its own
  (llama: Mistral 7B v0.1, phi3) windows every layer.
  Attention sinks (gpt-oss; any non-MLA file with blk.N.attn_sinks.weight [heads]): head h's
  softmax over its keys gets one more logit, sink[h], not scaled, whose probability is dropped:
  p_j = exp(s_j - m) / (sum_i exp(s_i - m) + exp(sink[h] - m)) (ggml_soft_max_add_sinks).

LongRoPE (phi3; llama.cpp's build_rope_factors and the phi3 converter): the file holds
rope_factors_short.weight and rope_factors_long.weight [n_rot/2]; the model divides pair i's
angle by factor[i] of the LONG set when the context it runs with (`ctx`: llama.cpp's n_ctx per
sequence, kvserve's --ctx; default the file's context_length) is larger than
`rope.scaling.original_context_length`, else by the SHORT set. `rope.scaling.attn_factor`
(the converter: sqrt(1 + ln(s) / ln(orig)) with s = context_length / orig) multiplies cos and
sin, so it enters the scores squared; q is scaled by 1/sqrt(head_dim) as usual.

Sliding window (llama.cpp's LLAMA_SWA_TYPE_STANDARD): on a windowed layer a query at position p
sees key positions j with p - W < j <= p, i.e. j is masked when j > p or p - j >= W.

Gemma block (llama.cpp's build_gemma2 / llm_build_gemma3_iswa), per layer, with x0 = token_embd
row * sqrt(hidden):
  n = RMSNorm(x) * attn_norm;  q, k, v = Wq·n, Wk·n, Wv·n;  [q, k = per-head RMSNorm (gemma3)]
  q, k = NEOX rope;  scores = (q * s)·k with s = attention.scale if present, else
  1/sqrt(head_dim), or 1/sqrt(hidden / heads) for the 27B models (46 layers gemma2, 62 gemma3);
  scores = c * tanh(scores / c) (soft-cap c > 0);  mask;  softmax (scale 1)
  h = x + RMSNorm(Wo·attn) * post_attention_norm
  m = RMSNorm(h) * ffn_norm;  f = Wdown·(gelu_tanh(Wgate·m) * Wup·m)     (GeGLU)
  x' = h + RMSNorm(f) * post_ffw_norm
  logits = c_f * tanh((Wout·(RMSNorm(x_L) * output_norm)) / c_f)   (final soft-cap c_f > 0)
  The converter adds 1 to every Gemma norm weight, so the file's norm weights are used as stored.
  gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); ggml's CPU backend looks it up
  in a table of f16 values (GGML_GELU_FP16), which --ggml-activations reproduces.

gpt-oss block (llama.cpp's llm_build_openai_moe_iswa, HF's GptOssDecoderLayer), per layer:
  n = RMSNorm(x) * attn_norm;  q, k, v = Wq·n + bq, Wk·n + bk, Wv·n + bv
  q, k = NEOX rope (YaRN as below: rope.scaling.type yarn, factor, original_context_length);
  scores = q·k / sqrt(head_dim);  mask (window on the windowed layers);  softmax with the
  head's sink;  h = x + Wo·attn + bo
  m = RMSNorm(h) * post_attention_norm   (the FFN's input norm; no ffn_norm tensor)
  router logits r = Wgate_inp·m + bgate_inp;  chosen = top-k of r;  w = softmax(r[chosen])
  (no renormalisation, no scale);  per chosen expert e:
    g = Wgate_e·m + bgate_e,  u = Wup_e·m + bup_e
    a = min(g, 7) * sigmoid(1.702 * min(g, 7)) * (clamp(u, -7, 7) + 1)
    y_e = Wdown_e·a + bdown_e
  x' = h + sum_j w_j y_j;   logits = Woutput · (RMSNorm(x_L) * output_norm)  (untied)
  Expert biases: ffn_gate_exps.bias / ffn_up_exps.bias GGUF dims [expert_ffn, E],
  ffn_down_exps.bias [hidden, E], ffn_gate_inp.bias [E]. The converter de-interleaves HF's
  gate_up_proj (gate = columns 0, 2, 4, ..., up = 1, 3, 5, ...) into ffn_gate_exps /
  ffn_up_exps, so the file's gate and up rows are used as they are.

Mixture of experts (llama.cpp's build_moe_ffn), for one token with FFN input m:
  probs = softmax(Wgate_inp·m) or sigmoid(Wgate_inp·m)   (expert_gating_func 1 / 2)
  chosen = top-k of probs + exp_probs_b (the bias only chooses; absent -> probs); with
           expert_group_count G > 1 first keep the expert_group_used_count groups whose two
           best biased probs sum highest
  (gpt-oss: probs = the logits themselves, and w = softmax over the k chosen logits)
  w_j = probs[chosen_j]; if norm: w /= max(sum w, 2^-14); if scale not in {0, 1}: w *= scale
  out = sum_j w_j * down_j(silu(gate_j·m) * up_j·m)  [+ shared expert silu(gate_sh·m)*up_sh·m
        through down_sh, unweighted, deepseek2]
  Expert tensors: ffn_gate_exps / ffn_up_exps GGUF dims [hidden, n_ff, n_expert], ffn_down_exps
  [n_ff, hidden, n_expert], or the merged ffn_gate_up_exps [hidden, 2*n_ff, n_expert] (gate rows
  first).

deepseek2 (llama.cpp's llm_build_deepseek2; the decompressed head sizes are
`attention.key_length_mla` / `value_length_mla` when present, else `key_length` / `value_length`;
rope = `rope.dimension_count`; nope = key size - rope):
  q      = Wq·n (V2-Lite) or Wq_b·RMSNorm(Wq_a·n)*q_a_norm; per head [q_nope | q_pe]
  [c|kpe]= Wkv_a_mqa·n;  c = RMSNorm(c)*kv_a_norm (the latent, kv_lora_rank);  kpe shared by heads
  rope (ADJACENT pairs, YaRN as below) on q_pe and kpe only
  decompressed: k_h = [Wk_b,h^T·c | kpe], v_h = Wv_b,h·c; MHA with scale kq_scale
  absorbed    : q'_h = [Wk_b,h·q_nope,h | q_pe,h]; one shared key [c | kpe], value c (MQA);
                out_h = Wv_b,h·(attention output in the latent)
  attn_kv_b [kv_lora, H*(nope+v)] holds, per head, nope rows of K then v rows of V; the split
  attn_k_b has GGUF dims [nope, kv_lora, H] (Wk_b,h is [kv_lora, nope]: transposed from HF),
  attn_v_b [kv_lora, v, H] (Wv_b,h is [v, kv_lora]: as HF) -- convert_hf_to_gguf.py's
  DeepseekV2Model.modify_tensors. The two forms are the same math; llama.cpp runs the absorbed
  one on files with *_mla keys (split tensors), the decompressed one on the others.
  The first leading_dense_block_count layers have a dense FFN (feed_forward_length), the rest
  are MoE with expert_shared_count shared experts (ffn_*_shexp, n_ff_exp * n_shared wide).

RoPE magnitude and attention scale (llama.cpp's llama_context constructor, ggml's rope_yarn and
the deepseek2 graph). s = rope.scaling.factor (1 without scaling), yarn => ext = 1:
  attn_ctx = 1                                      without YaRN
           = mscale(s, 1) / (1 + 0.1 ln s)          YaRN, no yarn_log_multiplier
           = 1 / (1 + 0.1 ln s)                     YaRN with it (only deepseek2 reads it:
                                                    mscale(s, M) / mscale(s, M) = 1)
           times rope.scaling.attn_factor (default 1);  mscale(s, m) = 1 + 0.1 m ln s (s > 1)
  rope multiplies cos and sin by attn_ctx * (1 + 0.1 ln s) under YaRN (so 1 for deepseek2 with
  a yarn_log_multiplier), by attn_ctx otherwise.
  (gpt-oss: YaRN without yarn_log_multiplier, so cos and sin carry 1 + 0.1 ln s.)
  kq_scale = 1/sqrt(head_dim), and for deepseek2
  kq_scale = (attn_ctx * (1 + 0.1 ln s) * (1 + 0.1 M ln s))^2 / sqrt(nope + rope)
  where M = rope.scaling.yarn_log_multiplier / 0.1 (the converter writes 0.1 * mscale_all_dim,
  the deepseek2 loader divides by 0.1) and s is 1 without rope scaling. With YaRN and M present
  this is (rope.scaling.attn_factor * (1 + 0.1 M ln s))^2 / sqrt(nope + rope).
Where each rule was read in llama.cpp, and the self-test that pins it: tools/reference/README.md.

Per layer:  h = x + Wo · Attn(RoPE(Wq·n), RoPE(Wk·n), Wv·n),  n = RMSNorm(x) * attn_norm
            x' = h + Wdown · (silu(Wgate·m) * (Wup·m)),       m = RMSNorm(h) * ffn_norm
            (or the MoE above in place of the FFN; Gemma, gpt-oss: the blocks above)
Logits = Woutput · (RMSNorm(x_L) * output_norm); output.weight absent -> token_embd (tied).

CLI:
  /usr/bin/python3 tools/reference/ref_model.py --model M.gguf --ids 1,2,3 [--out logits.npy]
                                                [--greedy N] [--mla-form decompressed|absorbed]
                                                [--ctx N]
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

# Per architecture: rope pairing ("adjacent" = (2i, 2i+1), "neox" = (i, i + n_rot/2)), q/k/v
# biases, per-head q/k norms, mixture-of-experts FFNs ("moe": always, "optional": when
# expert_count > 0), multi-head latent attention, and the Gemma block ("gemma": embeddings
# scaled by sqrt(hidden), post-attention / post-FFN norms, GeGLU, its own attention scale),
# phi3's fused attn_qkv / ffn_up with LongRoPE factor sets ("fused"), and gpt-oss ("oai":
# attention sinks, an output bias, post_attention_norm as the FFN's input norm, biased experts
# with the clamped SwiGLU, softmax over the chosen router logits).
ARCHITECTURES = {
    "llama": {"rope": "adjacent", "qkv_bias": False, "qk_norm": False, "moe": "optional"},
    "qwen2": {"rope": "neox", "qkv_bias": True, "qk_norm": False, "moe": "never"},
    "qwen3": {"rope": "neox", "qkv_bias": False, "qk_norm": True, "moe": "never"},
    "qwen3moe": {"rope": "neox", "qkv_bias": False, "qk_norm": True, "moe": "always"},
    "deepseek2": {"rope": "adjacent", "qkv_bias": False, "qk_norm": False, "moe": "always",
                  "mla": True},
    "gemma2": {"rope": "neox", "qkv_bias": False, "qk_norm": False, "moe": "never",
               "gemma": True},
    "gemma3": {"rope": "neox", "qkv_bias": False, "qk_norm": True, "moe": "never",
               "gemma": True},
    "phi3": {"rope": "neox", "qkv_bias": False, "qk_norm": False, "moe": "never",
             "fused": True},
    "gpt-oss": {"rope": "neox", "qkv_bias": True, "qk_norm": False, "moe": "always",
                "oai": True},
}
# Sliding-window defaults (llama.cpp's hyper-parameter loading): gemma2 has a window of 4096
# when the file has none and windows every other layer; gemma3 windows 5 of every 6 layers, and
# its windowed ("local") layers use rope base 10000 without rope scaling. Other architectures
# window every layer when the file has `{arch}.attention.sliding_window` (Mistral 7B v0.1).
GEMMA2_DEFAULT_WINDOW = 4096
SWA_PATTERN = {"gemma2": 2, "gemma3": 6,  # layer il windowed iff il % P < P - 1; 0: all layers
               "gpt-oss": 2}
GEMMA3_LOCAL_ROPE_BASE = 10000.0
# gemma2 always soft-caps (llama.cpp's defaults when a file has no softcapping keys).
GEMMA2_DEFAULT_SOFTCAP = {"attn": 50.0, "final": 30.0}
# The layer counts of Gemma 2 27B and Gemma 3 27B: their attention scale is
# 1/sqrt(hidden / heads), every other size's is 1/sqrt(head_dim).
GEMMA_27B_LAYERS = {"gemma2": 46, "gemma3": 62}
# phi3 files without `phi3.attention.sliding_window` (converted before the converter wrote it):
# llama.cpp's windows for the released shapes, keyed by (layers, kv heads or None for any,
# context_length). Any other phi3 file without the key is refused, as llama.cpp refuses it.
PHI3_LEGACY_WINDOWS = {(32, None, 4096): 2047, (40, None, 4096): 2047,   # mini / medium 4k
                       (32, 32, 131072): 262144,                          # mini 128k
                       (40, None, 131072): 131072}                        # medium 128k
MLA_FORMS = ("decompressed", "absorbed")
GATING = {1: "softmax", 2: "sigmoid"}  # expert_gating_func
# gpt-oss experts (llama.cpp's LLM_FFN_SWIGLU_OAI_MOE, HF's GptOssExperts): the clamped SwiGLU.
OAI_SWIGLU_ALPHA = 1.702
OAI_SWIGLU_LIMIT = 7.0
MIN_WEIGHT_SUM = 6.103515625e-5  # build_moe_ffn clamps the sum of the chosen weights (2^-14)


def swa_layer(il: int, pattern: int) -> bool:
    """llama_hparams::set_swa_pattern (dense_first = false): with pattern P, layer il is
    windowed iff il % P < P - 1, so every P-th layer (P-1, 2P-1, ...) is global; P = 0 windows
    every layer."""
    return pattern == 0 or il % pattern < pattern - 1


def gemma_attn_scale(arch: str, n_layers: int, dim: int, n_heads: int, head_dim: int) -> float:
    """The factor gemma2 / gemma3 multiply q by (the softmax scale is then 1): 1/sqrt(head_dim),
    except for the 27B models (recognised by their layer count), 1/sqrt(hidden / heads) with
    the integer division llama.cpp uses."""
    if n_layers == GEMMA_27B_LAYERS[arch]:
        return 1.0 / math.sqrt(dim // n_heads)
    return 1.0 / math.sqrt(head_dim)


def phi3_legacy_window(n_layers: int, n_kv_heads: int, ctx_train: int) -> int:
    """llama.cpp's sliding window for a phi3 file without the key (0: none known)."""
    for (layers, kv, ctx), window in PHI3_LEGACY_WINDOWS.items():
        if (layers, ctx) == (n_layers, ctx_train) and kv in (None, n_kv_heads):
            return window
    return 0


def yarn_mscale(scale: float, m: float) -> float:
    """llama.cpp's get_mscale: 1 + 0.1 * m * ln(scale) for scale > 1, else 1."""
    return 1.0 if scale <= 1.0 else 1.0 + 0.1 * m * math.log(scale)


@dataclass
class Config:
    arch: str
    n_layers: int
    dim: int            # embedding_length
    ffn_dim: int        # feed_forward_length (dense FFN; 0 when the model has none)
    n_heads: int
    n_kv_heads: int
    head_dim: int       # key_length (= value_length here); deepseek2: nope + rope
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
    # llama.cpp (ggml_rope_yarn_corr_dims) rounds the YaRN ramp's ends down / up to whole pair
    # indices; HF's gpt-oss config says "truncate": false (ends used as computed). The
    # reference follows llama.cpp; False gives HF's gpt-oss rope (for comparison only).
    yarn_truncate: bool = True
    rope_attn_factor: float = 1.0   # rope.scaling.attn_factor
    yarn_log_mul: float = 0.0       # deepseek2: M = rope.scaling.yarn_log_multiplier / 0.1
    rope_mag: float = 1.0           # what rope multiplies cos and sin by (see the docstring)
    kq_scale: float = 0.0           # softmax scale of q.k (see the docstring)
    # Mixture of experts.
    n_expert: int = 0
    n_expert_used: int = 0
    expert_ffn_dim: int = 0
    n_expert_shared: int = 0
    n_dense_lead: int = 0           # leading layers with a dense FFN
    expert_gating: str = "softmax"  # "softmax" | "sigmoid" | "softmax_weight" (gpt-oss:
                                    # top-k of the logits, softmax over the k chosen)
    expert_act: str = "silu"        # "silu" (SwiGLU) | "swiglu_oai" (gpt-oss's clamped SwiGLU)
    expert_weights_norm: bool = False
    expert_weights_scale: float = 0.0  # 0 and 1 leave the weights alone
    n_expert_groups: int = 0
    n_group_used: int = 0
    # Multi-head latent attention (deepseek2).
    q_lora_rank: int = 0            # 0: full attn_q (V2-Lite)
    kv_lora_rank: int = 0
    qk_nope: int = 0
    v_head_dim: int = 0
    # Sliding-window attention: a query at position p sees key positions j with
    # p - W < j <= p on the layers marked in swa_layers (W = sliding_window; 0: no window).
    sliding_window: int = 0
    swa_layers: tuple = ()          # per layer: windowed ("local")?
    local_rope: bool = False        # gemma3: local layers use rope_base_swa and no scaling
    rope_base_swa: float = 10000.0
    rope_mag_local: float = 1.0     # rope's cos/sin factor on local layers when local_rope
    # Gemma.
    embed_scale: float = 1.0        # token embeddings are multiplied by this (sqrt(dim))
    attn_softcap: float = 0.0       # scores = c * tanh(scores / c) when c > 0
    final_softcap: float = 0.0      # logits = c * tanh(logits / c) when c > 0
    ffn_act: str = "silu"           # "silu" (SwiGLU) | "gelu_tanh" (GeGLU)
    # LongRoPE (phi3): the context the model runs with; the long factor set is used iff
    # ctx > rope_orig_ctx (see long_rope_factors).
    ctx: int = 0

    @property
    def long_rope_factors(self) -> bool:
        """llama.cpp's build_rope_factors: rope_factors_long iff n_ctx per sequence >
        original_context_length, else rope_factors_short."""
        return self.ctx > self.rope_orig_ctx

    @property
    def mla(self) -> bool:
        return bool(ARCHITECTURES[self.arch].get("mla"))

    @property
    def gemma(self) -> bool:
        return bool(ARCHITECTURES[self.arch].get("gemma"))

    def is_swa_layer(self, i: int) -> bool:
        return bool(self.swa_layers) and bool(self.swa_layers[i])

    def layer_window(self, i: int) -> int:
        """The sliding window of layer i (0: plain causal attention)."""
        return self.sliding_window if self.sliding_window > 0 and self.is_swa_layer(i) else 0

    def is_moe_layer(self, i: int) -> bool:
        return self.n_expert > 0 and i >= self.n_dense_lead

    @staticmethod
    def from_gguf(f: GGUFFile, ctx: int | None = None) -> "Config":
        """ctx: the context the model runs with (phi3's LongRoPE factor choice); None: the
        file's context_length."""
        arch = f.get("general.architecture")
        if arch not in ARCHITECTURES:
            raise ValueError(f"architecture {arch!r} not supported (want one of "
                             f"{sorted(ARCHITECTURES)})")
        spec = ARCHITECTURES[arch]

        def key(name, default=None):
            v = f.get(f"{arch}.{name}", default)
            if v is None:
                raise ValueError(f"missing metadata key {arch}.{name}")
            return v

        dim = int(key("embedding_length"))
        n_heads = int(key("attention.head_count"))
        n_kv_heads = int(key("attention.head_count_kv", n_heads))
        head_dim = int(key("attention.key_length", dim // n_heads))
        value_dim = int(key("attention.value_length", dim // n_heads))
        n_rot = int(key("rope.dimension_count", head_dim))
        emb = f.tensors["token_embd.weight"]
        scaling = f.get(f"{arch}.rope.scaling.type", "none")
        factor = float(f.get(f"{arch}.rope.scaling.factor", 1.0) or 1.0)
        if scaling == "none" and f.get(f"{arch}.rope.scale_linear"):  # older files
            scaling, factor = "linear", float(f.get(f"{arch}.rope.scale_linear"))
        if scaling == "longrope":  # llama.cpp: no YaRN ramp; a factor would scale linearly
            scaling = "linear"
        if scaling != "none" and factor == 1.0:
            scaling = "none"
        if scaling not in ("none", "linear", "yarn"):
            raise ValueError(f"rope scaling type {scaling!r} not supported")
        extra = {}
        if spec.get("mla"):
            # Newer files describe the latent MQA (key_length = kv_lora_rank + rope,
            # value_length = kv_lora_rank, head_count_kv = 1) and put the decompressed head
            # sizes in *_mla; older ones have the decompressed sizes in key/value_length.
            k_mla = int(key("attention.key_length_mla", 0))
            v_mla = int(key("attention.value_length_mla", 0))
            if (k_mla == 0) != (v_mla == 0):
                raise ValueError("key_length_mla and value_length_mla must come together")
            if k_mla:
                head_dim, value_dim = k_mla, v_mla
            gating = int(key("expert_gating_func", 0)) or 1  # absent: softmax (V2 files)
            if gating not in GATING:
                raise ValueError(f"expert_gating_func {gating} not supported")
            n_shared = int(key("expert_shared_count"))
            extra = dict(
                q_lora_rank=int(key("attention.q_lora_rank", 0)),
                kv_lora_rank=int(key("attention.kv_lora_rank")),
                qk_nope=head_dim - n_rot, v_head_dim=value_dim,
                n_dense_lead=int(key("leading_dense_block_count", 0)),
                expert_ffn_dim=int(key("expert_feed_forward_length")),
                n_expert_shared=n_shared,
                expert_gating=GATING[gating],
                expert_weights_norm=bool(key("expert_weights_norm", False)),
                expert_weights_scale=float(key("expert_weights_scale", 0.0)),
                yarn_log_mul=float(key("rope.scaling.yarn_log_multiplier", 0.0)) / 0.1,
            )
            if extra["qk_nope"] < 1:
                raise ValueError(f"key length {head_dim} leaves no room beside rope {n_rot}")
            n_kv_heads = n_heads  # the decompressed heads; the file says 1 (latent MQA) or H
        elif value_dim != head_dim:
            raise ValueError("key_length != value_length is not supported")
        if spec.get("oai"):
            # llm_build_openai_moe_iswa cuts q, k and v into heads of n_rot values (and its
            # loader sizes attn_q as n_head * n_rot), so the head is rope.dimension_count wide,
            # all of it rotated; a file where that differs from key_length is not a gpt-oss file
            # llama.cpp can run.
            if n_rot != head_dim:
                raise ValueError(f"{arch}: rope.dimension_count {n_rot} != key_length "
                                 f"{head_dim}")
            extra = dict(expert_ffn_dim=int(key("expert_feed_forward_length")),
                         expert_gating="softmax_weight", expert_act="swiglu_oai")
        if n_heads % n_kv_heads:
            raise ValueError(f"head_count {n_heads} not a multiple of head_count_kv {n_kv_heads}")
        n_expert = int(key("expert_count", 0))
        if spec["moe"] == "never":
            n_expert = 0
        elif spec["moe"] == "always" and n_expert == 0:
            raise ValueError(f"{arch}: expert_count missing or 0")
        n_used = int(key("expert_used_count", 0)) if n_expert else 0
        if n_expert and not 0 < n_used <= n_expert:
            raise ValueError(f"expert_used_count {n_used} not in 1..{n_expert}")
        ffn_dim = int(key("feed_forward_length", 0))
        if n_expert and arch == "llama":       # Mixtral: experts of feed_forward_length
            extra["expert_ffn_dim"] = ffn_dim
        elif n_expert and arch == "qwen3moe":  # no key: n_ff / n_expert_used
            extra["expert_ffn_dim"] = int(key("expert_feed_forward_length", 0)) or \
                ffn_dim // n_used
        if arch in ("llama", "qwen3moe"):
            extra["expert_weights_norm"] = True  # build_moe_ffn(norm_w = true), scale unread
        if n_expert:
            extra["n_expert_groups"] = int(key("expert_group_count", 0))
            extra["n_group_used"] = int(key("expert_group_used_count", 0))
        c = Config(
            arch=arch,
            n_layers=int(key("block_count")),
            dim=dim,
            ffn_dim=ffn_dim,
            n_heads=n_heads,
            n_kv_heads=n_kv_heads,
            head_dim=head_dim,
            n_rot=n_rot,
            vocab_size=int(emb.dims[1]),
            norm_eps=float(key("attention.layer_norm_rms_epsilon")),
            rope_base=float(key("rope.freq_base", 10000.0)),
            rope_style=spec["rope"],
            rope_scaling=scaling,
            rope_factor=factor,
            rope_orig_ctx=int(f.get(f"{arch}.rope.scaling.original_context_length",
                                    f.get(f"{arch}.context_length", 0)) or 0),
            rope_attn_factor=float(key("rope.scaling.attn_factor", 1.0)),
            n_expert=n_expert,
            n_expert_used=n_used,
            **extra,
        )
        ctx_train = int(f.get(f"{arch}.context_length", 0) or 0)
        c.ctx = int(ctx) if ctx else (ctx_train or c.rope_orig_ctx)
        c.rope_mag, c.kq_scale = c.rope_magnitude_and_kq_scale()
        c.set_sliding_window(f)
        if c.gemma:
            c.set_gemma(f)
        return c

    def set_sliding_window(self, f: GGUFFile):
        """sliding_window, swa_layers and the local layers' rope, from the file's metadata."""
        arch = self.arch
        window = f.get(f"{arch}.attention.sliding_window")
        if window is None and arch == "phi3":
            window = phi3_legacy_window(self.n_layers, self.n_kv_heads,
                                        int(f.get(f"{arch}.context_length", 0) or 0))
            if window == 0:
                raise ValueError(f"{arch}.attention.sliding_window missing (llama.cpp refuses "
                                 f"such a phi3 file unless it has a released Phi-3 shape)")
        if window is None and arch == "gpt-oss":
            raise ValueError(f"{arch}.attention.sliding_window missing (llama.cpp's gpt-oss "
                             f"loader requires it)")
        if window is None:
            window = GEMMA2_DEFAULT_WINDOW if arch == "gemma2" else 0
        window = int(window)
        if window < 0:
            raise ValueError(f"{arch}.attention.sliding_window {window} < 0")
        self.sliding_window = window
        pattern = f.get(f"{arch}.attention.sliding_window_pattern")
        if window == 0:
            self.swa_layers = (False,) * self.n_layers
        elif isinstance(pattern, list):  # one flag per layer
            if len(pattern) != self.n_layers:
                raise ValueError(f"sliding_window_pattern has {len(pattern)} entries for "
                                 f"{self.n_layers} layers")
            self.swa_layers = tuple(bool(v) for v in pattern)
        else:
            period = SWA_PATTERN.get(arch, 0) if pattern is None else int(pattern)
            self.swa_layers = tuple(swa_layer(i, period) for i in range(self.n_layers))
        base_swa = f.get(f"{arch}.rope.freq_base_swa")
        if arch == "gpt-oss" and base_swa is not None and float(base_swa) != self.rope_base:
            # Newer llama.cpp reads it for gpt-oss and then rotates the windowed layers with
            # that base *and* the file's rope scaling; no released file has it.
            raise ValueError(f"{arch}.rope.freq_base_swa != rope.freq_base is not supported")
        if arch == "gemma3":
            self.local_rope = True
            self.rope_base_swa = float(f.get(f"{arch}.rope.freq_base_swa",
                                             GEMMA3_LOCAL_ROPE_BASE))
            # No rope scaling on local layers: without YaRN's own magnitude factor.
            s = self.rope_factor if self.rope_scaling == "yarn" else 1.0
            self.rope_mag_local = self.rope_mag / (1.0 + 0.1 * math.log(s))

    def set_gemma(self, f: GGUFFile):
        """Gemma's embedding scale, attention scale, soft-capping and GeGLU."""
        arch = self.arch
        self.embed_scale = math.sqrt(self.dim)
        self.ffn_act = "gelu_tanh"
        scale = float(f.get(f"{arch}.attention.scale", 0.0) or 0.0)
        self.kq_scale = scale if scale != 0.0 else gemma_attn_scale(
            arch, self.n_layers, self.dim, self.n_heads, self.head_dim)
        default = GEMMA2_DEFAULT_SOFTCAP if arch == "gemma2" else {"attn": 0.0, "final": 0.0}
        self.attn_softcap = float(f.get(f"{arch}.attn_logit_softcapping", default["attn"]))
        self.final_softcap = float(f.get(f"{arch}.final_logit_softcapping", default["final"]))

    def rope_magnitude_and_kq_scale(self) -> tuple:
        """(factor on rope's cos and sin, softmax scale of q.k): see the module docstring."""
        s = self.rope_factor if self.rope_scaling in ("linear", "yarn") else 1.0
        ext = self.rope_scaling == "yarn"
        attn_ctx = 1.0
        if ext:
            m_all = self.yarn_log_mul
            if m_all != 0.0:
                m = m_all if (self.arch == "deepseek2" and m_all != 1.0) else 1.0
                attn_ctx = yarn_mscale(s, m) / yarn_mscale(s, m_all)
            else:
                attn_ctx = yarn_mscale(s, 1.0)
            attn_ctx /= 1.0 + 0.1 * math.log(s)
        attn_ctx *= self.rope_attn_factor
        rope_mag = attn_ctx * (1.0 + 0.1 * math.log(s)) if ext else attn_ctx
        if self.mla:
            attn_org = attn_ctx * (1.0 + 0.1 * math.log(s))
            mscale = attn_org * (1.0 + 0.1 * self.yarn_log_mul * math.log(s))
            return rope_mag, mscale * mscale / math.sqrt(self.head_dim)
        return rope_mag, 1.0 / math.sqrt(self.head_dim)


class Weights:
    """All tensors dequantized to float64, in numpy (row-major) shapes."""

    def __init__(self, f: GGUFFile, c: Config):
        self.file = f

        def w(name, shape=None, optional=False):
            if name not in f.tensors:
                if optional:
                    return None
                raise ValueError(f"missing tensor {name}")
            a = f.tensor(name).astype(np.float64)
            if shape is not None and a.shape != shape:
                raise ValueError(f"tensor {name}: shape {a.shape}, expected {shape}")
            return a

        self.w = w
        arch = ARCHITECTURES[c.arch]
        self.token_embd = w("token_embd.weight", (c.vocab_size, c.dim))   # [vocab, dim]
        self.output_norm = w("output_norm.weight", (c.dim,))               # [dim]
        out = w("output.weight", (c.vocab_size, c.dim), optional=True)      # [vocab, dim]
        self.output = self.token_embd if out is None else out
        self.output_type = f.tensors["token_embd.weight" if out is None else "output.weight"] \
            .type_name
        # Llama-3 style per-frequency divisors of the rope angle.
        self.rope_freqs = w("rope_freqs.weight", (c.n_rot // 2,), optional=True)  # [n_rot/2]
        # phi3's LongRoPE factor sets (Config.long_rope_factors picks one), [n_rot/2] each.
        self.rope_factors = {"short": None, "long": None}
        if arch.get("fused"):
            for k in self.rope_factors:
                self.rope_factors[k] = w(f"rope_factors_{k}.weight", (c.n_rot // 2,),
                                         optional=True)
        self.layers = []
        for i in range(c.n_layers):
            p = f"blk.{i}."
            layer = {"types": {}}
            self.load(layer, "attn_norm", p + "attn_norm.weight", (c.dim,))   # [dim]
            if arch.get("oai"):
                # gpt-oss: the FFN's input norm is HF's post_attention_layernorm, which
                # the converter maps to post_attention_norm (llama.cpp's attn_post_norm);
                # there is no ffn_norm and no norm of the attention output.
                self.load(layer, "ffn_norm", p + "post_attention_norm.weight", (c.dim,))
                layer["post_attn_norm"] = None
            else:
                self.load(layer, "ffn_norm", p + "ffn_norm.weight", (c.dim,))     # [dim]
                # Gemma: RMSNorm of the attention output and of the FFN output (the stored
                # weights already hold 1 + w: the converter adds 1 to every norm weight).
                self.load(layer, "post_attn_norm", p + "post_attention_norm.weight",
                          (c.dim,), not c.gemma)                                # [dim]
            self.load(layer, "post_ffn_norm", p + "post_ffw_norm.weight", (c.dim,),
                      not c.gemma)                                            # [dim]
            if c.mla:
                self.load_mla(layer, p, c)
            else:
                self.load_attention(layer, p, c, arch)
            if c.is_moe_layer(i):
                self.load_moe(layer, p, c)
            elif arch.get("fused") and p + "ffn_gate.weight" not in f.tensors:
                # phi3: ffn_up holds gate rows then up rows (HF's gate_up_proj, chunk(2)).
                F = c.ffn_dim
                self.load(layer, "w_gate_up", p + "ffn_up.weight", (2 * F, c.dim))  # [2ffn, dim]
                layer["w_gate"] = layer["w_gate_up"][:F]                           # [ffn, dim]
                layer["w_up"] = layer["w_gate_up"][F:]                             # [ffn, dim]
                layer["types"]["w_gate"] = layer["types"]["w_up"] = \
                    layer["types"]["w_gate_up"]
                self.load(layer, "w_down", p + "ffn_down.weight", (c.dim, F))     # [dim, ffn]
            else:
                self.load(layer, "w_gate", p + "ffn_gate.weight", (c.ffn_dim, c.dim))  # [ffn, dim]
                self.load(layer, "w_up", p + "ffn_up.weight", (c.ffn_dim, c.dim))      # [ffn, dim]
                self.load(layer, "w_down", p + "ffn_down.weight", (c.dim, c.ffn_dim))  # [dim, ffn]
            self.layers.append(layer)

    def load(self, layer, key, name, shape, optional=False):
        """layer[key] = the tensor (or None); its storage type goes to layer["types"][key]
        (only used to emulate ggml's activation rounding)."""
        layer[key] = self.w(name, shape, optional)
        if layer[key] is not None:
            layer["types"][key] = self.file.tensors[name].type_name

    def load_attention(self, layer, p, c: Config, arch):
        q_dim, kv_dim = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
        if arch.get("fused") and p + "attn_qkv.weight" in self.file.tensors:
            # phi3: one matrix, q rows then k rows then v rows (HF's qkv_proj).
            self.load(layer, "wqkv", p + "attn_qkv.weight", (q_dim + 2 * kv_dim, c.dim))
            qkv = layer["wqkv"]                                              # [q+2kv, dim]
            layer["wq"] = qkv[:q_dim]                                        # [q_dim, dim]
            layer["wk"] = qkv[q_dim:q_dim + kv_dim]                          # [kv_dim, dim]
            layer["wv"] = qkv[q_dim + kv_dim:]                               # [kv_dim, dim]
            for k in ("wq", "wk", "wv"):
                layer["types"][k] = layer["types"]["wqkv"]
        else:
            self.load(layer, "wq", p + "attn_q.weight", (q_dim, c.dim))      # [q_dim, dim]
            self.load(layer, "wk", p + "attn_k.weight", (kv_dim, c.dim))     # [kv_dim, dim]
            self.load(layer, "wv", p + "attn_v.weight", (kv_dim, c.dim))     # [kv_dim, dim]
        self.load(layer, "wo", p + "attn_output.weight", (c.dim, q_dim))     # [dim, q_dim]
        oai = bool(arch.get("oai"))
        self.load(layer, "bo", p + "attn_output.bias", (c.dim,), not oai)    # [dim]
        # Attention sinks (gpt-oss; optional elsewhere): one learned logit per query head.
        self.load(layer, "sinks", p + "attn_sinks.weight", (c.n_heads,), not oai)  # [H]
        bias = arch["qkv_bias"]
        self.load(layer, "bq", p + "attn_q.bias", (q_dim,), not bias)        # [q_dim]
        self.load(layer, "bk", p + "attn_k.bias", (kv_dim,), not bias)       # [kv_dim]
        self.load(layer, "bv", p + "attn_v.bias", (kv_dim,), not bias)       # [kv_dim]
        norm = arch["qk_norm"]
        self.load(layer, "q_norm", p + "attn_q_norm.weight", (c.head_dim,), not norm)
        self.load(layer, "k_norm", p + "attn_k_norm.weight", (c.head_dim,), not norm)

    def load_mla(self, layer, p, c: Config):
        H, R, nope, rope, vd = c.n_heads, c.kv_lora_rank, c.qk_nope, c.n_rot, c.v_head_dim
        q_out = H * (nope + rope)
        # V2-Lite has attn_q; the others attn_q_a -> attn_q_a_norm -> attn_q_b (as llama.cpp's
        # graph decides: by the presence of attn_q).
        self.load(layer, "wq", p + "attn_q.weight", (q_out, c.dim), optional=True)
        if layer["wq"] is None:
            if c.q_lora_rank <= 0:
                raise ValueError(f"{p}attn_q.weight missing and q_lora_rank is 0")
            ql = c.q_lora_rank
            self.load(layer, "wq_a", p + "attn_q_a.weight", (ql, c.dim))           # [ql, dim]
            self.load(layer, "q_a_norm", p + "attn_q_a_norm.weight", (ql,))        # [ql]
            self.load(layer, "wq_b", p + "attn_q_b.weight", (q_out, ql))           # [H*(n+r), ql]
        self.load(layer, "wkv_a", p + "attn_kv_a_mqa.weight", (R + rope, c.dim))   # [R+r, dim]
        self.load(layer, "kv_a_norm", p + "attn_kv_a_norm.weight", (R,))           # [R]
        self.load(layer, "wo", p + "attn_output.weight", (c.dim, H * vd))          # [dim, H*v]
        # Per head: wk_b[h] [R, nope] (k_nope_h = wk_b[h]^T c), wv_b[h] [v, R] (v_h = wv_b[h] c).
        if p + "attn_kv_b.weight" in self.file.tensors:
            self.load(layer, "wkv_b", p + "attn_kv_b.weight", (H * (nope + vd), R))
            kv = layer["wkv_b"].reshape(H, nope + vd, R)        # per head: nope K rows, v V rows
            layer["wk_b"] = kv[:, :nope, :].transpose(0, 2, 1)  # [H, R, nope]
            layer["wv_b"] = kv[:, nope:, :]                     # [H, v, R]
        else:
            self.load(layer, "wk_b", p + "attn_k_b.weight", (H, R, nope))          # [H, R, nope]
            self.load(layer, "wv_b", p + "attn_v_b.weight", (H, vd, R))            # [H, v, R]

    def load_moe(self, layer, p, c: Config):
        E, F, D = c.n_expert, c.expert_ffn_dim, c.dim
        self.load(layer, "gate_inp", p + "ffn_gate_inp.weight", (E, D))            # [E, dim]
        # gpt-oss: biases on the router logits and on each expert's three projections.
        oai = c.expert_act == "swiglu_oai"
        self.load(layer, "gate_inp_b", p + "ffn_gate_inp.bias", (E,), not oai)     # [E]
        self.load(layer, "exp_gate_b", p + "ffn_gate_exps.bias", (E, F), not oai)  # [E, F]
        self.load(layer, "exp_up_b", p + "ffn_up_exps.bias", (E, F), not oai)      # [E, F]
        self.load(layer, "exp_down_b", p + "ffn_down_exps.bias", (E, D), not oai)  # [E, dim]
        self.load(layer, "exp_probs_b", p + "exp_probs_b.bias", (E,), optional=True)  # [E]
        if p + "ffn_gate_up_exps.weight" in self.file.tensors:
            self.load(layer, "exp_gate_up", p + "ffn_gate_up_exps.weight", (E, 2 * F, D))
            layer["exp_gate"] = layer["exp_gate_up"][:, :F, :]                     # [E, F, dim]
            layer["exp_up"] = layer["exp_gate_up"][:, F:, :]                       # [E, F, dim]
            t = layer["types"]["exp_gate_up"]
            layer["types"]["exp_gate"] = layer["types"]["exp_up"] = t
        else:
            self.load(layer, "exp_gate", p + "ffn_gate_exps.weight", (E, F, D))    # [E, F, dim]
            self.load(layer, "exp_up", p + "ffn_up_exps.weight", (E, F, D))        # [E, F, dim]
        self.load(layer, "exp_down", p + "ffn_down_exps.weight", (E, D, F))        # [E, dim, F]
        if c.n_expert_shared:
            S = F * c.n_expert_shared
            self.load(layer, "sh_gate", p + "ffn_gate_shexp.weight", (S, D))       # [S, dim]
            self.load(layer, "sh_up", p + "ffn_up_shexp.weight", (S, D))           # [S, dim]
            self.load(layer, "sh_down", p + "ffn_down_shexp.weight", (D, S))       # [dim, S]


# ----------------------------------------------------------------------------------------------
# The building blocks.


def rmsnorm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x [..., n], weight [n] -> [..., n]: x / sqrt(mean(x^2) + eps) * weight."""
    ms = np.mean(x * x, axis=-1, keepdims=True)  # [..., 1]
    return x / np.sqrt(ms + eps) * weight


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


GELU_COEF_A = 0.044715
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + np.tanh(SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x)))


def gelu_like_ggml(x: np.ndarray) -> np.ndarray:
    """GELU as ggml's CPU backend computes it (GGML_GELU_FP16): x <= -10 -> 0, x >= 10 -> x,
    otherwise a lookup in a table of f16 values indexed by x rounded to f16, so the input and
    the result both carry f16 precision (relative error up to ~2^-11)."""
    xf = x.astype(np.float32)
    h = xf.astype(np.float16).astype(np.float64)
    y = gelu_tanh(h).astype(np.float32).astype(np.float16).astype(np.float64)
    y = np.where(xf >= 10.0, xf.astype(np.float64), y)
    return np.where(xf <= -10.0, 0.0, y)


def softcap(x: np.ndarray, cap: float) -> np.ndarray:
    """Gemma's soft-capping: cap * tanh(x / cap), for cap > 0 (identity otherwise)."""
    return cap * np.tanh(x / cap) if cap > 0 else x


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def swiglu_oai(gate: np.ndarray, up: np.ndarray, alpha: float = OAI_SWIGLU_ALPHA,
               limit: float = OAI_SWIGLU_LIMIT) -> np.ndarray:
    """gpt-oss's clamped SwiGLU (llama.cpp's ggml_swiglu_oai, HF's GptOssExperts._apply_gate):
    g = min(gate, limit), u = clamp(up, -limit, limit), g * sigmoid(alpha * g) * (u + 1)."""
    g = np.minimum(gate, limit)
    u = np.clip(up, -limit, limit)
    return g * np.exp(-np.logaddexp(0.0, -alpha * g)) * (u + 1.0)  # sigmoid without overflow


def softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, float64; -inf entries get probability 0."""
    m = np.max(x, axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=-1, keepdims=True)


def softmax_with_sink(x: np.ndarray, sink: float) -> np.ndarray:
    """Softmax over the last axis with one more logit, `sink`, whose probability is dropped
    (gpt-oss's attention sinks; ggml_soft_max_add_sinks, HF's eager_attention_forward):
    p_j = exp(x_j - m) / (sum_i exp(x_i - m) + exp(sink - m)), m = max(max_i x_i, sink).
    The rows then sum to less than 1: the sink only changes the normalisation."""
    m = np.maximum(np.max(x, axis=-1, keepdims=True), sink)
    e = np.exp(x - m)
    return e / (np.sum(e, axis=-1, keepdims=True) + np.exp(sink - m))


def attention_head(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, mask=None,
                   softcap_c: float = 0.0, sink=None) -> np.ndarray:
    """One head: q [T, hd], k [S, hd], v [S, hd] -> [T, hd]. Scores q.k * scale, soft-capped
    (c > 0), masked (True = not seen), softmax over the keys (with the head's sink logit, which
    is not scaled, when `sink` is given), times v."""
    scores = q @ k.T * scale                                            # [T, S]
    scores = softcap(scores, softcap_c)
    if mask is not None:
        scores = np.where(mask, -np.inf, scores)
    att = softmax(scores) if sink is None else softmax_with_sink(scores, float(sink))
    return att @ v                                                      # [T, hd]


def route(logits: np.ndarray, c: Config, bias=None) -> tuple:
    """Router logits [T, E] -> (chosen experts [T, k], their weights [T, k]) as llama.cpp's
    build_moe_ffn: gating function, selection bias (choice only), expert groups, top-k (ties:
    the lower expert id), weights from the unbiased probabilities (softmax_weight: a softmax
    over the chosen logits), optional renormalisation and scale."""
    if c.expert_gating == "softmax_weight":  # gpt-oss: choose by the logits themselves
        probs = logits                                                           # [T, E]
    else:
        probs = softmax(logits) if c.expert_gating == "softmax" else sigmoid(logits)  # [T, E]
    select = probs if bias is None else probs + bias                             # [T, E]
    n_tok, n_exp = select.shape
    if c.n_expert_groups > 1:
        g = select.reshape(n_tok, c.n_expert_groups, n_exp // c.n_expert_groups)  # [T, G, E/G]
        score = np.sort(g, axis=-1)[..., -2:].sum(axis=-1)                        # [T, G]
        keep = np.argsort(-score, axis=-1, kind="stable")[:, :c.n_group_used]     # [T, g]
        dropped = np.ones((n_tok, c.n_expert_groups), dtype=bool)
        np.put_along_axis(dropped, keep, False, axis=-1)
        select = np.where(dropped[..., None], -np.inf, g).reshape(n_tok, n_exp)
    chosen = np.argsort(-select, axis=-1, kind="stable")[:, :c.n_expert_used]     # [T, k]
    weights = np.take_along_axis(probs, chosen, axis=-1)                           # [T, k]
    if c.expert_gating == "softmax_weight":  # a softmax over the k chosen logits
        weights = softmax(weights)                                                 # [T, k]
    if c.expert_weights_norm:
        weights = weights / np.maximum(weights.sum(axis=-1, keepdims=True), MIN_WEIGHT_SUM)
    if c.expert_weights_scale not in (0.0, 1.0):
        weights = weights * c.expert_weights_scale
    return chosen, weights


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
    q8_0 for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/MXFP4 (q8_1 has the same values), q8_K for the K-quants."""
    if weight_type == "F16":
        return x.astype(np.float16).astype(np.float64)
    if weight_type == "BF16":  # round-to-nearest-even on the top 16 bits of the f32
        bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        return bits.astype(np.uint32).view(np.float32).astype(np.float64)
    if weight_type in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "MXFP4"):
        return _round_q8_blocks(x, 32, signed_max=False)
    if weight_type in ("Q4_K", "Q5_K", "Q6_K"):
        return _round_q8_blocks(x, 256, signed_max=True)
    return x


def rope_angles(c: Config, positions: np.ndarray, freq_factors, local: bool = False) -> tuple:
    """positions [T] -> (cos [T, n_rot/2], sin [T, n_rot/2]) for pair index i.

    theta(pos, i) = pos * base^(-2i/n_rot), divided by freq_factors[i] if the file has them.
    linear scaling: theta *= 1/factor.
    yarn (ggml's rope_yarn with ext_factor 1): a per-pair blend of the interpolated
    (theta/factor) and extrapolated (theta) angle, ramped between the "correction dims" computed
    from beta_fast=32 / beta_slow=1 and original_context_length, rounded down / up to whole
    pair indices as ggml_rope_yarn_corr_dims does (c.yarn_truncate; HF's gpt-oss: unrounded).
    cos and sin are multiplied by c.rope_mag: 1 + 0.1 * ln(factor) for YaRN, except deepseek2
    files with a yarn_log_multiplier, where llama.cpp's attn_factor cancels it to 1.
    local (gemma3's windowed layers): base c.rope_base_swa and no scaling at all.
    """
    half = c.n_rot // 2
    i = np.arange(half, dtype=np.float64)                          # [n_rot/2]
    base = c.rope_base_swa if local else c.rope_base
    inv_freq = base ** (-2.0 * i / c.n_rot)                        # [n_rot/2]
    if freq_factors is not None:
        inv_freq = inv_freq / freq_factors
    theta = positions[:, None].astype(np.float64) * inv_freq[None, :]  # [T, n_rot/2]
    if local:
        return np.cos(theta) * c.rope_mag_local, np.sin(theta) * c.rope_mag_local
    if c.rope_scaling == "linear":
        theta = theta / c.rope_factor
    elif c.rope_scaling == "yarn":
        def corr_dim(n_rotations):
            return (c.n_rot * math.log(c.rope_orig_ctx / (n_rotations * 2 * math.pi))
                    / (2 * math.log(c.rope_base)))
        low, high = corr_dim(c.yarn_beta_fast), corr_dim(c.yarn_beta_slow)
        if c.yarn_truncate:  # llama.cpp; HF's gpt-oss config says "truncate": false
            low, high = math.floor(low), math.ceil(high)
        low, high = max(0.0, low), min(c.n_rot - 1.0, high)
        ramp = 1.0 - np.clip((i - low) / max(0.001, high - low), 0.0, 1.0)  # [n_rot/2]
        theta_interp = theta / c.rope_factor                       # [T, n_rot/2]
        theta = theta_interp * (1.0 - ramp) + theta * ramp
    return np.cos(theta) * c.rope_mag, np.sin(theta) * c.rope_mag


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

    def __init__(self, path, ggml_activations: bool = False,
                 mla_form: str = "decompressed", ctx: int | None = None):
        """ggml_activations: round each matmul's input as ggml's CPU backend does (see
        round_activations_like_ggml), and compute GELU through ggml's f16 table
        (gelu_like_ggml), to reproduce llama.cpp's own numbers on quantized files and on
        GeGLU models. Off by default: the reference is exact float64 math on the dequantized
        weights.
        mla_form (deepseek2 only): "decompressed" (per-head keys and values rebuilt from the
        cached latent) or "absorbed" (attention in the latent space); the same math.
        ctx (phi3's LongRoPE): the context the model runs with, as llama.cpp's n_ctx per
        sequence or kvserve's --ctx; None: the file's context_length. It only picks the rope
        factor set (config.ctx may be changed later).
        path: a GGUF path, or an already parsed GGUFFile."""
        if mla_form not in MLA_FORMS:
            raise ValueError(f"mla_form {mla_form!r} not one of {MLA_FORMS}")
        self.ggml_activations = ggml_activations
        self.mla_form = mla_form
        self.file = path if isinstance(path, GGUFFile) else GGUFFile(path)
        self.config = Config.from_gguf(self.file, ctx)
        self.weights = Weights(self.file, self.config)
        self.reset()

    def reset(self):
        c = self.config
        if c.mla:
            # Per layer, one row per position: [normalised latent (kv_lora_rank) | roped k_pe
            # (n_rot)], shared by all heads. v_cache is unused.
            width = c.kv_lora_rank + c.n_rot
            self.k_cache = [np.zeros((0, width)) for _ in range(c.n_layers)]
            self.v_cache = [None for _ in range(c.n_layers)]
            return
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

    @staticmethod
    def attention_mask(n_past: int, n_new: int, window: int = 0) -> np.ndarray:
        """[T, S] True where query t (at position p = n_past + t) must not see key position j:
        j > p (causal), and with a sliding window W > 0 also p - j >= W (llama.cpp's
        LLAMA_SWA_TYPE_STANDARD), so p sees the W positions p-W+1..p."""
        q_pos = n_past + np.arange(n_new)                               # [T]
        k_pos = np.arange(n_past + n_new)                               # [S]
        masked = k_pos[None, :] > q_pos[:, None]                        # [T, S]
        if window > 0:
            masked |= q_pos[:, None] - k_pos[None, :] >= window
        return masked

    def attention(self, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                  sinks=None) -> np.ndarray:
        """q [T, H, hd], k/v [T, Hkv, hd] (new tokens) -> [T, H*hd]; appends k/v to the cache.

        Query t (absolute position n_past + t) attends to cached positions 0..n_past+t, or only
        to the last W of them on a layer with a sliding window W. Head h reads kv head
        h // (H / Hkv) (GQA; MQA when Hkv == 1, MHA when Hkv == H). Scores are soft-capped
        (Gemma) after the scale and before the mask. sinks [H] (gpt-oss): head h's softmax
        has one more logit, sinks[h] (not scaled), whose probability is dropped.
        """
        c = self.config
        n_past = self.k_cache[layer].shape[0]
        self.k_cache[layer] = np.concatenate([self.k_cache[layer], k], axis=0)  # [S, Hkv, hd]
        self.v_cache[layer] = np.concatenate([self.v_cache[layer], v], axis=0)  # [S, Hkv, hd]
        keys, values = self.k_cache[layer], self.v_cache[layer]
        n_new = q.shape[0]
        mask = self.attention_mask(n_past, n_new, c.layer_window(layer))  # [T, S]
        group = c.n_heads // c.n_kv_heads
        out = np.zeros((n_new, c.n_heads, c.head_dim))                  # [T, H, hd]
        for h in range(c.n_heads):
            kvh = h // group
            out[:, h, :] = attention_head(q[:, h, :], keys[:, kvh, :], values[:, kvh, :],
                                          c.kq_scale, mask, c.attn_softcap,
                                          None if sinks is None else sinks[h])  # [T, hd]
        return out.reshape(n_new, c.n_heads * c.head_dim)

    def mla_attention(self, layer: int, L: dict, xb: np.ndarray, cos, sin) -> np.ndarray:
        """deepseek2's multi-head latent attention: xb [T, dim] (normed) -> [T, H*v].

        Caches [latent | k_pe] per position; see the module docstring for both forms."""
        c, ty = self.config, L["types"]
        H, R, nope, rope, vd = c.n_heads, c.kv_lora_rank, c.qk_nope, c.n_rot, c.v_head_dim
        n_new = xb.shape[0]
        if L["wq"] is not None:
            q = self.linear(xb, L["wq"], ty["wq"])                      # [T, H*(nope+rope)]
        else:
            qa = self.linear(xb, L["wq_a"], ty["wq_a"])                 # [T, q_lora]
            qa = rmsnorm(qa, L["q_a_norm"], c.norm_eps)                 # [T, q_lora]
            q = self.linear(qa, L["wq_b"], ty["wq_b"])                  # [T, H*(nope+rope)]
        q = q.reshape(n_new, H, nope + rope)                            # [T, H, nope+rope]
        q_nope = q[..., :nope]                                          # [T, H, nope]
        q_pe = apply_rope(q[..., nope:], cos, sin, rope, c.rope_style)  # [T, H, rope]
        kv = self.linear(xb, L["wkv_a"], ty["wkv_a"])                   # [T, R+rope]
        latent = rmsnorm(kv[:, :R], L["kv_a_norm"], c.norm_eps)         # [T, R]
        k_pe = apply_rope(kv[:, None, R:], cos, sin, rope, c.rope_style)[:, 0, :]  # [T, rope]

        n_past = self.k_cache[layer].shape[0]
        row = np.concatenate([latent, k_pe], axis=1)                    # [T, R+rope]
        self.k_cache[layer] = np.concatenate([self.k_cache[layer], row], axis=0)  # [S, R+rope]
        cache = self.k_cache[layer]
        lat_all, pe_all = cache[:, :R], cache[:, R:]                    # [S, R], [S, rope]
        mask = self.attention_mask(n_past, n_new)                       # [T, S]
        out = np.zeros((n_new, H, vd))                                  # [T, H, v]
        if self.mla_form == "decompressed":
            k_nope = np.einsum("hrd,sr->shd", L["wk_b"], lat_all)       # [S, H, nope]
            values = np.einsum("hvr,sr->shv", L["wv_b"], lat_all)       # [S, H, v]
            qcur = np.concatenate([q_nope, q_pe], axis=-1)              # [T, H, nope+rope]
            kcur = np.concatenate(
                [k_nope, np.broadcast_to(pe_all[:, None, :], (pe_all.shape[0], H, rope))],
                axis=-1)                                                # [S, H, nope+rope]
            for h in range(H):
                scores = qcur[:, h, :] @ kcur[:, h, :].T * c.kq_scale   # [T, S]
                scores[mask] = -np.inf
                out[:, h, :] = softmax(scores) @ values[:, h, :]        # [T, v]
        else:  # absorbed
            q_abs = np.einsum("hrd,thd->thr", L["wk_b"], q_nope)        # [T, H, R]
            qcur = np.concatenate([q_abs, q_pe], axis=-1)               # [T, H, R+rope]
            for h in range(H):
                scores = qcur[:, h, :] @ cache.T * c.kq_scale           # [T, S]
                scores[mask] = -np.inf
                o_lat = softmax(scores) @ lat_all                       # [T, R]
                out[:, h, :] = o_lat @ L["wv_b"][h].T                   # [T, v]
        return out.reshape(n_new, H * vd)

    def act(self, x: np.ndarray) -> np.ndarray:
        """The FFN's gate activation: silu, or (Gemma) tanh-approximate GELU, which
        ggml_activations computes through ggml's f16 table."""
        if self.config.ffn_act == "silu":
            return silu(x)
        return gelu_like_ggml(x) if self.ggml_activations else gelu_tanh(x)

    def ffn(self, L: dict, xb: np.ndarray) -> np.ndarray:
        """Dense SwiGLU (GeGLU for Gemma) FFN: xb [T, dim] -> [T, dim]."""
        ty = L["types"]
        gate = self.act(self.linear(xb, L["w_gate"], ty["w_gate"]))     # [T, ffn]
        up = self.linear(xb, L["w_up"], ty["w_up"])                     # [T, ffn]
        return self.linear(gate * up, L["w_down"], ty["w_down"])        # [T, dim]

    def moe(self, L: dict, xb: np.ndarray) -> np.ndarray:
        """Mixture of experts (+ shared experts): xb [T, dim] -> [T, dim]."""
        c, ty = self.config, L["types"]
        logits = self.linear(xb, L["gate_inp"], ty["gate_inp"])         # [T, E]
        if L["gate_inp_b"] is not None:
            logits = logits + L["gate_inp_b"]                           # [T, E]
        chosen, weights = route(logits, c, L["exp_probs_b"])            # [T, k] each
        out = np.zeros_like(xb)                                         # [T, dim]
        for e in np.unique(chosen):
            rows, slot = np.nonzero(chosen == e)                        # tokens routed to e
            x = xb[rows]                                                # [n, dim]
            gate = self.linear(x, L["exp_gate"][e], ty["exp_gate"])     # [n, F]
            up = self.linear(x, L["exp_up"][e], ty["exp_up"])           # [n, F]
            if L["exp_gate_b"] is not None:  # gpt-oss
                gate, up = gate + L["exp_gate_b"][e], up + L["exp_up_b"][e]
            a = swiglu_oai(gate, up) if c.expert_act == "swiglu_oai" else silu(gate) * up
            y = self.linear(a, L["exp_down"][e], ty["exp_down"])        # [n, dim]
            if L["exp_down_b"] is not None:
                y = y + L["exp_down_b"][e]                              # [n, dim]
            out[rows] += weights[rows, slot][:, None] * y
        if c.n_expert_shared:
            gate = silu(self.linear(xb, L["sh_gate"], ty["sh_gate"]))   # [T, S]
            up = self.linear(xb, L["sh_up"], ty["sh_up"])               # [T, S]
            out = out + self.linear(gate * up, L["sh_down"], ty["sh_down"])  # [T, dim]
        return out

    def forward(self, tokens) -> np.ndarray:
        """Feeds `tokens` after the cached ones; returns logits [len(tokens), vocab] (float64)."""
        c, w = self.config, self.weights
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.min() < 0 or tokens.max() >= c.vocab_size:
            raise ValueError(f"token id out of range [0, {c.vocab_size})")
        n_new = tokens.shape[0]
        positions = self.n_past + np.arange(n_new)                      # [T]
        factors = w.rope_freqs                                          # [n_rot/2] or None
        if factors is None:  # phi3's LongRoPE: the set the context picks (or None)
            factors = w.rope_factors["long" if c.long_rope_factors else "short"]
        cos, sin = rope_angles(c, positions, factors)                   # [T, n_rot/2] each
        if c.local_rope:  # gemma3's windowed layers: their own base, no scaling
            cos_l, sin_l = rope_angles(c, positions, factors, local=True)
        x = w.token_embd[tokens] * c.embed_scale                        # [T, dim]
        for li, L in enumerate(w.layers):
            xb = rmsnorm(x, L["attn_norm"], c.norm_eps)                 # [T, dim]
            ty = L["types"]
            if c.mla:
                att = self.mla_attention(li, L, xb, cos, sin)           # [T, H*v]
            else:
                q = self.linear(xb, L["wq"], ty["wq"])                  # [T, H*hd]
                k = self.linear(xb, L["wk"], ty["wk"])                  # [T, Hkv*hd]
                v = self.linear(xb, L["wv"], ty["wv"])                  # [T, Hkv*hd]
                if L["bq"] is not None:
                    q, k, v = q + L["bq"], k + L["bk"], v + L["bv"]
                q = q.reshape(n_new, c.n_heads, c.head_dim)             # [T, H, hd]
                k = k.reshape(n_new, c.n_kv_heads, c.head_dim)          # [T, Hkv, hd]
                v = v.reshape(n_new, c.n_kv_heads, c.head_dim)          # [T, Hkv, hd]
                if L["q_norm"] is not None:
                    q = rmsnorm(q, L["q_norm"], c.norm_eps)             # per head, [T, H, hd]
                    k = rmsnorm(k, L["k_norm"], c.norm_eps)             # [T, Hkv, hd]
                cs, sn = (cos_l, sin_l) if c.local_rope and c.is_swa_layer(li) else (cos, sin)
                q = apply_rope(q, cs, sn, c.n_rot, c.rope_style)        # [T, H, hd]
                k = apply_rope(k, cs, sn, c.n_rot, c.rope_style)        # [T, Hkv, hd]
                att = self.attention(li, q, k, v, L["sinks"])           # [T, H*hd]
            att = self.linear(att, L["wo"], ty["wo"])                   # [T, dim]
            if L.get("bo") is not None:  # gpt-oss
                att = att + L["bo"]                                     # [T, dim]
            if L["post_attn_norm"] is not None:
                att = rmsnorm(att, L["post_attn_norm"], c.norm_eps)     # [T, dim]
            x = x + att                                                 # [T, dim]
            xb = rmsnorm(x, L["ffn_norm"], c.norm_eps)                  # [T, dim]
            f = self.moe(L, xb) if c.is_moe_layer(li) else self.ffn(L, xb)  # [T, dim]
            if L["post_ffn_norm"] is not None:
                f = rmsnorm(f, L["post_ffn_norm"], c.norm_eps)          # [T, dim]
            x = x + f                                                   # [T, dim]
        x = rmsnorm(x, w.output_norm, c.norm_eps)                       # [T, dim]
        logits = self.linear(x, w.output, w.output_type)                # [T, vocab]
        return softcap(logits, c.final_softcap)                         # [T, vocab]

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


def describe(c: Config) -> str:
    s = (f"{c.arch}: layers={c.n_layers} dim={c.dim} ffn={c.ffn_dim} heads={c.n_heads}/"
         f"{c.n_kv_heads} head_dim={c.head_dim} n_rot={c.n_rot} vocab={c.vocab_size} "
         f"rope={c.rope_style} base={c.rope_base} scaling={c.rope_scaling} "
         f"rope_mag={c.rope_mag:.6g} kq_scale={c.kq_scale:.6g}")
    if c.mla:
        s += (f" q_lora={c.q_lora_rank} kv_lora={c.kv_lora_rank} nope={c.qk_nope} "
              f"v_head={c.v_head_dim}")
    if c.sliding_window:
        s += (f" window={c.sliding_window} windowed_layers="
              + "".join("L" if c.is_swa_layer(i) else "G" for i in range(c.n_layers)))
        if c.local_rope:
            s += f" local_base={c.rope_base_swa}"
    if ARCHITECTURES[c.arch].get("fused"):
        s += (f" ctx={c.ctx} orig_ctx={c.rope_orig_ctx} rope_factors="
              f"{'long' if c.long_rope_factors else 'short'} attn_factor="
              f"{c.rope_attn_factor:.6g}")
    if c.expert_act != "silu":
        s += f" expert_act={c.expert_act}"
    if c.gemma:
        s += (f" embed_scale={c.embed_scale:.6g} attn_softcap={c.attn_softcap:g} "
              f"final_softcap={c.final_softcap:g} act={c.ffn_act}")
    if c.n_expert:
        s += (f" experts={c.n_expert} used={c.n_expert_used} expert_ffn={c.expert_ffn_dim} "
              f"shared={c.n_expert_shared} dense_lead={c.n_dense_lead} gating={c.expert_gating}"
              f" norm={c.expert_weights_norm} scale={c.expert_weights_scale}")
        if c.n_expert_groups > 1:
            s += f" groups={c.n_group_used}/{c.n_expert_groups}"
    return s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True, help="comma-separated prompt token ids")
    ap.add_argument("--out", help="write logits [n_ids, vocab] (float32) to this .npy")
    ap.add_argument("--greedy", type=int, default=0, help="generate N tokens greedily")
    ap.add_argument("--ggml-activations", action="store_true",
                    help="round matmul inputs as ggml's CPU backend does (f16 / q8_0 / q8_K) "
                         "and compute GELU through its f16 table")
    ap.add_argument("--mla-form", choices=MLA_FORMS, default="decompressed",
                    help="deepseek2 attention: per-head keys/values decompressed from the "
                         "latent, or queries absorbed into the latent (same math)")
    ap.add_argument("--ctx", type=int, default=None,
                    help="the context the model runs with (phi3: the long rope factors iff "
                         "ctx > rope.scaling.original_context_length); default: the file's "
                         "context_length")
    args = ap.parse_args(argv)
    ids = [int(s) for s in args.ids.split(",") if s.strip()]
    model = Transformer(args.model, ggml_activations=args.ggml_activations,
                        mla_form=args.mla_form, ctx=args.ctx)
    print(describe(model.config), file=sys.stderr)
    logits = model.logits(ids)
    if args.out:
        np.save(args.out, logits.astype(np.float32))
    print("argmax per position:", ",".join(str(int(i)) for i in logits.argmax(axis=1)))
    if args.greedy:
        gen, margins = model.greedy(ids, args.greedy)
        print("greedy:", ",".join(str(t) for t in gen))
        print(f"min top-2 margin: {min(margins):.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
