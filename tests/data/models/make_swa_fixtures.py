#!/usr/bin/python3
"""Writes the sliding-window / Gemma fixtures in this folder with llama.cpp's own gguf-py.

    /usr/bin/python3 tests/data/models/make_swa_fixtures.py GGUF_PY_DIR [--out DIR]

GGUF_PY_DIR is a checkout of llama.cpp's `gguf-py` folder (the one that holds the `gguf`
package; it needs numpy and pyyaml). GGUFWriter takes any architecture string, so a gguf-py
that predates Gemma 3 writes the gemma3 file too. Weights are seeded random numbers (the scheme
of make_moe_fixtures.py, whose helpers this script uses), so the files are reproducible byte for
byte with the same gguf-py. The layout follows what llama.cpp's convert_hf_to_gguf.py writes:

  gguf-py-gemma2-f32.gguf        gemma2: 26 layers (the smallest layer count llama.cpp's gemma2
                                 loader accepts: 26 / 42 / 46), sliding window 8 on the even
                                 layers, attention soft-cap 2 and final soft-cap 5 (small, so
                                 that tanh matters on random weights), post-attention and
                                 post-FFN norms, GeGLU, tied output.
  gguf-py-gemma3-f32.gguf        gemma3: 6 layers (5 windowed, layer 5 global), key_length 32 !=
                                 hidden / heads, per-head q/k norms, sliding window 6, rope base
                                 1e6 with linear scaling x4 on the global layer (the windowed
                                 ones use base 10000, unscaled), no soft-capping keys, tied.
  gguf-py-mistral-swa-f32.gguf   llama (Mistral 7B v0.1 style): Q/K rows permuted as the llama
                                 converter does, llama.attention.sliding_window 8 on every
                                 layer, untied output.

Norm weights are drawn around 1: Gemma's converter adds 1 to every HF norm weight, so a GGUF
file holds the (1 + w) that the graph multiplies by. Tokenizer metadata is copied from
gguf-py-llama-gqa-f32.gguf, as for the other fixtures.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_moe_fixtures import (HIDDEN, TOKENIZER_SOURCE, VOCAB, Rand,  # noqa: E402
                               common_header, dense_ffn, llama_attention, write)
from gguf_ref import GGUFFile  # noqa: E402  (tools/reference/, on the path make_moe_fixtures set)

# One seed per file, chosen (among a few tried) so that on the prompts of
# tests/model/reference/test_reference.py and llamacpp_ids.json greedy decoding has no near tie
# between the two best logits.
SEEDS = {"gemma2": 37, "gemma3": 130, "mistral-swa": 144}


def gemma_layer(r: Rand, t: dict, p: str, *, heads: int, kv_heads: int, head_dim: int,
                n_ff: int, qk_norm: bool):
    """One Gemma 2 / 3 block: attn_norm, q/k/v/output, [q/k norms], post_attention_norm,
    ffn_norm, ffn_gate/up/down (GeGLU), post_ffw_norm. Q/K rows are not permuted (NEOX rope)."""
    t[p + "attn_norm.weight"] = r.norm(HIDDEN)
    t[p + "attn_q.weight"] = r.mat(heads * head_dim, HIDDEN)
    t[p + "attn_k.weight"] = r.mat(kv_heads * head_dim, HIDDEN)
    t[p + "attn_v.weight"] = r.mat(kv_heads * head_dim, HIDDEN)
    if qk_norm:
        t[p + "attn_q_norm.weight"] = r.norm(head_dim)
        t[p + "attn_k_norm.weight"] = r.norm(head_dim)
    t[p + "attn_output.weight"] = r.mat(HIDDEN, heads * head_dim)
    t[p + "post_attention_norm.weight"] = r.norm(HIDDEN)
    t[p + "ffn_norm.weight"] = r.norm(HIDDEN)
    dense_ffn(r, t, p, n_ff)
    t[p + "post_ffw_norm.weight"] = r.norm(HIDDEN)


def gemma(gguf, out: Path, tok: GGUFFile, arch: str, seed: int | None, *, layers: int,
          head_dim: int, qk_norm: bool, extra_meta, **header):
    """The Gemma 2 / 3 file of `arch`: token_embd, `layers` gemma_layer blocks of 4 heads /
    2 KV heads / ffn 96, output_norm (tied: no output.weight). Metadata: common_header (header
    passes its ctx / rope_base), key_length = value_length = head_dim, then extra_meta(w)."""
    heads, kv_heads, n_ff = 4, 2, 96
    r = Rand(SEEDS[arch] if seed is None else seed)
    t = {"token_embd.weight": r.embd(VOCAB, HIDDEN)}
    for i in range(layers):
        gemma_layer(r, t, f"blk.{i}.", heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                    n_ff=n_ff, qk_norm=qk_norm)
    t["output_norm.weight"] = r.norm(HIDDEN)  # tied: no output.weight

    def meta(w):
        common_header(gguf, w, arch, arch, layers=layers, ffn=n_ff, heads=heads,
                      kv_heads=kv_heads, **header)
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
        extra_meta(w)

    write(gguf, out / f"gguf-py-{arch}-f32.gguf", arch, meta, t, tok)


def gemma2(gguf, out: Path, tok: GGUFFile, seed: int | None = None):
    def meta(w):
        w.add_attn_logit_softcapping(2.0)
        w.add_final_logit_softcapping(5.0)
        w.add_sliding_window(8)

    gemma(gguf, out, tok, "gemma2", seed, layers=26, head_dim=16, qk_norm=False,
          extra_meta=meta)


def gemma3(gguf, out: Path, tok: GGUFFile, seed: int | None = None):
    def meta(w):
        w.add_sliding_window(6)
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(4.0)

    gemma(gguf, out, tok, "gemma3", seed, layers=6, head_dim=32, qk_norm=True,
          extra_meta=meta, ctx=256, rope_base=1000000.0)


def mistral_swa(gguf, out: Path, tok: GGUFFile, seed: int | None = None):
    layers, heads, kv_heads, n_ff, window = 2, 4, 2, 96, 8
    head_dim = HIDDEN // heads
    r = Rand(SEEDS["mistral-swa"] if seed is None else seed)
    t = {"token_embd.weight": r.embd(VOCAB, HIDDEN)}
    for i in range(layers):
        p = f"blk.{i}."
        llama_attention(r, t, p, heads=heads, kv_heads=kv_heads, head_dim=head_dim)
        dense_ffn(r, t, p, n_ff)
    t["output_norm.weight"] = r.norm(HIDDEN)
    t["output.weight"] = r.mat(VOCAB, HIDDEN)

    def meta(w):
        common_header(gguf, w, "llama", "mistral-swa", layers=layers, ffn=n_ff, heads=heads,
                      kv_heads=kv_heads, rope_dims=head_dim)
        w.add_sliding_window(window)

    write(gguf, out / "gguf-py-mistral-swa-f32.gguf", "llama", meta, t, tok)


MAKERS = {"gemma2": gemma2, "gemma3": gemma3, "mistral-swa": mistral_swa}


def write_all(gguf, out: Path, only=None, seeds=None):
    tok = GGUFFile(str(TOKENIZER_SOURCE))
    for name, make in MAKERS.items():
        if only is None or name in only:
            make(gguf, out, tok, None if seeds is None else seeds.get(name))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("gguf_py", help="llama.cpp's gguf-py folder (holds the gguf package)")
    ap.add_argument("--out", default=str(HERE), help="output folder (default: this one)")
    args = ap.parse_args()
    sys.path.insert(0, os.path.abspath(args.gguf_py))
    import gguf  # noqa: E402  (llama.cpp's gguf-py)

    write_all(gguf, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
