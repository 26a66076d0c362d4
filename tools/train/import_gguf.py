#!/usr/bin/env python3
"""Reads a GGUF written by export_gguf.py back into the training tools: the weights as
WORK/<size>.pt (the checkpoint train.py model --resume continues from) and, unless WORK already
has one, the SentencePiece model WORK/tokenizer.model rebuilt from the GGUF's tokenizer
metadata (pieces, scores and types; BPE with byte fallback, split digits, identity
normalisation, dummy prefix), so a later phase of training encodes new text with exactly the
vocabulary the model was trained with.

    python3 tools/train/import_gguf.py --work W --size target --gguf models/kvserve-tiny-f32.gguf

--loss CSV copies a loss curve to WORK/<size>.loss.csv, so a resumed phase appends to it; the
checkpoint's step and token count are its last row's.
"""
import argparse
import csv
import os
import shutil
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 = range(13)
SCALAR = {T_U8: "<B", T_I8: "<b", T_U16: "<H", T_I16: "<h", T_U32: "<I", T_I32: "<i",
          T_F32: "<f", T_BOOL: "<B", T_U64: "<Q", T_I64: "<q", T_F64: "<d"}
GGML_F32, GGML_F16 = 0, 1


def read_gguf(path):
    """(metadata dict, {tensor name: float32 array in PyTorch's [rows, cols] order})."""
    data = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return v[0] if len(v) == 1 else v

    def string():
        nonlocal pos
        n = take("<Q")
        s = data[pos:pos + n].decode("utf-8")
        pos += n
        return s

    def value(t):
        if t == T_STR:
            return string()
        if t == T_ARR:
            et, n = take("<I"), take("<Q")
            return [value(et) for _ in range(n)]
        return take(SCALAR[t])

    assert data[:4] == b"GGUF", f"{path}: not a GGUF file"
    pos = 4
    version, n_tensors, n_kv = take("<I"), take("<Q"), take("<Q")
    assert version == 3, f"{path}: GGUF version {version}"
    meta = {}
    for _ in range(n_kv):
        key = string()
        meta[key] = value(take("<I"))
    infos = []
    for _ in range(n_tensors):
        name = string()
        dims = [take("<Q") for _ in range(take("<I"))]
        ggml_type, offset = take("<I"), take("<Q")
        infos.append((name, dims, ggml_type, offset))
    align = meta.get("general.alignment", 32)
    base = pos + (-pos) % align
    tensors = {}
    for name, dims, ggml_type, offset in infos:
        count = int(np.prod(dims))
        dtype = {GGML_F32: np.float32, GGML_F16: np.float16}.get(ggml_type)
        assert dtype is not None, f"{name}: import reads F32 and F16 GGUFs (type {ggml_type})"
        arr = np.frombuffer(data, dtype=dtype, count=count, offset=base + offset)
        tensors[name] = arr.astype(np.float32).reshape(list(reversed(dims)))
    return meta, tensors


def config_of(meta):
    from model import Config
    return Config(vocab=meta["llama.vocab_size"], dim=meta["llama.embedding_length"],
                  layers=meta["llama.block_count"], heads=meta["llama.attention.head_count"],
                  kv_heads=meta["llama.attention.head_count_kv"],
                  ffn=meta["llama.feed_forward_length"], ctx=512,
                  rope_base=meta["llama.rope.freq_base"],
                  eps=meta["llama.attention.layer_norm_rms_epsilon"])


def state_dict_of(cfg, tensors):
    import torch
    sd = {"embed.weight": tensors["token_embd.weight"],
          "out_norm": tensors["output_norm.weight"]}
    names = {"attn_norm": "attn_norm", "attn_q.weight": "wq.weight", "attn_k.weight": "wk.weight",
             "attn_v.weight": "wv.weight", "attn_output.weight": "wo.weight",
             "ffn_norm": "ffn_norm", "ffn_gate.weight": "w_gate.weight",
             "ffn_up.weight": "w_up.weight", "ffn_down.weight": "w_down.weight"}
    for i in range(cfg.layers):
        for g, p in names.items():
            key = g if g.endswith(".weight") else g + ".weight"
            sd[f"blocks.{i}.{p}"] = tensors[f"blk.{i}.{key}"]
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()}


# --- The SentencePiece model as a protobuf (sentencepiece_model.proto), written by hand: the
# few fields a byte-fallback BPE needs, so no protobuf package is required.

def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(num, wire, payload):
    return _varint(num << 3 | wire) + payload


def _int(num, v):
    return _field(num, 0, _varint(v & 0xFFFFFFFFFFFFFFFF))


def _bytes(num, b):
    return _field(num, 2, _varint(len(b)) + b)


def _float(num, v):
    return _field(num, 5, struct.pack("<f", v))


def sentencepiece_model(meta):
    tokens = meta["tokenizer.ggml.tokens"]
    scores = meta["tokenizer.ggml.scores"]
    types = meta["tokenizer.ggml.token_type"]
    # GGUF token types are SentencePiece's piece types (1 normal, 2 unknown, 3 control, 6 byte).
    pieces = b"".join(
        _bytes(1, _bytes(1, t.encode("utf-8")) + _float(2, s) + _int(3, ty))
        for t, s, ty in zip(tokens, scores, types))
    trainer = b"".join([
        _int(3, 2),                      # model_type: BPE
        _int(4, len(tokens)),            # vocab_size
        _int(25, 1),                     # split_digits
        _int(35, 1),                     # byte_fallback
        _int(40, meta["tokenizer.ggml.unknown_token_id"]),
        _int(41, meta["tokenizer.ggml.bos_token_id"]),
        _int(42, meta["tokenizer.ggml.eos_token_id"]),
        _int(43, -1),                    # pad_id: none
    ])
    normalizer = b"".join([
        _bytes(1, b"identity"),
        _int(3, 1 if meta.get("tokenizer.ggml.add_space_prefix", True) else 0),
        _int(4, 0),                      # remove_extra_whitespaces
        _int(5, 1),                      # escape_whitespaces
    ])
    return pieces + _bytes(2, trainer) + _bytes(3, normalizer)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--size", required=True, help="checkpoint stem: WORK/<size>.pt")
    ap.add_argument("--gguf", required=True, help="an F32 (or F16) GGUF of the model")
    ap.add_argument("--loss", help="the model's loss curve, copied to WORK/<size>.loss.csv")
    a = ap.parse_args()
    import torch
    from model import Llama
    os.makedirs(a.work, exist_ok=True)
    meta, tensors = read_gguf(a.gguf)
    cfg = config_of(meta)
    m = Llama(cfg)
    m.load_state_dict(state_dict_of(cfg, tensors))
    step, tokens, seconds = 0, 0, 0.0
    if a.loss:
        dst = os.path.join(a.work, f"{a.size}.loss.csv")
        shutil.copyfile(a.loss, dst)
        with open(dst, newline="") as f:
            last = list(csv.DictReader(f))[-1]
        step, tokens, seconds = int(last["step"]), int(last["tokens"]), float(last["seconds"])
    torch.save({"config": cfg.to_dict(), "model": m.state_dict(), "step": step, "tokens": tokens,
                "seconds": seconds}, os.path.join(a.work, f"{a.size}.pt"))
    sp_path = os.path.join(a.work, "tokenizer.model")
    if not os.path.exists(sp_path):
        with open(sp_path, "wb") as f:
            f.write(sentencepiece_model(meta))
    print(f"{a.gguf}: {a.size}.pt ({m.num_params()} parameters, step {step}), {sp_path}")


if __name__ == "__main__":
    main()
