#!/usr/bin/env python3
"""Exports a model trained by tools/train/train.py to GGUF (v3, llama architecture), with the
SentencePiece vocabulary as complete tokenizer metadata and a ChatML chat template.

    python3 tools/train/export_gguf.py --work W --size target --name kvserve-tiny \\
        --type q8_0 --out models/kvserve-tiny-q8_0.gguf

--type: f32, f16 or q8_0 (2-D weights; norms stay f32). Q8_0 follows ggml's reference
quantizer: blocks of 32 with an f16 scale amax/127 and round-to-nearest int8s.

--fixture DIR also records, from the PyTorch model in float64, the logits of a few held-out
windows (DIR/<name>.logits.npy with the ids in DIR/<name>.ids.npy), and the SentencePiece ids of
the held-out text (DIR/heldout.sp_ids.npy), so tests can compare kvserve without torch.
"""
import argparse
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

GGML_F32, GGML_F16, GGML_Q8_0 = 0, 1, 8
FILE_TYPE = {"f32": 0, "f16": 1, "q8_0": 7}  # llama_ftype: ALL_F32, MOSTLY_F16, MOSTLY_Q8_0
T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR = 4, 5, 6, 7, 8, 9
ALIGN = 32

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


class GgufWriter:
    def __init__(self):
        self.kv = []
        self.tensors = []

    def add(self, key, vtype, value):
        self.kv.append((key, vtype, value))

    def add_array(self, key, etype, values):
        self.kv.append((key, T_ARR, (etype, values)))

    def tensor(self, name, array, ggml_type):
        self.tensors.append((name, array, ggml_type))

    @staticmethod
    def _str(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def _value(self, vtype, v):
        if vtype == T_U32:
            return struct.pack("<I", v)
        if vtype == T_I32:
            return struct.pack("<i", v)
        if vtype == T_F32:
            return struct.pack("<f", v)
        if vtype == T_BOOL:
            return struct.pack("<B", 1 if v else 0)
        if vtype == T_STR:
            return self._str(v)
        etype, values = v
        out = [struct.pack("<IQ", etype, len(values))]
        out += [self._value(etype, x) for x in values]
        return b"".join(out)

    def write(self, path):
        head = [b"GGUF", struct.pack("<IQQ", 3, len(self.tensors), len(self.kv))]
        for key, vtype, v in self.kv:
            head += [self._str(key), struct.pack("<I", vtype), self._value(vtype, v)]
        offset, blobs = 0, []
        for name, (shape, data), ggml_type in self.tensors:
            dims = list(reversed(shape))  # ggml lists ne0 (the row length) first
            head += [self._str(name), struct.pack("<I", len(dims)),
                     struct.pack(f"<{len(dims)}Q", *dims), struct.pack("<IQ", ggml_type, offset)]
            pad = (-len(data)) % ALIGN
            blobs.append(data + b"\0" * pad)
            offset += len(data) + pad
        head = b"".join(head)
        with open(path, "wb") as f:
            f.write(head)
            f.write(b"\0" * ((-len(head)) % ALIGN))
            for b in blobs:
                f.write(b)


def quantize_q8_0(w):
    rows, cols = w.shape
    assert cols % 32 == 0, "Q8_0 needs rows that are a multiple of 32"
    blocks = w.astype(np.float32).reshape(rows, cols // 32, 32)
    amax = np.abs(blocks).max(axis=-1, keepdims=True)
    d = amax / 127.0
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1), 0.0)
    q = np.rint(blocks * inv).clip(-127, 127).astype(np.int8)  # rint: ties to even, |x| <= 127
    out = np.empty((rows, cols // 32), dtype=[("d", "<f2"), ("q", "i1", 32)])
    out["d"] = d[..., 0].astype(np.float16)
    out["q"] = q
    return out.tobytes()


def encode_tensor(w, kind):
    w = np.ascontiguousarray(w, dtype=np.float32)
    if w.ndim == 1 or kind == "f32":
        return (w.shape, w.tobytes()), GGML_F32
    if kind == "f16":
        return (w.shape, w.astype(np.float16).tobytes()), GGML_F16
    return (w.shape, quantize_q8_0(w)), GGML_Q8_0


def load(work, size):
    import torch
    from model import Config, Llama
    ck = torch.load(os.path.join(work, f"{size}.pt"), map_location="cpu")
    cfg = Config(**ck["config"])
    m = Llama(cfg)
    m.load_state_dict(ck["model"])
    m.eval()
    return cfg, m, ck["step"]


def tokenizer_metadata(g, sp_path):
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=sp_path)
    tokens, scores, types = [], [], []
    for i in range(sp.vocab_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        types.append(2 if sp.is_unknown(i) else 3 if sp.is_control(i) else
                     6 if sp.is_byte(i) else 1)
    g.add("tokenizer.ggml.model", T_STR, "llama")
    g.add("tokenizer.ggml.pre", T_STR, "default")
    g.add_array("tokenizer.ggml.tokens", T_STR, tokens)
    g.add_array("tokenizer.ggml.scores", T_F32, scores)
    g.add_array("tokenizer.ggml.token_type", T_I32, types)
    g.add("tokenizer.ggml.bos_token_id", T_U32, sp.bos_id())
    g.add("tokenizer.ggml.eos_token_id", T_U32, sp.eos_id())
    g.add("tokenizer.ggml.unknown_token_id", T_U32, sp.unk_id())
    g.add("tokenizer.ggml.eot_token_id", T_U32, sp.piece_to_id("<|im_end|>"))
    g.add("tokenizer.ggml.add_bos_token", T_BOOL, True)
    g.add("tokenizer.ggml.add_eos_token", T_BOOL, False)
    g.add("tokenizer.ggml.add_space_prefix", T_BOOL, True)
    g.add("tokenizer.chat_template", T_STR, CHATML_TEMPLATE)


def export(a):
    cfg, m, step = load(a.work, a.size)
    g = GgufWriter()
    g.add("general.architecture", T_STR, "llama")
    g.add("general.name", T_STR, a.name)
    if a.license:
        g.add("general.license", T_STR, a.license)
    g.add("general.file_type", T_U32, FILE_TYPE[a.type])
    g.add("general.alignment", T_U32, ALIGN)
    g.add("llama.context_length", T_U32, a.context_length)
    g.add("llama.embedding_length", T_U32, cfg.dim)
    g.add("llama.block_count", T_U32, cfg.layers)
    g.add("llama.feed_forward_length", T_U32, cfg.ffn)
    g.add("llama.attention.head_count", T_U32, cfg.heads)
    g.add("llama.attention.head_count_kv", T_U32, cfg.kv_heads)
    g.add("llama.attention.layer_norm_rms_epsilon", T_F32, cfg.eps)
    g.add("llama.rope.freq_base", T_F32, cfg.rope_base)
    g.add("llama.rope.dimension_count", T_U32, cfg.dim // cfg.heads)
    g.add("llama.vocab_size", T_U32, cfg.vocab)
    tokenizer_metadata(g, os.path.join(a.work, "tokenizer.model"))
    sd = {k: v.detach().double().numpy() for k, v in m.state_dict().items()}

    def put(name, key):
        g.tensor(name, *encode_tensor(sd[key], a.type))

    put("token_embd.weight", "embed.weight")  # tied: also the output projection
    for i in range(cfg.layers):
        p = f"blocks.{i}."
        put(f"blk.{i}.attn_norm.weight", p + "attn_norm")
        put(f"blk.{i}.attn_q.weight", p + "wq.weight")
        put(f"blk.{i}.attn_k.weight", p + "wk.weight")
        put(f"blk.{i}.attn_v.weight", p + "wv.weight")
        put(f"blk.{i}.attn_output.weight", p + "wo.weight")
        put(f"blk.{i}.ffn_norm.weight", p + "ffn_norm")
        put(f"blk.{i}.ffn_gate.weight", p + "w_gate.weight")
        put(f"blk.{i}.ffn_up.weight", p + "w_up.weight")
        put(f"blk.{i}.ffn_down.weight", p + "w_down.weight")
    put("output_norm.weight", "out_norm")
    g.write(a.out)
    print(f"{a.out}: {os.path.getsize(a.out)} bytes ({a.type}, step {step})")

    if a.fixture:
        record_fixture(a, m)


def record_fixture(a, m):
    import torch
    import sentencepiece as spm
    os.makedirs(a.fixture, exist_ok=True)
    held = np.fromfile(os.path.join(a.work, "heldout.ids"), dtype=np.uint16).astype(np.int64)
    # Two windows of 40 tokens at different places of the held-out split.
    ids = np.stack([held[s:s + 40] for s in (0, 20000)])
    m64 = m.double()
    with torch.no_grad():
        logits = m64(torch.from_numpy(ids)).numpy().astype(np.float32)
    m.float()
    np.save(os.path.join(a.fixture, f"{a.name}.ids.npy"), ids.astype(np.int32))
    np.save(os.path.join(a.fixture, f"{a.name}.logits.npy"), logits)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(a.work, "tokenizer.model"))
    with open(os.path.join(a.work, "heldout.txt"), encoding="utf-8") as f:
        text = f.read()
    # Plain-text documents only (the stories), as one string each: what `kvserve tokenize` sees.
    docs = [d for d in text.split("\n\n") if d.strip() and not d.startswith("<|im_start|>")]
    flat, offsets = [], [0]
    for d in docs:
        flat += sp.encode(d)
        offsets.append(len(flat))
    np.savez_compressed(os.path.join(a.fixture, "heldout.sp_ids.npz"),
                        ids=np.array(flat, dtype=np.int32), offsets=np.array(offsets, np.int64))
    print(f"fixture: {ids.shape} logits, {len(docs)} held-out documents tokenized")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--size", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--type", choices=sorted(FILE_TYPE), default="f32")
    ap.add_argument("--out", required=True)
    ap.add_argument("--context-length", type=int, default=4096)
    ap.add_argument("--license", help="general.license (the project's own licence string)")
    ap.add_argument("--fixture")
    export(ap.parse_args())


if __name__ == "__main__":
    main()
