#!/usr/bin/python3
"""Writes the gpt-oss fixture in this folder with llama.cpp's own gguf-py.

    /usr/bin/python3 tests/data/models/make_gpt_oss_fixture.py GGUF_PY_DIR [--out DIR]

GGUF_PY_DIR is a checkout of llama.cpp's `gguf-py` folder (the one that holds the `gguf`
package; it needs numpy and pyyaml). GGUFWriter takes any architecture string and tensor name,
so a gguf-py that predates gpt-oss writes the file too. Weights are seeded random numbers (the
scheme of make_moe_fixtures.py, whose helpers this script uses), so the file is reproducible
byte for byte with the same gguf-py. The layout and metadata follow llama.cpp's
convert_hf_to_gguf.py (GptOssModel) and the tensors its gpt-oss loader creates, in F32 (real
files store the experts in MXFP4):

  gguf-py-gpt-oss-f32.gguf  gpt-oss: 4 layers, hidden 64, 4 heads / 2 KV heads, key_length /
                            value_length 32 (!= hidden / heads; no rope.dimension_count, so the
                            whole head is rotated); per layer attn_norm, attn_q / attn_k /
                            attn_v with biases, attn_output [128, 64] with a bias,
                            attn_sinks [4], post_attention_norm (the FFN's input norm; there is
                            no ffn_norm), ffn_gate_inp [64, 4] with a bias [4], ffn_gate_exps /
                            ffn_up_exps [64, 32, 4] with biases [32, 4], ffn_down_exps
                            [32, 64, 4] with a bias [64, 4]; output_norm, untied output.weight;
                            expert_count 4, expert_used_count 2, expert_feed_forward_length 32
                            (feed_forward_length 32 too: the converter writes HF's
                            intermediate_size for both), attention.sliding_window 8 (layers 0
                            and 2 windowed), rope.freq_base 150000 with rope.scaling.type yarn,
                            factor 4, original_context_length 64, context_length 256.

The gate and up projections are drawn with gain 3 so that the clamped SwiGLU's limits (gate
<= 7, |up| <= 7) are reached on the test prompts; the sinks around 1 so that they take a
noticeable share of each softmax. Tokenizer metadata is copied from gguf-py-llama-gqa-f32.gguf,
as for the other fixtures. tools/reference/README.md says where each convention was read.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_moe_fixtures import (HIDDEN, VOCAB, Rand, common_header,  # noqa: E402
                               fixture_main, write)
from gguf_ref import GGUFFile  # noqa: E402  (tools/reference/, on the path make_moe_fixtures set)

# Chosen (among the first 1000) so that on the prompts of tests/model/reference/test_reference.py
# and llamacpp_ids.json no router choice is a near tie and greedy decoding has no near tie
# between the two best logits (tests/data/models/README.md gives the margins).
SEED = 461
LAYERS, HEADS, KV_HEADS, HEAD_DIM = 4, 4, 2, 32
N_EXPERT, N_USED, N_FF_EXP = 4, 2, 32
WINDOW, CTX, ORIG_CTX, YARN_FACTOR, ROPE_BASE = 8, 256, 64, 4.0, 150000.0
ROUTER_GAIN = 3.0   # router logits ~ N(0, 9): decided choices
EXPERT_GAIN = 3.0   # gate / up ~ N(0, 9): the clamps at 7 are reached
FILE_NAME = "gguf-py-gpt-oss-f32.gguf"


def gpt_oss(gguf, out: Path, tok: GGUFFile, seed: int | None = None):
    q_dim, kv_dim = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    r = Rand(SEED if seed is None else seed)
    t = {"token_embd.weight": r.embd(VOCAB, HIDDEN)}
    for i in range(LAYERS):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = r.norm(HIDDEN)
        # NEOX rope: no row permutation (the converter permutes nothing for gpt-oss).
        t[p + "attn_q.weight"] = r.mat(q_dim, HIDDEN)
        t[p + "attn_q.bias"] = r.vec(q_dim, 0.2)
        t[p + "attn_k.weight"] = r.mat(kv_dim, HIDDEN)
        t[p + "attn_k.bias"] = r.vec(kv_dim, 0.2)
        t[p + "attn_v.weight"] = r.mat(kv_dim, HIDDEN)
        t[p + "attn_v.bias"] = r.vec(kv_dim, 0.2)
        t[p + "attn_output.weight"] = r.mat(HIDDEN, q_dim)
        t[p + "attn_output.bias"] = r.vec(HIDDEN, 0.2)
        # HF's self_attn.sinks; the converter appends ".weight" to the name.
        t[p + "attn_sinks.weight"] = (1.0 + r.vec(HEADS, 1.0)).astype(np.float32)
        t[p + "post_attention_norm.weight"] = r.norm(HIDDEN)
        t[p + "ffn_gate_inp.weight"] = r.mat(N_EXPERT, HIDDEN, gain=ROUTER_GAIN)
        t[p + "ffn_gate_inp.bias"] = r.vec(N_EXPERT, 0.5)
        # Stacked over experts (numpy [E, F, hidden] = GGUF dims [hidden, F, E]); the converter
        # takes gate = HF gate_up_proj columns 0, 2, 4, ... and up = columns 1, 3, 5, ...
        t[p + "ffn_gate_exps.weight"] = r.mat(N_FF_EXP, HIDDEN, (N_EXPERT,), gain=EXPERT_GAIN)
        t[p + "ffn_gate_exps.bias"] = r.vec(N_EXPERT * N_FF_EXP, 0.5).reshape(N_EXPERT, N_FF_EXP)
        t[p + "ffn_up_exps.weight"] = r.mat(N_FF_EXP, HIDDEN, (N_EXPERT,), gain=EXPERT_GAIN)
        t[p + "ffn_up_exps.bias"] = r.vec(N_EXPERT * N_FF_EXP, 0.5).reshape(N_EXPERT, N_FF_EXP)
        t[p + "ffn_down_exps.weight"] = r.mat(HIDDEN, N_FF_EXP, (N_EXPERT,))
        t[p + "ffn_down_exps.bias"] = r.vec(N_EXPERT * HIDDEN, 0.2).reshape(N_EXPERT, HIDDEN)
    t["output_norm.weight"] = r.norm(HIDDEN)
    t["output.weight"] = r.mat(VOCAB, HIDDEN)

    def meta(w):
        common_header(gguf, w, "gpt-oss", "gpt-oss", layers=LAYERS, ffn=N_FF_EXP, heads=HEADS,
                      kv_heads=KV_HEADS, ctx=CTX, rope_base=ROPE_BASE)
        w.add_key_length(HEAD_DIM)
        w.add_value_length(HEAD_DIM)
        w.add_expert_count(N_EXPERT)
        w.add_expert_used_count(N_USED)
        w.add_expert_feed_forward_length(N_FF_EXP)
        w.add_sliding_window(WINDOW)
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(YARN_FACTOR)
        w.add_rope_scaling_orig_ctx_len(ORIG_CTX)

    write(gguf, out / FILE_NAME, "gpt-oss", meta, t, tok)


if __name__ == "__main__":
    sys.exit(fixture_main(__doc__, gpt_oss, SEED))
