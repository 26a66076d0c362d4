#!/usr/bin/python3
"""Writes the mixture-of-experts / MLA fixtures in this folder with llama.cpp's own gguf-py.

    /usr/bin/python3 tests/data/models/make_moe_fixtures.py GGUF_PY_DIR [--out DIR]

GGUF_PY_DIR is a checkout of llama.cpp's `gguf-py` folder (the one that holds the `gguf`
package; it needs numpy and pyyaml, and a version that has GGUFWriter.add_key_length_mla).
Weights are seeded random numbers, so the files are reproducible byte for byte with the same
gguf-py. The tensor layout follows what llama.cpp's convert_hf_to_gguf.py writes:

  gguf-py-qwen3moe-f32.gguf        qwen3moe: qwen3 attention (NEOX rope, per-head q/k RMSNorm,
                                   key_length) + 8 experts, 2 used, softmax router.
  gguf-py-mixtral-f32.gguf         llama with llama.expert_count = 4 (Mixtral): Q/K rows permuted
                                   as the llama converter does; experts of feed_forward_length.
  gguf-py-deepseek2-lite-f32.gguf  deepseek2, DeepSeek-V2-Lite style: full attn_q, combined
                                   attn_kv_b, the older key_length / value_length (the
                                   decompressed head sizes, head_count_kv = head_count), one
                                   leading dense layer, 1 shared expert, softmax router.
  gguf-py-deepseek2-qlora-f32.gguf deepseek2, V3 style: attn_q_a / attn_q_a_norm / attn_q_b,
                                   split attn_k_b / attn_v_b (cut from an HF-layout kv_b_proj as
                                   the converter cuts it), the newer head sizes (key_length =
                                   kv_lora_rank + rope, value_length = kv_lora_rank,
                                   head_count_kv = 1, *_mla keys), sigmoid router with
                                   exp_probs_b selection bias, normalised and scaled weights,
                                   2 shared experts, YaRN with yarn_log_multiplier.

Tokenizer metadata is copied from gguf-py-llama-gqa-f32.gguf (read with tools/reference/
gguf_ref.py) so that every fixture has the same small SentencePiece-style vocabulary.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO / "tools" / "reference"))
from gguf_ref import GGUFFile  # noqa: E402

TOKENIZER_SOURCE = HERE / "gguf-py-llama-gqa-f32.gguf"
VOCAB = 288
HIDDEN = 64
EPS = 1e-6
# One seed per file, chosen (among a few tried) so that on the prompts of
# tests/model/reference/test_reference.py no two experts are nearly tied in a router's choice
# and greedy decoding has no near-tie between the two best logits.
ROUTER_GAIN = 3.0
SEEDS = {"qwen3moe": 129, "mixtral": 38, "deepseek2-lite": 27, "deepseek2-qlora": 140}


class Rand:
    """Seeded weights: matrices ~ N(0, 1/n_in) so every projection keeps unit variance, norm
    weights 1 + N(0, 0.1^2), embeddings N(0, 0.1^2) like the other fixtures here."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def mat(self, n_out: int, n_in: int, lead=(), gain: float = 1.0) -> np.ndarray:
        """numpy shape [*lead, n_out, n_in] = GGUF dims [n_in, n_out, *reversed(lead)]."""
        shape = (*lead, n_out, n_in)
        return (gain * self.rng.standard_normal(shape) / np.sqrt(n_in)).astype(np.float32)

    def norm(self, n: int) -> np.ndarray:
        return (1.0 + 0.1 * self.rng.standard_normal(n)).astype(np.float32)

    def embd(self, vocab: int, n: int) -> np.ndarray:
        return (0.1 * self.rng.standard_normal((vocab, n))).astype(np.float32)

    def vec(self, n: int, std: float) -> np.ndarray:
        return (std * self.rng.standard_normal(n)).astype(np.float32)


def llama_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py LlamaModel.permute: HF rows (head, half, i) -> file rows
    (head, i, half), so that rope on adjacent pairs of the file equals HF's rotate-half."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def common_header(gguf, w, arch: str, name: str, *, layers: int, ffn: int, heads: int,
                  kv_heads: int, ctx: int = 2048, rope_base: float = 10000.0,
                  rope_dims: int | None = None):
    w.add_name(f"kvserve-fixture-{name}")
    w.add_context_length(ctx)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_freq_base(rope_base)
    w.add_layer_norm_rms_eps(EPS)
    if rope_dims is not None:
        w.add_rope_dimension_count(rope_dims)
    w.add_vocab_size(VOCAB)
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32))


def add_tokenizer(w, tok: GGUFFile):
    md = tok.metadata
    w.add_tokenizer_model(md["tokenizer.ggml.model"])
    w.add_token_list(md["tokenizer.ggml.tokens"])
    w.add_token_scores(md["tokenizer.ggml.scores"])
    w.add_token_types(md["tokenizer.ggml.token_type"])
    w.add_bos_token_id(md["tokenizer.ggml.bos_token_id"])
    w.add_eos_token_id(md["tokenizer.ggml.eos_token_id"])
    w.add_unk_token_id(md["tokenizer.ggml.unknown_token_id"])
    w.add_add_bos_token(md["tokenizer.ggml.add_bos_token"])
    w.add_add_eos_token(md["tokenizer.ggml.add_eos_token"])
    if len(md["tokenizer.ggml.tokens"]) != VOCAB:
        raise SystemExit(f"{TOKENIZER_SOURCE.name}: expected {VOCAB} tokens")


def write(gguf, path: Path, arch: str, meta, tensors: dict, tok: GGUFFile):
    w = gguf.GGUFWriter(str(path), arch)
    meta(w)
    add_tokenizer(w, tok)
    for name, data in tensors.items():
        w.add_tensor(name, np.ascontiguousarray(data, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{path.name}: {path.stat().st_size} bytes, {len(tensors)} tensors")


def experts(r: Rand, t: dict, p: str, n_expert: int, n_ff: int):
    """Stacked expert matrices as the converters write them (torch.stack over experts):
    gate/up numpy [n_expert, n_ff, hidden] (GGUF dims [hidden, n_ff, n_expert]), down numpy
    [n_expert, hidden, n_ff] (GGUF dims [n_ff, hidden, n_expert])."""
    # Router logits ~ N(0, ROUTER_GAIN^2): a decided router, so that the choice of experts is
    # not a near tie that rounding could flip.
    t[p + "ffn_gate_inp.weight"] = r.mat(n_expert, HIDDEN, gain=ROUTER_GAIN)
    t[p + "ffn_gate_exps.weight"] = r.mat(n_ff, HIDDEN, (n_expert,))
    t[p + "ffn_up_exps.weight"] = r.mat(n_ff, HIDDEN, (n_expert,))
    t[p + "ffn_down_exps.weight"] = r.mat(HIDDEN, n_ff, (n_expert,))


def dense_ffn(r: Rand, t: dict, p: str, n_ff: int, suffix: str = ""):
    t[p + f"ffn_gate{suffix}.weight"] = r.mat(n_ff, HIDDEN)
    t[p + f"ffn_up{suffix}.weight"] = r.mat(n_ff, HIDDEN)
    t[p + f"ffn_down{suffix}.weight"] = r.mat(HIDDEN, n_ff)


def llama_attention(r: Rand, t: dict, p: str, *, heads: int, kv_heads: int, head_dim: int):
    """A llama block up to its FFN, in this draw order: attn_norm, attn_q, attn_k (both drawn
    in HF row order, then permuted as convert_hf_to_gguf.py does for llama), attn_v,
    attn_output, ffn_norm."""
    t[p + "attn_norm.weight"] = r.norm(HIDDEN)
    t[p + "attn_q.weight"] = llama_permute(r.mat(heads * head_dim, HIDDEN), heads)
    t[p + "attn_k.weight"] = llama_permute(r.mat(kv_heads * head_dim, HIDDEN), kv_heads)
    t[p + "attn_v.weight"] = r.mat(kv_heads * head_dim, HIDDEN)
    t[p + "attn_output.weight"] = r.mat(HIDDEN, heads * head_dim)
    t[p + "ffn_norm.weight"] = r.norm(HIDDEN)


def qwen3moe(gguf, out: Path, tok: GGUFFile):
    layers, heads, kv_heads, head_dim, n_expert, n_used, n_ff_exp = 2, 4, 2, 16, 8, 2, 32
    r = Rand(SEEDS["qwen3moe"])
    t = {"token_embd.weight": r.embd(VOCAB, HIDDEN)}
    for i in range(layers):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = r.norm(HIDDEN)
        t[p + "attn_q.weight"] = r.mat(heads * head_dim, HIDDEN)
        t[p + "attn_k.weight"] = r.mat(kv_heads * head_dim, HIDDEN)
        t[p + "attn_v.weight"] = r.mat(kv_heads * head_dim, HIDDEN)
        t[p + "attn_q_norm.weight"] = r.norm(head_dim)
        t[p + "attn_k_norm.weight"] = r.norm(head_dim)
        t[p + "attn_output.weight"] = r.mat(HIDDEN, heads * head_dim)
        t[p + "ffn_norm.weight"] = r.norm(HIDDEN)
        experts(r, t, p, n_expert, n_ff_exp)
    t["output_norm.weight"] = r.norm(HIDDEN)  # tied: no output.weight

    def meta(w):
        # feed_forward_length is the HF config's (dense) intermediate_size, which qwen3moe
        # does not use: the experts are expert_feed_forward_length wide.
        common_header(gguf, w, "qwen3moe", "qwen3moe", layers=layers, ffn=96, heads=heads,
                      kv_heads=kv_heads, rope_base=1000000.0, rope_dims=head_dim)
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
        w.add_expert_count(n_expert)
        w.add_expert_used_count(n_used)
        w.add_expert_feed_forward_length(n_ff_exp)

    write(gguf, out / "gguf-py-qwen3moe-f32.gguf", "qwen3moe", meta, t, tok)


def mixtral(gguf, out: Path, tok: GGUFFile):
    layers, heads, kv_heads, n_expert, n_used, n_ff = 2, 4, 2, 4, 2, 48
    head_dim = HIDDEN // heads
    r = Rand(SEEDS["mixtral"])
    t = {"token_embd.weight": r.embd(VOCAB, HIDDEN)}
    for i in range(layers):
        p = f"blk.{i}."
        llama_attention(r, t, p, heads=heads, kv_heads=kv_heads, head_dim=head_dim)
        experts(r, t, p, n_expert, n_ff)
    t["output_norm.weight"] = r.norm(HIDDEN)  # tied: no output.weight

    def meta(w):
        common_header(gguf, w, "llama", "mixtral", layers=layers, ffn=n_ff, heads=heads,
                      kv_heads=kv_heads, rope_base=1000000.0, rope_dims=head_dim)
        w.add_expert_count(n_expert)
        w.add_expert_used_count(n_used)

    write(gguf, out / "gguf-py-mixtral-f32.gguf", "llama", meta, t, tok)


def deepseek2(gguf, out: Path, tok: GGUFFile, *, lite: bool):
    heads, kv_lora, nope, rope, v_dim, n_expert, n_ff_dense = 4, 32, 16, 8, 16, 8, 96
    if lite:
        layers, q_lora, n_used, n_shared, n_ff_exp = 2, 0, 2, 1, 32
    else:
        layers, q_lora, n_used, n_shared, n_ff_exp = 3, 24, 3, 2, 16
    n_dense = 1
    r = Rand(SEEDS["deepseek2-lite" if lite else "deepseek2-qlora"])
    t = {"token_embd.weight": r.embd(VOCAB, HIDDEN)}
    for i in range(layers):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = r.norm(HIDDEN)
        if lite:
            t[p + "attn_q.weight"] = r.mat(heads * (nope + rope), HIDDEN)
        else:
            t[p + "attn_q_a.weight"] = r.mat(q_lora, HIDDEN)
            t[p + "attn_q_a_norm.weight"] = r.norm(q_lora)
            t[p + "attn_q_b.weight"] = r.mat(heads * (nope + rope), q_lora)
        t[p + "attn_kv_a_mqa.weight"] = r.mat(kv_lora + rope, HIDDEN)
        t[p + "attn_kv_a_norm.weight"] = r.norm(kv_lora)
        kv_b = r.mat(heads * (nope + v_dim), kv_lora)  # HF kv_b_proj: [H*(nope+v), kv_lora]
        if lite:
            t[p + "attn_kv_b.weight"] = kv_b
        else:
            # DeepseekV2Model.modify_tensors: view [H, nope+v, kv_lora], split, transpose k_b.
            kv = kv_b.reshape(heads, nope + v_dim, kv_lora)
            t[p + "attn_k_b.weight"] = kv[:, :nope, :].transpose(0, 2, 1)  # [H, kv_lora, nope]
            t[p + "attn_v_b.weight"] = kv[:, nope:, :]                      # [H, v, kv_lora]
        t[p + "attn_output.weight"] = r.mat(HIDDEN, heads * v_dim)
        t[p + "ffn_norm.weight"] = r.norm(HIDDEN)
        if i < n_dense:
            dense_ffn(r, t, p, n_ff_dense)
        else:
            experts(r, t, p, n_expert, n_ff_exp)
            if not lite:  # DeepSeek-V3's e_score_correction_bias
                t[p + "exp_probs_b.bias"] = r.vec(n_expert, 0.1)
            dense_ffn(r, t, p, n_ff_exp * n_shared, "_shexp")
    t["output_norm.weight"] = r.norm(HIDDEN)
    if lite:
        t["output.weight"] = r.mat(VOCAB, HIDDEN)

    def meta(w):
        common_header(gguf, w, "deepseek2", "deepseek2-lite" if lite else "deepseek2-qlora",
                      layers=layers, ffn=n_ff_dense, heads=heads,
                      kv_heads=heads if lite else 1, ctx=2048 if lite else 256,
                      rope_dims=rope)
        w.add_expert_count(n_expert)
        w.add_expert_used_count(n_used)
        w.add_leading_dense_block_count(n_dense)
        # Real V2-Lite files have no q_lora_rank key; llama.cpp then requires a 26 or 27 layer
        # model to call it "lite", so this small file states 0 explicitly.
        w.add_q_lora_rank(q_lora)
        w.add_kv_lora_rank(kv_lora)
        if lite:  # the older files: key/value lengths of the decompressed heads
            w.add_key_length(nope + rope)
            w.add_value_length(v_dim)
        else:     # the newer files: MQA over the latent, with the head sizes in *_mla
            w.add_key_length(kv_lora + rope)
            w.add_value_length(kv_lora)
            w.add_key_length_mla(nope + rope)
            w.add_value_length_mla(v_dim)
        w.add_expert_feed_forward_length(n_ff_exp)
        w.add_expert_shared_count(n_shared)
        if lite:
            w.add_expert_weights_scale(1.0)
            w.add_expert_gating_func(gguf.ExpertGatingFuncType.SOFTMAX)
        else:
            w.add_expert_weights_scale(2.5)
            w.add_expert_weights_norm(True)
            w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
            w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
            w.add_rope_scaling_factor(4.0)
            w.add_rope_scaling_orig_ctx_len(64)
            # The converter writes 0.1 * mscale_all_dim (here mscale_all_dim = 1).
            w.add_rope_scaling_yarn_log_mul(0.1)

    name = "gguf-py-deepseek2-lite-f32.gguf" if lite else "gguf-py-deepseek2-qlora-f32.gguf"
    write(gguf, out / name, "deepseek2", meta, t, tok)


def fixture_main(doc: str, writer, default_seed: int) -> int:
    """main() of a script that writes one fixture (make_phi3_fixture.py,
    make_gpt_oss_fixture.py): doc is its docstring, writer(gguf, out, tok, seed) writes the file
    (seed None: its default_seed)."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("gguf_py", help="llama.cpp's gguf-py folder (holds the gguf package)")
    ap.add_argument("--out", default=str(HERE), help="output folder (default: this one)")
    ap.add_argument("--seed", type=int, default=None,
                    help=f"weights seed (default {default_seed})")
    args = ap.parse_args()
    sys.path.insert(0, os.path.abspath(args.gguf_py))
    import gguf  # noqa: E402  (llama.cpp's gguf-py)

    writer(gguf, Path(args.out), GGUFFile(str(TOKENIZER_SOURCE)), args.seed)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("gguf_py", help="llama.cpp's gguf-py folder (holds the gguf package)")
    ap.add_argument("--out", default=str(HERE), help="output folder (default: this one)")
    args = ap.parse_args()
    sys.path.insert(0, os.path.abspath(args.gguf_py))
    import gguf  # noqa: E402  (llama.cpp's gguf-py)

    write_all(gguf, Path(args.out))
    return 0


def write_all(gguf, out: Path, only=None):
    tok = GGUFFile(str(TOKENIZER_SOURCE))
    makers = {"qwen3moe": lambda: qwen3moe(gguf, out, tok),
              "mixtral": lambda: mixtral(gguf, out, tok),
              "deepseek2-lite": lambda: deepseek2(gguf, out, tok, lite=True),
              "deepseek2-qlora": lambda: deepseek2(gguf, out, tok, lite=False)}
    for name, make in makers.items():
        if only is None or name in only:
            make()


if __name__ == "__main__":
    sys.exit(main())
