#!/usr/bin/python3
"""Writes the phi3 fixture in this folder with llama.cpp's own gguf-py.

    /usr/bin/python3 tests/data/models/make_phi3_fixture.py GGUF_PY_DIR [--out DIR]

GGUF_PY_DIR is a checkout of llama.cpp's `gguf-py` folder (the one that holds the `gguf`
package; it needs numpy and pyyaml). Weights are seeded random numbers (the scheme of
make_moe_fixtures.py, whose helpers this script uses), so the file is reproducible byte for byte
with the same gguf-py. The layout and metadata follow llama.cpp's convert_hf_to_gguf.py
(Phi3MiniModel) for a Phi-3 model with LongRoPE ("longrope" / "su" rope_scaling):

  gguf-py-phi3-f32.gguf  phi3: 2 layers, hidden 64, 4 heads / 2 KV heads (head_dim 16), ffn 96;
                         blk.N.attn_qkv [64, 128] (q rows, then k rows, then v rows, as HF's
                         qkv_proj), blk.N.ffn_up [64, 192] (the 96 gate rows, then the 96 up
                         rows, as HF's gate_up_proj), attn_output, ffn_down, attn_norm,
                         ffn_norm; output_norm, untied output.weight;
                         rope_factors_short.weight and rope_factors_long.weight [8] (one per
                         rotated pair; short in [1, 2], long in [1, 4]);
                         context_length 256, rope.scaling.original_context_length 64,
                         rope.scaling.attn_factor sqrt(1 + ln(256/64) / ln(64)) = sqrt(4/3) as
                         the converter computes it, rope.dimension_count 16 (hidden / heads),
                         rope base 10000, attention.sliding_window 8 (every layer windowed in
                         llama.cpp's February 2025 sources), no rope.scaling.type (the
                         converter writes none for phi3).

A run whose context is at most 64 uses the short factors, a longer one the long factors
(tools/reference/README.md). Tokenizer metadata is copied from gguf-py-llama-gqa-f32.gguf, as for
the other fixtures.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_moe_fixtures import (HIDDEN, VOCAB, Rand, common_header,  # noqa: E402
                               fixture_main, write)
from gguf_ref import GGUFFile  # noqa: E402  (tools/reference/, on the path make_moe_fixtures set)

# Chosen (among 150 tried) so that greedy decoding has no near tie between the two best
# logits on the prompts of tests/model/reference/test_reference.py and llamacpp_ids.json, with
# either factor set.
SEED = 148
LAYERS, HEADS, KV_HEADS, N_FF, WINDOW = 2, 4, 2, 96, 8
CTX, ORIG_CTX = 256, 64
FILE_NAME = "gguf-py-phi3-f32.gguf"


def longrope_attn_factor(ctx: int, orig_ctx: int) -> float:
    """Phi3MiniModel.generate_extra_tensors for rope_scaling type "su" / "longrope"."""
    scale = ctx / orig_ctx
    return math.sqrt(1 + math.log(scale) / math.log(orig_ctx)) if scale > 1.0 else 1.0


def phi3(gguf, out: Path, tok: GGUFFile, seed: int | None = None):
    head_dim = HIDDEN // HEADS
    q_dim, kv_dim = HEADS * head_dim, KV_HEADS * head_dim
    r = Rand(SEED if seed is None else seed)
    t = {"token_embd.weight": r.embd(VOCAB, HIDDEN)}
    for i in range(LAYERS):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = r.norm(HIDDEN)
        # q, k, v drawn one by one and stacked as HF's qkv_proj holds them (NEOX rope: no row
        # permutation for phi3).
        q, k, v = r.mat(q_dim, HIDDEN), r.mat(kv_dim, HIDDEN), r.mat(kv_dim, HIDDEN)
        t[p + "attn_qkv.weight"] = np.concatenate([q, k, v])
        t[p + "attn_output.weight"] = r.mat(HIDDEN, q_dim)
        t[p + "ffn_norm.weight"] = r.norm(HIDDEN)
        gate, up = r.mat(N_FF, HIDDEN), r.mat(N_FF, HIDDEN)
        t[p + "ffn_up.weight"] = np.concatenate([gate, up])
        t[p + "ffn_down.weight"] = r.mat(HIDDEN, N_FF)
    t["output_norm.weight"] = r.norm(HIDDEN)
    t["output.weight"] = r.mat(VOCAB, HIDDEN)
    # LongRoPE factor sets, one value per rotated pair (the converter writes them as float32).
    t["rope_factors_long.weight"] = r.rng.uniform(1.0, 4.0, head_dim // 2).astype(np.float32)
    t["rope_factors_short.weight"] = r.rng.uniform(1.0, 2.0, head_dim // 2).astype(np.float32)

    def meta(w):
        # general.name must not contain "phi3" / "phi-3": llama.cpp's vocabulary loader then
        # sets attributes of Phi-3's <|endoftext|>, which this small vocabulary does not have.
        common_header(gguf, w, "phi3", "longrope", layers=LAYERS, ffn=N_FF, heads=HEADS,
                      kv_heads=KV_HEADS, ctx=CTX, rope_dims=head_dim)
        w.add_rope_scaling_orig_ctx_len(ORIG_CTX)
        w.add_sliding_window(WINDOW)
        w.add_rope_scaling_attn_factors(longrope_attn_factor(CTX, ORIG_CTX))

    write(gguf, out / FILE_NAME, "phi3", meta, t, tok)


if __name__ == "__main__":
    sys.exit(fixture_main(__doc__, phi3, SEED))
