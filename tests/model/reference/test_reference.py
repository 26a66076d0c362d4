#!/usr/bin/python3
"""kvserve's numerics against an independent float64 numpy reference (tools/reference/).

Run by CTest (label `reference`):
  /usr/bin/python3 tests/model/reference/test_reference.py --kvserve build/kvserve
or with KVSERVE_BIN set. Without a kvserve binary only the reference self-tests run (the kvserve
tests are skipped).

What is checked:
  * the reference's own GGUF reader and dequantizers (golden values recorded once from gguf-py,
    and files written by llama.cpp's gguf-py GGUFWriter in tests/data/models/);
  * the reference's own conventions: incremental (KV-cached) == full forward, and the llama
    file convention (adjacent-pair rope on converter-permuted Q/K rows) == HF's rotate-half rope
    on the un-permuted weights; for sliding windows and Gemma: token by token == full forward,
    a window as long as the sequence == no window, a huge soft-cap == none, the per-layer
    window / rope pattern and attention-scale rules;
  * for phi3: fused attn_qkv / ffn_up == the same weights as separate tensors, the LongRoPE
    factor set chosen by the context (short iff ctx <= original_context_length), and
    rope.scaling.attn_factor entering the scores squared;
  * for gpt-oss: attention sinks on a hand-made head (a sink only rescales each row; -1e30 is no
    sink), the clamped SwiGLU on hand values, the softmax-over-the-chosen router on hand-made
    logits, every bias and the sinks mattering, HF's interleaved expert layout, the window
    pattern and YaRN angles, and the whole fixture against a forward pass written from HF's
    modeling_gpt_oss.py; MXFP4 blocks against the format definition;
  * kvserve `logits` vs the reference on synthetic models from `kvserve make-model` (MHA, GQA,
    MQA, qwen2 biases, qwen3 q/k norms with head_dim != hidden/heads, MoE, MLA, gemma2 / gemma3,
    a windowed llama, phi3 and gpt-oss) x (F32, F16, Q8_0, Q4_K) x (f32, default f16 KV cache),
    with the metric max|ours - ref| / max|ref| over all logits; phi3 also with `--ctx` picking
    either LongRoPE factor set;
  * `--chunk 1 / 5 / full` give the same logits; greedy `kvserve run` ids equal the reference's;
  * kvserve and the reference on the gguf-py fixture files, and both against llama.cpp's own
    logits for those files where tests/data/models/*.llamacpp_logits.npy exist (phi3: also
    *.llamacpp_long_logits.npy; each with the context llama.cpp ran with, LLAMACPP_CTX).
At the end a table (model, weights, kv dtype, max rel error, bound) is printed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tools" / "reference"))
import gguf_ref  # noqa: E402
import ref_model  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
FIXTURES = REPO / "tests" / "data" / "models"
KVSERVE = os.environ.get("KVSERVE_BIN")  # replaced by --kvserve
THREADS = "2"

# Relative-error bounds, by weight type, for an f32 KV cache and for the default (f16) one.
BOUND_F32_KV = {"F32": 1e-4, "F16": 1e-3, "Q8_0": 3e-2, "Q4_K": 3e-2, "mixed": 3e-2}
BOUND_F16_KV = {"F32": 5e-3, "F16": 5e-3, "Q8_0": 3e-2, "Q4_K": 3e-2, "mixed": 3e-2}
CHUNK_BOUND = 1e-5
# llama.cpp (f32 KV cache) vs the float64 reference. On all-F32 files llama.cpp computes in f32
# throughout, so the two must agree to float32 rounding; on the mixed Q8_0/F16 files llama.cpp
# quantizes activations (q8_0 for Q8_0 weights, f16 for F16 weights): quantized-weights bound.
LLAMACPP_BOUND = {"F32": 1e-5, "mixed": 3e-2}
# ... and with the reference rounding matmul inputs as ggml does (Transformer(ggml_activations=
# True)) the mixed files agree closely too (measured 4e-5 and 1e-7).
LLAMACPP_GGML_ACT_BOUND = 1e-3
# Architectures whose FFN is GeGLU: ggml's CPU backend computes GELU through a table of f16
# values indexed by the f16-rounded input (GGML_GELU_FP16), so every GELU output of llama.cpp
# carries f16 precision (relative error up to 2^-11) even on all-F32 files. On the 26-layer
# gemma2 fixture that gives 7.7e-4 against the exact float64 reference; the reference that
# rounds GELU the way the table does (ggml_activations) is within 3.1e-4, which is the table's
# own sensitivity to float32 rounding: f32-sized noise on the matmul outputs flips f16 roundings
# of GELU inputs and moves that reference's logits by 3e-4 too. llama.cpp built without the
# table (*.llamacpp_exact_gelu_logits.npy) agrees with the reference to 7.6e-7, within
# LLAMACPP_BOUND["F32"].
GELU_ARCHS = ("gemma2", "gemma3")
LLAMACPP_GELU_TABLE_BOUND = 2e-3
LLAMACPP_GELU_TABLE_GGML_ACT_BOUND = 1e-3


def fixture_arch(path: Path) -> str:
    return gguf_ref.GGUFFile(str(path)).metadata["general.architecture"]


def llamacpp_f32_bound(path: Path, kvserve_bound: float) -> float:
    """The bound for logits compared with llama.cpp's on an all-F32 file: kvserve_bound, or
    the GELU-table bound for GeGLU architectures (llama.cpp's own f16 GELU dominates)."""
    return LLAMACPP_GELU_TABLE_BOUND if fixture_arch(path) in GELU_ARCHS else kvserve_bound


# llama.cpp's logits files computed with a context that matters (phi3's LongRoPE factor choice:
# the long set iff n_ctx > rope.scaling.original_context_length): the reference and kvserve run
# with the same context. The other files' logits do not depend on it (llama.cpp ran them with
# n_ctx 256, the reference and kvserve use the file's context_length).
LLAMACPP_CTX = {
    "gguf-py-phi3-f32.llamacpp_logits.npy": 64,        # <= original_context_length 64: short
    "gguf-py-phi3-f32.llamacpp_long_logits.npy": 256,  # > 64: long factors
}


def llamacpp_logits_files(*kinds) -> list:
    """(npy, model gguf, ctx or None) for tests/data/models/*.llamacpp_<kind>.npy, kinds
    among "logits", "long_logits", "exact_gelu_logits"."""
    out = []
    for kind in kinds:
        for npy in sorted(FIXTURES.glob(f"*.llamacpp_{kind}.npy")):
            model = npy.with_name(npy.name.split(".llamacpp")[0] + ".gguf")
            out.append((npy, model, LLAMACPP_CTX.get(npy.name)))
    return out


def fixture_weights(path: Path) -> str:
    """The weight class of a gguf-py fixture: "F32" (all tensors f32) or "mixed"."""
    return "F32" if path.stem.endswith("-f32") else "mixed"

RESULTS: list = []  # rows: (model, weights, kv, what, rel_err, bound)
# Types without golden values in dequant_golden.npz (the gguf-py they were recorded with
# predates them): checked against hand-made blocks and the format definition instead.
HAND_CHECKED_TYPES = {"MXFP4"}

# Synthetic model shapes. hidden, ffn and q_dim are multiples of 256 so Q4_K applies everywhere.
SYNTHETIC = {
    "llama-mha": dict(arch="llama", layers=2, hidden=256, heads=4, kv_heads=4, ffn=512, vocab=384),
    "llama-gqa": dict(arch="llama", layers=2, hidden=256, heads=8, kv_heads=2, ffn=512, vocab=384),
    "llama-mqa": dict(arch="llama", layers=2, hidden=256, heads=8, kv_heads=1, ffn=512, vocab=384),
    # Not tied: make-model's embeddings have std ~1, so tied logits are dominated by the input
    # token's self-similarity (greedy repeats it). Tying is covered by the gguf-py fixtures.
    "qwen2-bias": dict(arch="qwen2", layers=2, hidden=256, heads=8, kv_heads=2, ffn=512,
                       vocab=320),
    "qwen3-qknorm": dict(arch="qwen3", layers=2, hidden=256, heads=4, kv_heads=2, ffn=512,
                         vocab=448, head_dim=128),
    # Mixtures of experts; `extra` are make-model's expert and latent-attention flags.
    "qwen3moe": dict(arch="qwen3moe", layers=2, hidden=256, heads=4, kv_heads=2, ffn=512,
                     vocab=384, head_dim=64,
                     extra=["--experts", 8, "--experts-used", 2, "--expert-ffn", 256]),
    "mixtral": dict(arch="llama", layers=2, hidden=256, heads=4, kv_heads=2, ffn=256, vocab=384,
                    extra=["--experts", 4, "--experts-used", 2]),
    # V2-Lite style: full attn_q, combined attn_kv_b, softmax router, a shared expert, a leading
    # dense layer. kv_heads / head_dim as the reference reads them: the decompressed heads.
    "deepseek2-lite": dict(arch="deepseek2", layers=3, hidden=256, heads=4, kv_heads=4, ffn=512,
                           vocab=384, head_dim=96,
                           extra=["--experts", 8, "--experts-used", 2, "--expert-ffn", 256,
                                  "--shared-experts", 1, "--leading-dense", 1,
                                  "--kv-lora-rank", 256, "--qk-nope", 64, "--qk-rope", 32,
                                  "--v-head", 64, "--kv-b", "combined"]),
    # V3 style: low-rank query, split attn_k_b / attn_v_b, sigmoid router with a selection bias
    # and expert groups, renormalised and scaled weights, YaRN.
    "deepseek2-v3": dict(arch="deepseek2", layers=3, hidden=256, heads=4, kv_heads=4, ffn=512,
                         vocab=384, head_dim=96,
                         extra=["--experts", 16, "--experts-used", 3, "--expert-ffn", 256,
                                "--shared-experts", 1, "--leading-dense", 1, "--gating",
                                "sigmoid", "--selection-bias", "--expert-weights-norm",
                                "--expert-weights-scale", 2.5, "--expert-groups", 4,
                                "--expert-groups-used", 2, "--q-lora-rank", 256,
                                "--kv-lora-rank", 256, "--qk-nope", 64, "--qk-rope", 32,
                                "--v-head", 64, "--kv-b", "split", "--yarn-factor", 4]),
    # Sliding windows (make-model's --sliding-window, --attn-softcap, --final-softcap, here the
    # keys window / attn_softcap / final_softcap). A window of 8 on the 32-token prompts.
    # gemma2: every other layer windowed (0 and 2), soft-capped scores and logits, GeGLU,
    # post-norms, q scaled by 1/sqrt(head_dim).
    "gemma2-swa": dict(arch="gemma2", layers=4, hidden=256, heads=4, kv_heads=2, ffn=512,
                       vocab=384, head_dim=64, window=8, attn_softcap=20.0, final_softcap=15.0),
    # gemma3: layers 0-4 windowed with rope base 10000, layer 5 global with --rope-base; q/k
    # norms, head_dim != hidden/heads.
    "gemma3-swa": dict(arch="gemma3", layers=6, hidden=256, heads=4, kv_heads=2, ffn=512,
                       vocab=384, head_dim=128, window=8, rope_base=1000000.0),
    # Mistral 7B v0.1 style: a llama with every layer windowed.
    "mistral-swa": dict(arch="llama", layers=2, hidden=256, heads=8, kv_heads=2, ffn=512,
                        vocab=384, window=8),
    # phi3 (Phi-3-mini style MHA): fused attn_qkv and ffn_up, every layer windowed, LongRoPE
    # factors with original context 64 in a context of 256: the default run (the model's
    # context) uses the long factors; PHI3_CTX runs both sets (the set depends on --ctx, not
    # on the prompt's length).
    "phi3": dict(arch="phi3", layers=2, hidden=256, heads=4, kv_heads=4, ffn=512, vocab=384,
                 window=8, context=256, rope_orig=64),
    # gpt-oss: q/k/v/output biases, attention sinks, window 8 on layers 0 and 2, YaRN x4 from
    # an original context of 64, 4 biased experts (2 used) with the clamped SwiGLU and a
    # biased router; head_dim 64 != hidden / heads (q is 512 wide), as in the real models.
    "gpt-oss": dict(arch="gpt-oss", layers=4, hidden=256, heads=8, kv_heads=2, ffn=256,
                    vocab=384, head_dim=64, window=8, context=256,
                    extra=["--experts", 4, "--experts-used", 2, "--expert-ffn", 256,
                           "--yarn-factor", 4, "--yarn-original-context", 64]),
}
# `kvserve logits --ctx` values for the phi3 model: <= 64 short factors, > 64 long ones.
PHI3_CTX = (64, 65, 256)
WEIGHT_TYPES = ["F32", "F16", "Q8_0", "Q4_K"]
N_PROMPT = 32
N_GREEDY = 16


def is_moe(shape: dict) -> bool:
    return "--experts" in shape.get("extra", [])


def rel_err(ours: np.ndarray, ref: np.ndarray) -> float:
    """max |ours - ref| / max |ref| over all entries."""
    return float(np.max(np.abs(ours.astype(np.float64) - ref)) / np.max(np.abs(ref)))


def position_errors(ours: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Per position: max |ours - ref| over the vocabulary / max |ref| over all entries."""
    return np.max(np.abs(ours.astype(np.float64) - ref), axis=1) / np.max(np.abs(ref))


def prompt_ids(vocab: int, seed: int, n: int = N_PROMPT) -> list:
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(3, vocab, size=n)]


def run_kvserve(*args, timeout=120) -> subprocess.CompletedProcess:
    cmd = [KVSERVE, *[str(a) for a in args]]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise AssertionError(f"command failed (rc {p.returncode}): {' '.join(cmd)}\n"
                             f"stdout: {p.stdout[-2000:]}\nstderr: {p.stderr[-2000:]}")
    return p


def kvserve_logits(model: Path, ids: list, vocab: int, out_dir: Path, *extra) -> np.ndarray:
    out = out_dir / f"logits-{os.getpid()}-{time.monotonic_ns()}.bin"
    run_kvserve("logits", "--model", model, "--ids", ",".join(map(str, ids)), "--out", out,
                "--threads", THREADS, *extra)
    raw = np.fromfile(out, dtype="<f4")
    out.unlink()
    if raw.size != len(ids) * vocab:
        raise AssertionError(f"{out}: {raw.size} floats, expected {len(ids)} x {vocab}")
    return raw.reshape(len(ids), vocab)


def first_bad_position(ours: np.ndarray, ref: np.ndarray) -> str:
    """Names the position where the per-row error is largest, to help diagnosis."""
    per_row = np.max(np.abs(ours - ref), axis=1) / np.max(np.abs(ref))
    worst = int(np.argmax(per_row))
    return (f"worst position {worst} (row rel err {per_row[worst]:.3g}); row errors by position: "
            + " ".join(f"{e:.2g}" for e in per_row[:12]) + (" ..." if len(per_row) > 12 else ""))


# ----------------------------------------------------------------------------------------------
# The reference's own correctness.


class ReaderTest(unittest.TestCase):
    def test_dequantizers_match_golden_values(self):
        golden = np.load(DATA / "dequant_golden.npz")
        for name, t in gguf_ref.GGML_TYPE_BY_NAME.items():
            if name in HAND_CHECKED_TYPES:
                continue
            with self.subTest(type=name):
                raw, want = golden[name + "_raw"], golden[name + "_values"]
                got = gguf_ref.dequantize(raw, t.type_id)
                np.testing.assert_array_equal(got, want)

    def test_mxfp4_from_the_format_definition(self):
        """MXFP4 (ggml type 39) blocks assembled by hand: 1 E8M0 scale byte e, then 16 bytes
        of E2M1 codes (element j < 16 = low nibble of byte j, element j + 16 = its high nibble);
        value = 2^(e - 127) * E2M1(code), E2M1 = sign | 2-bit exponent (bias 1) | 1-bit
        mantissa (OCP Microscaling Formats v1.0)."""
        e2m1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
        codes = np.arange(16, dtype=np.uint8)
        qs = codes | ((15 - codes) << 4)            # low nibbles 0..15, high nibbles 15..0
        raw, want = [], []
        for e, scale in [(127, 1.0), (130, 8.0), (120, 2.0 ** -7), (1, 2.0 ** -126),
                         (0, 2.0 ** -127)]:
            raw += [np.uint8(e), *qs]
            want += [scale * v for v in e2m1] + [scale * v for v in e2m1[::-1]]
        got = gguf_ref.dequantize(np.array(raw, dtype=np.uint8), 39)
        self.assertEqual(got.dtype, np.float32)
        np.testing.assert_array_equal(got, np.array(want, dtype=np.float32))
        self.assertEqual(got[32 * 4 + 1], np.float32(2.0 ** -128))   # e = 0, code 1: subnormal
        self.assertGreater(got[32 * 4 + 1], 0.0)
        self.assertTrue(np.signbit(got[8]))                                     # -0.0
        # Sizes: 17 bytes per 32 values.
        t = gguf_ref.TensorInfo("w", (64, 3), 39, 0)
        self.assertEqual((t.type_name, t.n_bytes), ("MXFP4", 6 * 17))
        with self.assertRaises(gguf_ref.GGUFError):
            gguf_ref.TensorInfo("w", (48, 2), 39, 0).n_bytes

    def test_reads_gguf_py_fixtures(self):
        files = sorted(FIXTURES.glob("gguf-py-*.gguf"))
        self.assertGreaterEqual(len(files), 3)
        for path in files:
            with self.subTest(file=path.name):
                f = gguf_ref.GGUFFile(str(path))
                arch = f.metadata["general.architecture"]
                self.assertIn(arch, ("llama", "qwen2", "qwen3", "qwen3moe", "deepseek2",
                                     "gemma2", "gemma3", "phi3", "gpt-oss"))
                self.assertEqual(f.version, 3)
                self.assertEqual(f.metadata["tokenizer.ggml.model"], "llama")
                n_vocab = len(f.metadata["tokenizer.ggml.tokens"])
                self.assertEqual(len(f.metadata["tokenizer.ggml.scores"]), n_vocab)
                self.assertEqual(f.tensors["token_embd.weight"].dims[1], n_vocab)
                self.assertEqual(f.data_offset % f.alignment, 0)
                for name in f.tensors:
                    self.assertTrue(np.all(np.isfinite(f.tensor(name))), name)

    def test_reads_every_value_type_nested_arrays_and_alignment(self):
        """A GGUF v2 file assembled by hand, byte by byte, from the format description."""
        def s(text):
            b = text.encode()
            return struct.pack("<Q", len(b)) + b

        kvs = [  # (key, type id, encoded value, expected python value)
            ("u8", 0, struct.pack("<B", 200), 200), ("i8", 1, struct.pack("<b", -5), -5),
            ("u16", 2, struct.pack("<H", 65000), 65000), ("i16", 3, struct.pack("<h", -300), -300),
            ("u32", 4, struct.pack("<I", 4000000000), 4000000000),
            ("i32", 5, struct.pack("<i", -7), -7), ("f32", 6, struct.pack("<f", 0.5), 0.5),
            ("bool", 7, b"\x01", True), ("str", 8, s("h\u00e9llo"), "h\u00e9llo"),
            ("u64", 10, struct.pack("<Q", 2**40), 2**40), ("i64", 11, struct.pack("<q", -2**40),
                                                           -2**40),
            ("f64", 12, struct.pack("<d", 0.1), 0.1),
            ("arr.i16", 9, struct.pack("<IQ", 3, 3) + struct.pack("<3h", 1, -2, 3), [1, -2, 3]),
            ("arr.nested", 9, struct.pack("<IQ", 9, 2)
             + struct.pack("<IQ", 8, 2) + s("a") + s("bc")
             + struct.pack("<IQ", 8, 0), [["a", "bc"], []]),
            ("general.alignment", 4, struct.pack("<I", 64), 64),
        ]
        blob = b"GGUF" + struct.pack("<IQQ", 2, 1, len(kvs))
        for key, vtype, enc, _ in kvs:
            blob += s(key) + struct.pack("<I", vtype) + enc
        blob += s("w") + struct.pack("<I", 2) + struct.pack("<QQ", 32, 2)
        blob += struct.pack("<IQ", 8, 0)  # Q8_0 at offset 0
        blob += b"\0" * (-len(blob) % 64)
        data_offset = len(blob)
        want = np.arange(64, dtype=np.float32).reshape(2, 32) - 20  # exactly representable
        for row in want:
            blob += np.float16(1.0).tobytes() + row.astype(np.int8).tobytes()
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "hand.gguf"
            path.write_bytes(blob)
            f = gguf_ref.GGUFFile(str(path))
        self.assertEqual(f.version, 2)
        for key, vtype, _, value in kvs:
            self.assertEqual(f.metadata_types[key], vtype, key)
            if isinstance(value, float):
                self.assertAlmostEqual(f.metadata[key], value, places=6)
            else:
                self.assertEqual(f.metadata[key], value, key)
        self.assertEqual((f.alignment, f.data_offset), (64, data_offset))
        self.assertEqual(f.tensors["w"].dims, (32, 2))
        np.testing.assert_array_equal(f.tensor("w"), want)  # numpy shape (2, 32)

    def test_rejects_bad_magic_and_truncation(self):
        path = sorted(FIXTURES.glob("gguf-py-*.gguf"))[0]
        blob = path.read_bytes()
        with tempfile.TemporaryDirectory() as d:
            bad = Path(d) / "bad.gguf"
            bad.write_bytes(b"GGUG" + blob[4:])
            with self.assertRaises(gguf_ref.GGUFError):
                gguf_ref.GGUFFile(str(bad))
            bad.write_bytes(blob[:1000])
            with self.assertRaises(gguf_ref.GGUFError):
                gguf_ref.GGUFFile(str(bad))


class ReferenceModelTest(unittest.TestCase):
    def test_incremental_forward_equals_full_forward(self):
        for path in sorted(FIXTURES.glob("gguf-py-*.gguf")):
            with self.subTest(file=path.name):
                m = ref_model.Transformer(str(path))
                ids = prompt_ids(m.config.vocab_size, 5, 12)
                full = m.logits(ids)                                   # [12, vocab]
                m.reset()
                parts = [m.forward(ids[:5]), m.forward(ids[5:6]), m.forward(ids[6:])]
                np.testing.assert_allclose(np.concatenate(parts), full, rtol=0, atol=1e-10)

    def test_llama_rope_convention_equals_hf_rotate_half(self):
        """The llama converter permutes Q/K rows so that adjacent-pair rope on the file's
        weights equals HF's rotate-half (NEOX) rope on the original weights. Undo the
        permutation and run NEOX rope: the logits must not change."""
        m = ref_model.Transformer(str(FIXTURES / "gguf-py-llama-gqa.gguf"))
        c = m.config
        ids = prompt_ids(c.vocab_size, 6, 16)
        want = m.logits(ids)

        def unpermute(w, n_head):  # file row (h, i, c) <- HF row (h, c, i)
            hd = w.shape[0] // n_head
            return w.reshape(n_head, hd // 2, 2, -1).swapaxes(1, 2).reshape(w.shape)

        for layer in m.weights.layers:
            layer["wq"] = unpermute(layer["wq"], c.n_heads)
            layer["wk"] = unpermute(layer["wk"], c.n_kv_heads)
        c.rope_style = "neox"
        got = m.logits(ids)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9 * np.abs(want).max())
        # And the pairing matters: adjacent rope on un-permuted weights is a different model.
        c.rope_style = "adjacent"
        self.assertGreater(rel_err(m.logits(ids), want), 1e-3)


# The mixture-of-experts / MLA fixtures written by tests/data/models/make_moe_fixtures.py (and
# make_gpt_oss_fixture.py): file -> (arch, experts, used, shared, dense leading layers, gating,
# norm, scale).
MOE_FIXTURES = {
    "gguf-py-qwen3moe-f32.gguf": ("qwen3moe", 8, 2, 0, 0, "softmax", True, 0.0),
    "gguf-py-mixtral-f32.gguf": ("llama", 4, 2, 0, 0, "softmax", True, 0.0),
    "gguf-py-deepseek2-lite-f32.gguf": ("deepseek2", 8, 2, 1, 1, "softmax", False, 1.0),
    "gguf-py-deepseek2-qlora-f32.gguf": ("deepseek2", 8, 3, 2, 1, "sigmoid", True, 2.5),
    "gguf-py-gpt-oss-f32.gguf": ("gpt-oss", 4, 2, 0, 0, "softmax_weight", False, 0.0),
}
MLA_FIXTURES = ["gguf-py-deepseek2-lite-f32.gguf", "gguf-py-deepseek2-qlora-f32.gguf"]
MLA_FORM_BOUND = 1e-12  # decompressed vs absorbed: the same math, float64 rounding apart


class MoeMlaReferenceTest(unittest.TestCase):
    """The reference on the qwen3moe, Mixtral and deepseek2 fixtures (no kvserve needed)."""

    def test_fixtures_load_with_the_written_config(self):
        for name, (arch, n_exp, n_used, n_shared, n_dense, gating, norm, scale) in \
                MOE_FIXTURES.items():
            with self.subTest(file=name):
                m = ref_model.Transformer(str(FIXTURES / name))
                c = m.config
                self.assertEqual((c.arch, c.n_expert, c.n_expert_used, c.n_expert_shared,
                                  c.n_dense_lead, c.expert_gating, c.expert_weights_norm,
                                  c.expert_weights_scale),
                                 (arch, n_exp, n_used, n_shared, n_dense, gating, norm, scale))
                self.assertEqual(c.vocab_size, 288)
                logits = m.logits(prompt_ids(c.vocab_size, 3, 6))
                self.assertTrue(np.all(np.isfinite(logits)))

    def test_deepseek2_head_sizes_from_both_key_styles(self):
        """The lite file has the older key_length / value_length (the decompressed heads), the
        qlora file the newer latent ones plus *_mla: both must give the same head sizes."""
        for name in MLA_FIXTURES:
            with self.subTest(file=name):
                f = gguf_ref.GGUFFile(str(FIXTURES / name))
                c = ref_model.Config.from_gguf(f)
                self.assertEqual((c.head_dim, c.qk_nope, c.n_rot, c.v_head_dim, c.kv_lora_rank),
                                 (24, 16, 8, 16, 32))
                self.assertEqual(f.metadata["deepseek2.attention.head_count_kv"],
                                 4 if "lite" in name else 1)

    def test_deepseek2_yarn_scales(self):
        """llama.cpp: with a yarn_log_multiplier (0.1 * mscale_all_dim) the rope is not
        magnitude-scaled and kq_scale = (1 + 0.1 * mscale_all_dim * ln s)^2 / sqrt(nope+rope)."""
        c = ref_model.Transformer(str(FIXTURES / "gguf-py-deepseek2-qlora-f32.gguf")).config
        self.assertEqual((c.rope_scaling, c.rope_factor, c.rope_orig_ctx), ("yarn", 4.0, 64))
        self.assertAlmostEqual(c.rope_mag, 1.0, places=12)
        want = (1 + 0.1 * 1.0 * math.log(4.0)) ** 2 / math.sqrt(24)
        self.assertAlmostEqual(c.kq_scale, want, delta=1e-7 * want)  # 0.1 is stored as f32
        lite = ref_model.Transformer(str(FIXTURES / "gguf-py-deepseek2-lite-f32.gguf")).config
        self.assertEqual((lite.rope_mag, lite.kq_scale), (1.0, 1 / math.sqrt(24)))

    def test_mla_forms_agree(self):
        for name in MLA_FIXTURES:
            with self.subTest(file=name):
                ids = prompt_ids(288, 12, 24)
                dec = ref_model.Transformer(str(FIXTURES / name), mla_form="decompressed")
                absd = ref_model.Transformer(str(FIXTURES / name), mla_form="absorbed")
                want = dec.logits(ids)
                got = absd.logits(ids)
                err = rel_err(got, want)
                RESULTS.append((path_stem(name), "F32", "-", "MLA absorbed vs decompressed", err,
                                MLA_FORM_BOUND))
                self.assertLessEqual(err, MLA_FORM_BOUND)
                # ... also token by token through the latent cache.
                absd.reset()
                steps = np.concatenate([absd.forward(ids[:7])] +
                                       [absd.forward([t]) for t in ids[7:]])
                self.assertLessEqual(rel_err(steps, want), MLA_FORM_BOUND)

    def test_deepseek2_rope_convention_equals_hf(self):
        """DeepSeek's HF code de-interleaves q_pe / k_pe (view(d/2, 2).transpose) and then
        applies rotate-half; llama.cpp applies adjacent-pair rope to the file's rows as they
        are. De-interleave the rope rows of attn_q and attn_kv_a_mqa and run NEOX rope: the
        logits must not change."""
        m = ref_model.Transformer(str(FIXTURES / "gguf-py-deepseek2-lite-f32.gguf"))
        c = m.config
        ids = prompt_ids(c.vocab_size, 13, 16)
        want = m.logits(ids)
        deint = np.concatenate([np.arange(0, c.n_rot, 2), np.arange(1, c.n_rot, 2)])
        for L in m.weights.layers:
            wq = L["wq"].reshape(c.n_heads, c.head_dim, -1).copy()
            wq[:, c.qk_nope:, :] = wq[:, c.qk_nope + deint, :]
            L["wq"] = wq.reshape(L["wq"].shape)
            L["wkv_a"] = L["wkv_a"].copy()
            L["wkv_a"][c.kv_lora_rank:] = L["wkv_a"][c.kv_lora_rank + deint]
        c.rope_style = "neox"
        got = m.logits(ids)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9 * np.abs(want).max())
        c.rope_style = "adjacent"  # and the pairing matters
        self.assertGreater(rel_err(m.logits(ids), want), 1e-3)

    def test_moe_of_identical_experts_is_the_dense_ffn(self):
        """With every expert equal to expert 0 and weights renormalised to sum 1 (Mixtral,
        qwen3moe), the mixture is exactly that expert's dense FFN."""
        for name in ["gguf-py-mixtral-f32.gguf", "gguf-py-qwen3moe-f32.gguf"]:
            with self.subTest(file=name):
                m = ref_model.Transformer(str(FIXTURES / name))
                c = m.config
                ids = prompt_ids(c.vocab_size, 14, 10)
                for L in m.weights.layers:
                    for k in ("exp_gate", "exp_up", "exp_down"):
                        L[k] = np.broadcast_to(L[k][0], L[k].shape)
                want = m.logits(ids)
                for L in m.weights.layers:
                    L["w_gate"], L["w_up"], L["w_down"] = \
                        L["exp_gate"][0], L["exp_up"][0], L["exp_down"][0]
                    L["types"].update(w_gate="F32", w_up="F32", w_down="F32")
                c.n_dense_lead = c.n_layers  # every layer dense now
                np.testing.assert_allclose(m.logits(ids), want, rtol=0,
                                           atol=1e-12 * np.abs(want).max())

    def test_router(self):
        """build_moe_ffn's rules on hand-made router logits."""
        def cfg(**kw):
            base = dict(arch="deepseek2", n_layers=1, dim=1, ffn_dim=0, n_heads=1, n_kv_heads=1,
                        head_dim=1, n_rot=0, vocab_size=1, norm_eps=1e-6, rope_base=1e4,
                        rope_style="adjacent", n_expert=4, n_expert_used=2)
            base.update(kw)
            return ref_model.Config(**base)

        logits = np.array([[0.0, 2.0, 1.0, -1.0]])
        probs = np.exp(logits) / np.exp(logits).sum()
        chosen, w = ref_model.route(logits, cfg())  # softmax, no norm, no scale
        self.assertEqual(chosen.tolist(), [[1, 2]])
        np.testing.assert_allclose(w, probs[:, [1, 2]], rtol=1e-15)
        _, w = ref_model.route(logits, cfg(expert_weights_norm=True, expert_weights_scale=2.5))
        np.testing.assert_allclose(w, 2.5 * probs[:, [1, 2]] / probs[0, [1, 2]].sum(),
                                   rtol=1e-15)
        # Sigmoid; the bias changes the choice (expert 3 instead of 2) but not the weights.
        sig = 1 / (1 + np.exp(-logits))
        bias = np.array([0.0, 0.0, 0.0, 0.6])
        chosen, w = ref_model.route(logits, cfg(expert_gating="sigmoid"), bias)
        self.assertEqual(chosen.tolist(), [[1, 3]])
        np.testing.assert_allclose(w, sig[:, [1, 3]], rtol=1e-15)
        # Groups of 2, one kept: group scores (sums of the top 2) sigmoid(2)+sigmoid(0) = 1.38
        # vs sigmoid(1)+sigmoid(-1) = 1.0, so the choice is made inside group 0.
        chosen, _ = ref_model.route(logits, cfg(expert_gating="sigmoid", n_expert_groups=2,
                                                n_group_used=1))
        self.assertEqual(chosen.tolist(), [[1, 0]])


# The sliding-window fixtures written by tests/data/models/make_swa_fixtures.py (and
# make_phi3_fixture.py, make_gpt_oss_fixture.py): file -> (arch, layers, window, windowed
# layers ("L") / global ("G"), attention soft-cap, final soft-cap, head_dim).
SWA_FIXTURES = {
    "gguf-py-gemma2-f32.gguf": ("gemma2", 26, 8, "LG" * 13, 2.0, 5.0, 16),
    "gguf-py-gemma3-f32.gguf": ("gemma3", 6, 6, "LLLLLG", 0.0, 0.0, 32),
    "gguf-py-mistral-swa-f32.gguf": ("llama", 2, 8, "LL", 0.0, 0.0, 16),
    "gguf-py-phi3-f32.gguf": ("phi3", 2, 8, "LL", 0.0, 0.0, 16),
    "gguf-py-gpt-oss-f32.gguf": ("gpt-oss", 4, 8, "LGLG", 0.0, 0.0, 32),
}
SWA_BOUND = 1e-12  # the same math in another order: float64 rounding apart


def swa_model(name: str) -> ref_model.Transformer:
    return ref_model.Transformer(str(FIXTURES / name))


class SlidingWindowGemmaReferenceTest(unittest.TestCase):
    """The reference's sliding windows, Gemma 2 / 3 and soft-capping (no kvserve needed)."""

    def test_fixtures_load_with_the_written_config(self):
        for name, (arch, layers, window, pattern, attn_cap, final_cap, head_dim) in \
                SWA_FIXTURES.items():
            with self.subTest(file=name):
                c = swa_model(name).config
                self.assertEqual((c.arch, c.n_layers, c.sliding_window, c.head_dim),
                                 (arch, layers, window, head_dim))
                self.assertEqual("".join("L" if c.is_swa_layer(i) else "G"
                                         for i in range(c.n_layers)), pattern)
                self.assertEqual((c.attn_softcap, c.final_softcap), (attn_cap, final_cap))
                gemma = arch.startswith("gemma")
                self.assertEqual(c.embed_scale, 8.0 if gemma else 1.0)   # sqrt(64)
                self.assertEqual(c.ffn_act, "gelu_tanh" if gemma else "silu")
                self.assertAlmostEqual(c.kq_scale, 1 / math.sqrt(head_dim), delta=1e-15)
                self.assertEqual(c.vocab_size, 288)
        g3 = swa_model("gguf-py-gemma3-f32.gguf").config
        self.assertTrue(g3.local_rope)
        self.assertEqual((g3.rope_base, g3.rope_scaling, g3.rope_factor, g3.rope_base_swa),
                         (1e6, "linear", 4.0, 10000.0))
        self.assertFalse(swa_model("gguf-py-gemma2-f32.gguf").config.local_rope)

    def test_attention_mask(self):
        """A query at position p sees key positions p-W+1..p (p - j < W), causal otherwise."""
        for n_past, n_new, window in [(0, 12, 0), (0, 12, 4), (7, 5, 3), (10, 1, 8), (3, 6, 1)]:
            mask = ref_model.Transformer.attention_mask(n_past, n_new, window)
            self.assertEqual(mask.shape, (n_new, n_past + n_new))
            for t in range(n_new):
                p = n_past + t
                lo = max(0, p - window + 1) if window else 0
                want = [not (lo <= j <= p) for j in range(n_past + n_new)]
                self.assertEqual(mask[t].tolist(), want, (n_past, n_new, window, t))

    def test_swa_pattern_and_attention_scale_rules(self):
        """llama.cpp's set_swa_pattern and the Gemma attention scales by model size."""
        def pattern(period, n):
            return "".join("L" if ref_model.swa_layer(i, period) else "G" for i in range(n))
        self.assertEqual(pattern(2, 6), "LGLGLG")              # gemma2
        self.assertEqual(pattern(6, 12), "LLLLLGLLLLLG")       # gemma3: 5, 11, ... global
        self.assertEqual(pattern(0, 3), "LLL")                 # every layer (Mistral)
        scale = ref_model.gemma_attn_scale
        self.assertEqual(scale("gemma2", 26, 2304, 8, 256), 1 / 16)              # 2B
        self.assertEqual(scale("gemma2", 42, 3584, 16, 256), 1 / 16)             # 9B
        self.assertEqual(scale("gemma2", 46, 4608, 32, 128), 1 / math.sqrt(144))  # 27B
        self.assertEqual(scale("gemma3", 34, 2560, 8, 256), 1 / 16)              # 4B
        self.assertEqual(scale("gemma3", 62, 5376, 32, 128), 1 / math.sqrt(168))  # 27B

    def test_gemma3_local_layers_use_their_own_unscaled_rope(self):
        """Windowed gemma3 layers: base 10000, no scaling; the global layer: the file's base
        with linear scaling. Changing either base changes the logits."""
        m = swa_model("gguf-py-gemma3-f32.gguf")
        c = m.config
        pos = np.arange(20)
        i = np.arange(c.n_rot // 2)
        cos_l, _ = ref_model.rope_angles(c, pos, None, local=True)
        np.testing.assert_allclose(cos_l, np.cos(pos[:, None] * 1e4 ** (-2.0 * i / c.n_rot)),
                                   rtol=0, atol=1e-15)
        cos_g, _ = ref_model.rope_angles(c, pos, None)
        np.testing.assert_allclose(cos_g, np.cos(pos[:, None] / 4 * 1e6 ** (-2.0 * i / c.n_rot)),
                                   rtol=0, atol=1e-15)
        ids = prompt_ids(c.vocab_size, 15, 16)
        want = m.logits(ids)
        for attr, value in [("rope_base_swa", 5e4), ("rope_base", 1e4)]:
            old = getattr(c, attr)
            setattr(c, attr, value)
            self.assertGreater(rel_err(m.logits(ids), want), 1e-3, attr)
            setattr(c, attr, old)

    def test_token_by_token_equals_full_forward(self):
        """Through the KV cache one token at a time, the window slides past cached positions."""
        ids = json.loads((FIXTURES / "llamacpp_ids.json").read_text())["ids"]
        for name in SWA_FIXTURES:
            with self.subTest(file=name):
                m = swa_model(name)
                full = m.logits(ids)                                     # [30, vocab]
                m.reset()
                steps = np.concatenate([m.forward(ids[:3])] + [m.forward([t]) for t in ids[3:]])
                err = rel_err(steps, full)
                RESULTS.append((path_stem(name), "F32", "-", "token by token vs full", err,
                                SWA_BOUND))
                self.assertLessEqual(err, SWA_BOUND)

    def test_window_as_long_as_the_sequence_is_no_window(self):
        """A window >= the sequence length masks nothing (same logits as no window at all);
        the files' windows do mask (the logits change)."""
        for name in SWA_FIXTURES:
            with self.subTest(file=name):
                m = swa_model(name)
                c = m.config
                ids = prompt_ids(c.vocab_size, 16, 20)
                windowed = m.logits(ids)
                c.sliding_window = len(ids)
                long_window = m.logits(ids)
                c.sliding_window = 0  # no mask; gemma3's local layers keep their rope
                none = m.logits(ids)
                self.assertLessEqual(rel_err(long_window, none), SWA_BOUND)
                self.assertGreater(rel_err(windowed, none), 1e-3)

    def test_huge_softcap_is_no_softcap(self):
        """c * tanh(x / c) -> x as c grows: a cap of 1e9 gives the uncapped logits; the
        gemma2 file's caps (2 and 5) matter."""
        m = swa_model("gguf-py-gemma2-f32.gguf")
        c = m.config
        ids = prompt_ids(c.vocab_size, 17, 16)
        capped = m.logits(ids)
        c.attn_softcap, c.final_softcap = 0.0, 0.0
        none = m.logits(ids)
        c.attn_softcap, c.final_softcap = 1e9, 1e9
        self.assertLessEqual(rel_err(m.logits(ids), none), SWA_BOUND)
        self.assertGreater(rel_err(capped, none), 1e-2)
        # Each cap on its own matters too.
        for attn, final in [(2.0, 0.0), (0.0, 5.0)]:
            c.attn_softcap, c.final_softcap = attn, final
            self.assertGreater(rel_err(m.logits(ids), none), 1e-3, (attn, final))
            self.assertGreater(rel_err(m.logits(ids), capped), 1e-3, (attn, final))

    def test_gemma2_softcap_defaults(self):
        """A gemma2 file without soft-capping keys or a window gets llama.cpp's (and HF's)
        defaults: 50, 30 and 4096; a gemma3 file gets none."""
        f = gguf_ref.GGUFFile(str(FIXTURES / "gguf-py-gemma2-f32.gguf"))
        for k in ("gemma2.attn_logit_softcapping", "gemma2.final_logit_softcapping",
                  "gemma2.attention.sliding_window"):
            del f.metadata[k]
        c = ref_model.Config.from_gguf(f)
        self.assertEqual((c.attn_softcap, c.final_softcap, c.sliding_window), (50.0, 30.0, 4096))
        f = gguf_ref.GGUFFile(str(FIXTURES / "gguf-py-gemma3-f32.gguf"))
        del f.metadata["gemma3.attention.sliding_window"]
        c = ref_model.Config.from_gguf(f)
        self.assertEqual((c.attn_softcap, c.final_softcap, c.sliding_window), (0.0, 0.0, 0))
        self.assertFalse(any(c.is_swa_layer(i) for i in range(c.n_layers)))

    def test_gelu(self):
        """tanh-approximate GELU, and ggml's f16-table GELU used to emulate llama.cpp."""
        x = np.array([-12.0, -10.0, -3.0, -0.5, 0.0, 0.5, 1.0, 3.0, 10.0, 12.5])
        want = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
        np.testing.assert_allclose(ref_model.gelu_tanh(x), want, rtol=1e-15, atol=0)
        g = ref_model.gelu_like_ggml(x)
        self.assertEqual((g[0], g[1], g[-2], g[-1]), (0.0, 0.0, 10.0, 12.5))
        self.assertEqual(g[4], 0.0)
        self.assertEqual(g[6], float(np.float16(want[6])))  # f16 input 1.0, f16 output
        xs = np.random.default_rng(18).standard_normal(10000) * 3
        np.testing.assert_allclose(ref_model.gelu_like_ggml(xs), ref_model.gelu_tanh(xs),
                                   rtol=2e-3, atol=1e-4)


PHI3_FIXTURE = FIXTURES / "gguf-py-phi3-f32.gguf"
PHI3_BOUND = 1e-12  # the same math in another order: float64 rounding apart


def split_phi3_tensors(f: gguf_ref.GGUFFile) -> gguf_ref.GGUFFile:
    """f with every fused attn_qkv cut into attn_q / attn_k / attn_v and every fused ffn_up
    into ffn_gate (the first half of the rows) and ffn_up (the second half), as separate
    tensors of the same type; the cut is done here, independently of the reference."""
    md = f.metadata
    hd = md["phi3.embedding_length"] // md["phi3.attention.head_count"]
    q = md["phi3.attention.head_count"] * hd
    kv = md["phi3.attention.head_count_kv"] * hd
    ff = md["phi3.feed_forward_length"]
    parts = {}
    for name in [n for n in f.tensors if n.endswith(".attn_qkv.weight")]:
        p = name[:-len("attn_qkv.weight")]
        w = f.tensor(name)                                      # [q + 2 kv, hidden]
        parts[p + "attn_q.weight"] = w[:q]
        parts[p + "attn_k.weight"] = w[q:q + kv]
        parts[p + "attn_v.weight"] = w[q + kv:q + 2 * kv]
    for name in [n for n in f.tensors if n.endswith(".ffn_up.weight")]:
        p = name[:-len("ffn_up.weight")]
        w = f.tensor(name)                                      # [2 ffn, hidden]
        parts[p + "ffn_gate.weight"] = w[:ff]
        parts[p + "ffn_up.weight"] = w[ff:2 * ff]
    for name in list(f.tensors):
        if name.endswith((".attn_qkv.weight", ".ffn_up.weight")):
            ggml_type = f.tensors.pop(name).ggml_type
    for name, a in parts.items():
        f.tensors[name] = gguf_ref.TensorInfo(name, tuple(reversed(a.shape)), ggml_type, -1)
    read = f.tensor
    f.tensor = lambda name: parts[name] if name in parts else read(name)
    return f


class Phi3ReferenceTest(unittest.TestCase):
    """The reference's phi3: fused tensors, LongRoPE factor choice, attn_factor (no kvserve
    needed). llama.cpp's own logits for the fixture at both factor sets pin the rest."""

    def test_fixture_loads_with_the_written_config(self):
        f = gguf_ref.GGUFFile(str(PHI3_FIXTURE))
        c = ref_model.Config.from_gguf(f)
        self.assertEqual((c.arch, c.n_layers, c.dim, c.n_heads, c.n_kv_heads, c.head_dim,
                          c.n_rot, c.ffn_dim, c.rope_style),
                         ("phi3", 2, 64, 4, 2, 16, 16, 96, "neox"))
        self.assertEqual((c.ctx, c.rope_orig_ctx, c.rope_scaling), (256, 64, "none"))
        self.assertTrue(c.long_rope_factors)   # the file's context 256 > 64
        want = math.sqrt(1 + math.log(256 / 64) / math.log(64))  # the converter's formula
        self.assertAlmostEqual(c.rope_attn_factor, want, delta=1e-7)
        self.assertEqual(c.rope_mag, c.rope_attn_factor)
        self.assertEqual(c.kq_scale, 0.25)
        self.assertIn("blk.0.attn_qkv.weight", f.tensors)
        self.assertEqual(f.tensors["blk.0.attn_qkv.weight"].dims, (64, 64 + 2 * 32))
        self.assertEqual(f.tensors["blk.0.ffn_up.weight"].dims, (64, 2 * 96))
        self.assertIn("output.weight", f.tensors)
        w = ref_model.Weights(f, c)
        short, long = w.rope_factors["short"], w.rope_factors["long"]
        self.assertEqual((short.shape, long.shape), ((8,), (8,)))
        self.assertGreater(np.abs(short - long).max(), 0.5)

    def test_fused_tensors_equal_separate_ones(self):
        """attn_qkv = [q; k; v] rows and ffn_up = [gate; up] rows: the file cut into separate
        tensors gives the same logits (both of phi3's layouts load)."""
        ids = prompt_ids(288, 19, 24)
        want = ref_model.Transformer(str(PHI3_FIXTURE)).logits(ids)
        f = split_phi3_tensors(gguf_ref.GGUFFile(str(PHI3_FIXTURE)))
        self.assertIn("blk.1.attn_v.weight", f.tensors)
        self.assertNotIn("blk.1.attn_qkv.weight", f.tensors)
        split = ref_model.Transformer(f)
        self.assertIsNone(split.weights.layers[0].get("wqkv"))
        got = split.logits(ids)
        err = rel_err(got, want)
        RESULTS.append(("gguf-py-phi3-f32", "F32", "-", "fused vs separate tensors", err,
                        PHI3_BOUND))
        self.assertLessEqual(err, PHI3_BOUND)
        # And the order matters: gate and up swapped is another model.
        for L in split.weights.layers:
            L["w_gate"], L["w_up"] = L["w_up"], L["w_gate"]
        self.assertGreater(rel_err(split.logits(ids), want), 1e-3)

    def test_rope_factor_set_follows_the_context(self):
        """The short factors for ctx <= original_context_length (64), the long ones above;
        only the chosen set matters, and the two sets give different logits."""
        m = ref_model.Transformer(str(PHI3_FIXTURE), ctx=64)
        c, w = m.config, m.weights
        self.assertFalse(c.long_rope_factors)
        for ctx, long in [(1, False), (64, False), (65, True), (256, True), (100000, True)]:
            c.ctx = ctx
            self.assertEqual(c.long_rope_factors, long, ctx)
        ids = prompt_ids(288, 20, 24)
        c.ctx = 64
        short = m.logits(ids)
        c.ctx = 256
        long = m.logits(ids)
        self.assertGreater(rel_err(short, long), 1e-2)
        # cos = cos(p * base^(-2i/n_rot) / factor_i) * attn_factor for the chosen set.
        pos = np.arange(30)
        i = np.arange(c.n_rot // 2)
        for name in ("short", "long"):
            fac = w.rope_factors[name]
            cos, sin = ref_model.rope_angles(c, pos, fac)
            theta = pos[:, None] * 1e4 ** (-2.0 * i / c.n_rot) / fac
            np.testing.assert_allclose(cos, np.cos(theta) * c.rope_attn_factor, atol=1e-15)
            np.testing.assert_allclose(sin, np.sin(theta) * c.rope_attn_factor, atol=1e-15)
        # The set not chosen is not read: replace it by ones.
        saved = dict(w.rope_factors)
        for ctx, unused, want in [(64, "long", short), (256, "short", long)]:
            c.ctx = ctx
            w.rope_factors[unused] = np.ones_like(saved[unused])
            self.assertLessEqual(rel_err(m.logits(ids), want), PHI3_BOUND, ctx)
            w.rope_factors[unused] = saved[unused]

    def test_attn_factor_enters_the_scores_squared(self):
        """rope multiplies q and k by attn_factor a (v is not rotated), so a rope of magnitude
        a with softmax scale s is a rope of magnitude 1 with scale s * a^2."""
        m = ref_model.Transformer(str(PHI3_FIXTURE))
        c = m.config
        ids = prompt_ids(288, 21, 24)
        want = m.logits(ids)
        a, s = c.rope_mag, c.kq_scale
        self.assertGreater(a, 1.1)
        c.rope_mag, c.kq_scale = 1.0, s * a * a
        self.assertLessEqual(rel_err(m.logits(ids), want), PHI3_BOUND)
        c.kq_scale = s  # and it matters
        self.assertGreater(rel_err(m.logits(ids), want), 1e-2)

    def test_window_defaults_of_files_without_the_key(self):
        """llama.cpp's phi3 loader: without attention.sliding_window the released Phi-3 shapes
        get 2047 (4k) / 262144 (mini 128k) / 131072 (medium 128k); any other file is refused;
        a stored 0 means no window (Phi-4)."""
        def config(layers, kv, ctx, window=None):
            f = gguf_ref.GGUFFile(str(PHI3_FIXTURE))
            f.metadata.update({"phi3.block_count": layers, "phi3.attention.head_count": 32,
                               "phi3.attention.head_count_kv": kv, "phi3.context_length": ctx,
                               "phi3.embedding_length": 3072})
            del f.metadata["phi3.attention.sliding_window"]
            if window is not None:
                f.metadata["phi3.attention.sliding_window"] = window
            return ref_model.Config.from_gguf(f)
        self.assertEqual(config(32, 32, 4096).sliding_window, 2047)
        self.assertEqual(config(40, 8, 4096).sliding_window, 2047)
        self.assertEqual(config(32, 32, 131072).sliding_window, 262144)
        self.assertEqual(config(40, 8, 131072).sliding_window, 131072)
        self.assertEqual(config(32, 32, 4096, window=0).sliding_window, 0)
        for shape in [(32, 8, 131072), (24, 32, 4096), (2, 2, 256)]:
            with self.assertRaises(ValueError, msg=shape):
                config(*shape)


GPT_OSS_FIXTURE = FIXTURES / "gguf-py-gpt-oss-f32.gguf"
GPT_OSS_BOUND = 1e-12  # the same math in another order: float64 rounding apart


def hf_yarn_inv_freq(head_dim: int, base: float, factor: float, orig_ctx: int,
                     truncate: bool) -> tuple:
    """HF's _compute_yarn_parameters (modeling_rope_utils.py) for rope_type "yarn" without
    mscale keys: (inv_freq [head_dim / 2], attention_factor). truncate=False is gpt-oss's
    config; llama.cpp always rounds the ends (truncate=True)."""
    def corr_dim(rotations):
        return head_dim * math.log(orig_ctx / (rotations * 2 * math.pi)) / (2 * math.log(base))
    low, high = corr_dim(32.0), corr_dim(1.0)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(head_dim // 2) - low) / (high - low), 0, 1)
    pos_freqs = base ** (np.arange(0, head_dim, 2) / head_dim)
    extrapolation = 1 - ramp
    inv_freq = 1 / (factor * pos_freqs) * (1 - extrapolation) + 1 / pos_freqs * extrapolation
    return inv_freq, 0.1 * math.log(factor) + 1.0


def hf_gpt_oss_moe(x, router_w, router_b, gate_up, gate_up_b, down, down_b, top_k):
    """HF's GptOssMLP on rows x [T, D], HF's parameter layout: router_w [E, D], gate_up
    [E, D, 2F] (x @ gate_up; gate = even columns, up = odd ones), gate_up_b [E, 2F], down
    [E, F, D], down_b [E, D]; top-k of the router logits, softmax over those k."""
    logits = x @ router_w.T + router_b                                 # [T, E]
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        top = np.argsort(-logits[t], kind="stable")[:top_k]
        w = np.exp(logits[t, top] - logits[t, top].max())
        w /= w.sum()
        for e, we in zip(top, w):
            gu = x[t] @ gate_up[e] + gate_up_b[e]                      # [2F]
            gate = np.minimum(gu[::2], 7.0)
            up = np.clip(gu[1::2], -7.0, 7.0)
            glu = gate / (1 + np.exp(-1.702 * gate))
            out[t] += we * (((up + 1) * glu) @ down[e] + down_b[e])
    return out


def hf_layout_experts(L: dict) -> tuple:
    """The reference's split expert tensors put back into HF's layout, inverting the
    converter's gate = gate_up[..., ::2], up = gate_up[..., 1::2] and its transposes."""
    E, F, D = L["exp_gate"].shape
    gate_up = np.empty((E, D, 2 * F))
    gate_up[:, :, 0::2] = L["exp_gate"].transpose(0, 2, 1)
    gate_up[:, :, 1::2] = L["exp_up"].transpose(0, 2, 1)
    gate_up_b = np.empty((E, 2 * F))
    gate_up_b[:, 0::2], gate_up_b[:, 1::2] = L["exp_gate_b"], L["exp_up_b"]
    return gate_up, gate_up_b, L["exp_down"].transpose(0, 2, 1), L["exp_down_b"]


def hf_gpt_oss_logits(path: Path, ids: list, truncate: bool) -> np.ndarray:
    """A straight-line gpt-oss forward pass written from HF's modeling_gpt_oss.py (eager
    attention with sinks, sliding_attention on even layers, YaRN rope with its
    attention_factor on cos and sin, GptOssMLP), reading the GGUF tensors directly with
    gguf_ref (the converter's names and layout), independent of ref_model.Transformer."""
    f = gguf_ref.GGUFFile(str(path))
    md = f.metadata
    g = lambda k: md["gpt-oss." + k]                                   # noqa: E731
    t = lambda n: f.tensor(n).astype(np.float64)                       # noqa: E731
    H, Hkv, hd, eps = (g("attention.head_count"), g("attention.head_count_kv"),
                       g("attention.key_length"), g("attention.layer_norm_rms_epsilon"))
    W, k_used = g("attention.sliding_window"), g("expert_used_count")
    inv_freq, att_factor = hf_yarn_inv_freq(hd, g("rope.freq_base"), g("rope.scaling.factor"),
                                            g("rope.scaling.original_context_length"),
                                            truncate)
    T = len(ids)
    freqs = np.arange(T)[:, None] * inv_freq[None, :]                  # [T, hd/2]
    cos, sin = np.cos(freqs) * att_factor, np.sin(freqs) * att_factor

    def rms(x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w

    def rope(x):                                                       # [T, heads, hd]
        a, b = x[..., :hd // 2], x[..., hd // 2:]
        c, s = cos[:, None, :], sin[:, None, :]
        return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)

    x = t("token_embd.weight")[ids]                                    # [T, D]
    qpos, kpos = np.arange(T)[:, None], np.arange(T)[None, :]
    for il in range(g("block_count")):
        p = f"blk.{il}."
        visible = kpos <= qpos
        if il % 2 == 0:  # layer_types: "sliding_attention" iff (il + 1) % 2
            visible &= kpos > qpos - W
        n = rms(x, t(p + "attn_norm.weight"))
        q = rope((n @ t(p + "attn_q.weight").T + t(p + "attn_q.bias")).reshape(T, H, hd))
        k = rope((n @ t(p + "attn_k.weight").T + t(p + "attn_k.bias")).reshape(T, Hkv, hd))
        v = (n @ t(p + "attn_v.weight").T + t(p + "attn_v.bias")).reshape(T, Hkv, hd)
        sinks = t(p + "attn_sinks.weight")
        o = np.zeros((T, H, hd))
        for h in range(H):
            kv = h // (H // Hkv)                                       # repeat_kv
            w = q[:, h] @ k[:, kv].T / math.sqrt(hd)
            w = np.where(visible, w, -np.inf)
            comb = np.concatenate([w, np.full((T, 1), sinks[h])], axis=1)
            comb = np.exp(comb - comb.max(axis=1, keepdims=True))
            o[:, h] = (comb / comb.sum(axis=1, keepdims=True))[:, :-1] @ v[:, kv]
        x = x + o.reshape(T, H * hd) @ t(p + "attn_output.weight").T + t(p + "attn_output.bias")
        m = rms(x, t(p + "post_attention_norm.weight"))
        L = {"exp_gate": t(p + "ffn_gate_exps.weight"), "exp_up": t(p + "ffn_up_exps.weight"),
             "exp_down": t(p + "ffn_down_exps.weight"),
             "exp_gate_b": t(p + "ffn_gate_exps.bias"), "exp_up_b": t(p + "ffn_up_exps.bias"),
             "exp_down_b": t(p + "ffn_down_exps.bias")}
        x = x + hf_gpt_oss_moe(m, t(p + "ffn_gate_inp.weight"), t(p + "ffn_gate_inp.bias"),
                               *hf_layout_experts(L), k_used)
    return rms(x, t("output_norm.weight")) @ t("output.weight").T


class GptOssReferenceTest(unittest.TestCase):
    """The reference's gpt-oss (no kvserve needed): attention sinks, the clamped SwiGLU,
    softmax-over-the-chosen routing, biases, the window pattern and YaRN, and the whole model
    against a straight-line forward written from HF's modeling_gpt_oss.py. There are no
    llama.cpp logits for it (see tools/reference/README.md)."""

    def test_fixture_loads_with_the_written_config(self):
        m = ref_model.Transformer(str(GPT_OSS_FIXTURE))
        c, f = m.config, m.file
        self.assertEqual((c.arch, c.n_layers, c.dim, c.n_heads, c.n_kv_heads, c.head_dim,
                          c.n_rot, c.rope_style, c.vocab_size),
                         ("gpt-oss", 4, 64, 4, 2, 32, 32, "neox", 288))
        self.assertEqual((c.n_expert, c.n_expert_used, c.expert_ffn_dim, c.expert_gating,
                          c.expert_act, c.expert_weights_norm, c.expert_weights_scale),
                         (4, 2, 32, "softmax_weight", "swiglu_oai", False, 0.0))
        self.assertEqual((c.sliding_window, c.embed_scale, c.attn_softcap, c.final_softcap),
                         (8, 1.0, 0.0, 0.0))
        self.assertIn("output.weight", f.tensors)
        for i, L in enumerate(m.weights.layers):
            # The FFN's input norm is post_attention_norm; nothing normalises the attention
            # output, and the file has no ffn_norm.
            np.testing.assert_array_equal(L["ffn_norm"],
                                          f.tensor(f"blk.{i}.post_attention_norm.weight"))
            self.assertIsNone(L["post_attn_norm"])
            self.assertNotIn(f"blk.{i}.ffn_norm.weight", f.tensors)
            for k, shape in [("bq", (128,)), ("bk", (64,)), ("bv", (64,)), ("bo", (64,)),
                             ("sinks", (4,)), ("gate_inp_b", (4,)), ("exp_gate_b", (4, 32)),
                             ("exp_up_b", (4, 32)), ("exp_down_b", (4, 64))]:
                self.assertEqual(L[k].shape, shape, k)

    def test_sinks_of_minus_infinity_are_no_sinks(self):
        """A sink logit of -1e30 adds exp(-1e30 - m) = 0 to each denominator: the logits of a
        model without sinks. The fixture's sinks matter."""
        m = ref_model.Transformer(str(GPT_OSS_FIXTURE))
        ids = prompt_ids(288, 22, 24)
        want = m.logits(ids)
        for L in m.weights.layers:
            L["sinks"] = np.full_like(L["sinks"], -1e30)
        minus_inf = m.logits(ids)
        for L in m.weights.layers:
            L["sinks"] = None
        none = m.logits(ids)
        self.assertLessEqual(rel_err(minus_inf, none), GPT_OSS_BOUND)
        self.assertGreater(rel_err(want, none), 1e-2)

    def test_a_sink_changes_only_the_normalisation(self):
        """On a hand-made head: with a sink s, row t of the output is the sink-free row times
        Z_t / (Z_t + e^s), Z_t = sum over the visible keys of e^(scaled score); equal to HF's
        form (a sink column joins the scores, the softmax, then the column is dropped)."""
        q = np.array([[1.0, 0.0, 2.0, -1.0], [0.5, 1.0, -1.0, 2.0], [-1.0, 2.0, 0.0, 1.0]])
        k = np.array([[1.0, 1.0, 0.0, 0.0], [0.0, 1.0, 1.0, 0.0], [2.0, 0.0, -1.0, 1.0],
                      [0.0, 0.0, 1.0, 1.0], [1.0, -1.0, 1.0, -1.0]])
        v = np.arange(20.0).reshape(5, 4) - 7
        scale, sink = 0.5, 0.7
        mask = ref_model.Transformer.attention_mask(2, 3)   # rows see keys 0..2, 0..3, 0..4
        plain = ref_model.attention_head(q, k, v, scale, mask)
        sunk = ref_model.attention_head(q, k, v, scale, mask, sink=sink)
        for t in range(3):
            s = [scale * float(q[t] @ k[j]) for j in range(t + 3)]
            z = sum(math.exp(x) for x in s)
            np.testing.assert_allclose(sunk[t], z / (z + math.exp(sink)) * plain[t],
                                       rtol=1e-14, atol=0)
            want = sum(math.exp(x) * v[j] for j, x in enumerate(s)) / (z + math.exp(sink))
            np.testing.assert_allclose(sunk[t], want, rtol=1e-14, atol=0)
        scores = np.where(mask, -np.inf, q @ k.T * scale)
        comb = np.concatenate([scores, np.full((3, 1), sink)], axis=1)
        comb = np.exp(comb - comb.max(axis=1, keepdims=True))
        hf = (comb / comb.sum(axis=1, keepdims=True))[:, :-1] @ v
        np.testing.assert_allclose(sunk, hf, rtol=1e-14, atol=1e-15)
        # -1e30 is no sink (bit for bit); a huge sink takes (nearly) all the weight, without
        # overflow.
        np.testing.assert_array_equal(
            ref_model.attention_head(q, k, v, scale, mask, sink=-1e30), plain)
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            big = ref_model.attention_head(q, k, v, scale, mask, sink=1000.0)
        np.testing.assert_array_equal(big, np.zeros_like(big))

    def test_swiglu_oai_on_hand_values(self):
        """min(g, 7) * sigmoid(1.702 min(g, 7)) * (clamp(u, -7, 7) + 1), by hand."""
        def sig(x):
            return 1 / (1 + math.exp(-x))
        cases = [  # (gate, up, expected)
            (0.0, 3.0, 0.0),
            (1.0, 0.0, 1.0 * sig(1.702) * 1.0),                 # no clamp
            (-2.0, 2.0, -2.0 * sig(-3.404) * 3.0),              # no clamp
            (7.0, 7.0, 7.0 * sig(11.914) * 8.0),                # at the limits: no clamp
            (6.5, -7.0, 6.5 * sig(11.063) * -6.0),
            (10.0, 8.0, 7.0 * sig(11.914) * 8.0),               # both clamped
            (8.0, -9.0, 7.0 * sig(11.914) * -6.0),              # both clamped, up from below
            (3.0, -7.5, 3.0 * sig(5.106) * -6.0),               # up clamped from below
            (-20.0, -20.0, -20.0 * sig(-34.04) * -6.0),         # gate has no lower clamp
            (-20.0, 20.0, -20.0 * sig(-34.04) * 8.0),
        ]
        g = np.array([c[0] for c in cases])
        u = np.array([c[1] for c in cases])
        np.testing.assert_allclose(ref_model.swiglu_oai(g, u), [c[2] for c in cases],
                                   rtol=1e-14, atol=0)
        # Very negative gates: 0, without overflow.
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            self.assertEqual(ref_model.swiglu_oai(np.array([-1000.0]), np.array([1.0]))[0],
                             0.0)

    def test_softmax_weight_routing(self):
        """gpt-oss's router on hand-made logits: the k largest logits (ties: the lower expert
        id), weights a softmax over those k only; no renormalisation or scale."""
        c = ref_model.Config(arch="gpt-oss", n_layers=1, dim=1, ffn_dim=0, n_heads=1,
                             n_kv_heads=1, head_dim=1, n_rot=0, vocab_size=1, norm_eps=1e-6,
                             rope_base=1e4, rope_style="neox", n_expert=4, n_expert_used=2,
                             expert_gating="softmax_weight")
        logits = np.array([[0.0, 2.0, 1.0, -1.0], [1.0, 3.0, 3.0, 0.0],
                           [3.0, 1.0, 3.0, 3.0], [-5.0, -4.0, -3.0, -2.0]])
        chosen, w = ref_model.route(logits, c)
        self.assertEqual(chosen.tolist(), [[1, 2], [1, 2], [0, 2], [3, 2]])
        e = math.e
        np.testing.assert_allclose(w, [[e / (e + 1), 1 / (e + 1)], [0.5, 0.5], [0.5, 0.5],
                                       [e / (e + 1), 1 / (e + 1)]], rtol=1e-15, atol=0)
        # Not the full softmax's probabilities of the chosen experts (which sum to < 1).
        full = np.exp(logits[0]) / np.exp(logits[0]).sum()
        self.assertGreater(abs(w[0, 0] - full[1]), 0.05)
        # One expert used: weight 1.
        c.n_expert_used = 1
        chosen, w = ref_model.route(logits, c)
        self.assertEqual(chosen[:, 0].tolist(), [1, 1, 0, 3])
        np.testing.assert_array_equal(w, np.ones((4, 1)))

    def test_every_bias_and_the_sinks_matter(self):
        """Each of the fixture's biases and its sinks changes the logits when zeroed, so a
        reader that drops one cannot agree with the reference."""
        m = ref_model.Transformer(str(GPT_OSS_FIXTURE))
        ids = prompt_ids(288, 23, 20)
        want = m.logits(ids)
        for key in ("bq", "bk", "bv", "bo", "sinks", "gate_inp_b", "exp_gate_b", "exp_up_b",
                    "exp_down_b"):
            saved = [L[key] for L in m.weights.layers]
            for L in m.weights.layers:
                L[key] = np.zeros_like(L[key])
            self.assertGreater(rel_err(m.logits(ids), want), 1e-3, key)
            for L, s in zip(m.weights.layers, saved):
                L[key] = s

    def test_hf_experts_equal_the_reference_moe(self):
        """HF's GptOssMLP on its own layout (gate_up_proj interleaved: gate = even columns,
        as the converter de-interleaves it) equals the reference's MoE on the split tensors;
        reading gate and up the other way round is another model."""
        m = ref_model.Transformer(str(GPT_OSS_FIXTURE))
        x = np.random.default_rng(24).standard_normal((20, m.config.dim))
        for i, L in enumerate(m.weights.layers):
            with self.subTest(layer=i):
                want = hf_gpt_oss_moe(x, L["gate_inp"], L["gate_inp_b"],
                                      *hf_layout_experts(L), m.config.n_expert_used)
                got = m.moe(L, x)
                self.assertLessEqual(rel_err(got, want), GPT_OSS_BOUND)
                swapped = dict(L, exp_gate=L["exp_up"], exp_up=L["exp_gate"],
                               exp_gate_b=L["exp_up_b"], exp_up_b=L["exp_gate_b"])
                self.assertGreater(rel_err(m.moe(swapped, x), want), 1e-2)

    def test_window_pattern_and_required_keys(self):
        """llama.cpp's set_swa_pattern(2) = HF's layer_types (sliding iff (il + 1) % 2): layers
        0, 2, ... windowed; a sliding_window_pattern key (newer llama.cpp) overrides the period;
        the window is required; the head is rope.dimension_count wide, all of it rotated."""
        c = ref_model.Transformer(str(GPT_OSS_FIXTURE)).config
        hf = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(4)]
        self.assertEqual([c.is_swa_layer(i) for i in range(4)],
                         [t == "sliding_attention" for t in hf])
        self.assertEqual([c.layer_window(i) for i in range(4)], [8, 0, 8, 0])

        def config(**changes):
            f = gguf_ref.GGUFFile(str(GPT_OSS_FIXTURE))
            for k, v in changes.items():
                if v is None:
                    del f.metadata["gpt-oss." + k]
                else:
                    f.metadata["gpt-oss." + k] = v
            return ref_model.Config.from_gguf(f)
        c4 = config(**{"attention.sliding_window_pattern": 4})
        self.assertEqual([c4.is_swa_layer(i) for i in range(4)], [True, True, True, False])
        self.assertEqual(config(**{"rope.freq_base_swa": 150000.0}).rope_base, 150000.0)
        for bad in [{"attention.sliding_window": None}, {"rope.dimension_count": 16},
                    {"rope.freq_base_swa": 10000.0}, {"expert_feed_forward_length": None}]:
            with self.assertRaises(ValueError, msg=str(bad)):
                config(**bad)

    def test_yarn_rope_of_the_fixture(self):
        """YaRN as ggml computes it: the ramp's ends n_rot ln(orig / (2 pi beta)) /
        (2 ln base) for beta 32 and 1 are -1.54 and 3.12 here, rounded to 0 and 4; pair i
        blends theta / 4 and theta with weight 1 - clamp(i / 4, 0, 1) on theta; cos and sin
        carry 1 + 0.1 ln 4; q.k is scaled by 1 / sqrt(32)."""
        m = ref_model.Transformer(str(GPT_OSS_FIXTURE))
        c = m.config
        self.assertEqual((c.rope_scaling, c.rope_factor, c.rope_orig_ctx, c.rope_base),
                         ("yarn", 4.0, 64, 150000.0))
        mag = 1 + 0.1 * math.log(4.0)
        self.assertAlmostEqual(c.rope_mag, mag, delta=1e-15)
        self.assertEqual(c.kq_scale, 1 / math.sqrt(32))
        pos, i = np.arange(40), np.arange(16)
        theta = pos[:, None] * 150000.0 ** (-2.0 * i / 32)
        ramp = 1 - np.clip(i / 4.0, 0, 1)
        want = theta / 4 * (1 - ramp) + theta * ramp
        cos, sin = ref_model.rope_angles(c, pos, None)
        np.testing.assert_allclose(cos, np.cos(want) * mag, rtol=0, atol=1e-15)
        np.testing.assert_allclose(sin, np.sin(want) * mag, rtol=0, atol=1e-15)
        # HF's inv_freq with the ends rounded is the same rope.
        inv_freq, att = hf_yarn_inv_freq(32, 150000.0, 4.0, 64, truncate=True)
        np.testing.assert_allclose(pos[:, None] * inv_freq, want, rtol=1e-14, atol=0)
        self.assertAlmostEqual(att, mag, delta=1e-15)

    def test_model_equals_a_forward_written_from_hf(self):
        """The whole fixture against hf_gpt_oss_logits (HF's formulas on the GGUF tensors)
        with the YaRN ends rounded as llama.cpp rounds them: the same logits. With HF's own
        gpt-oss setting (truncate false: ends 0 and 3.12 unrounded) the rope differs and so do
        the logits; llama.cpp and the reference compute the rounded form."""
        ids = json.loads((FIXTURES / "llamacpp_ids.json").read_text())["ids"]
        want = ref_model.Transformer(str(GPT_OSS_FIXTURE)).logits(ids)
        got = hf_gpt_oss_logits(GPT_OSS_FIXTURE, ids, truncate=True)
        err = rel_err(got, want)
        RESULTS.append(("gguf-py-gpt-oss-f32", "F32", "-", "HF-formula forward vs ref", err,
                        GPT_OSS_BOUND))
        self.assertLessEqual(err, GPT_OSS_BOUND)
        untruncated = rel_err(hf_gpt_oss_logits(GPT_OSS_FIXTURE, ids, truncate=False), want)
        self.assertGreater(untruncated, 1e-3)
        m = ref_model.Transformer(str(GPT_OSS_FIXTURE))
        m.config.yarn_truncate = False
        self.assertLessEqual(rel_err(m.logits(ids),
                                     hf_gpt_oss_logits(GPT_OSS_FIXTURE, ids, truncate=False)),
                             GPT_OSS_BOUND)


def path_stem(name: str) -> str:
    return name[:-len(".gguf")] if name.endswith(".gguf") else name


class LlamaCppFixtureTest(unittest.TestCase):
    """The reference against logits that llama.cpp itself computed for the fixture files."""

    def test_reference_matches_llamacpp(self):
        files = llamacpp_logits_files("logits", "long_logits")
        if not files:
            self.skipTest("no llama.cpp logits recorded")
        ids = json.loads((FIXTURES / "llamacpp_ids.json").read_text())["ids"]
        for npy, model, ctx in files:
            with self.subTest(file=model.name, ctx=ctx):
                theirs = np.load(npy)
                ref = ref_model.Transformer(str(model), ctx=ctx).logits(ids)
                err = rel_err(theirs, ref)
                wclass = fixture_weights(model)
                gelu = fixture_arch(model) in GELU_ARCHS
                bound = LLAMACPP_BOUND[wclass]
                if wclass == "F32" and gelu:  # llama.cpp's f16 GELU table, see GELU_ARCHS
                    bound = LLAMACPP_GELU_TABLE_BOUND
                what = "llama.cpp vs reference" + ("" if ctx is None else f" (ctx {ctx})")
                RESULTS.append((model.stem, wclass, "f32", what, err, bound))
                self.assertLessEqual(err, bound, first_bad_position(theirs, ref))
                if wclass == "F32":
                    np.testing.assert_array_equal(theirs.argmax(1), ref.argmax(1))
                if wclass != "F32" or gelu:
                    bound = LLAMACPP_GELU_TABLE_GGML_ACT_BOUND if wclass == "F32" \
                        else LLAMACPP_GGML_ACT_BOUND
                    emu = ref_model.Transformer(str(model), ggml_activations=True,
                                               ctx=ctx).logits(ids)
                    err = rel_err(theirs, emu)
                    RESULTS.append((model.stem, wclass, "f32", "llama.cpp vs ref+ggml act.", err,
                                    bound))
                    self.assertLessEqual(err, bound, first_bad_position(theirs, emu))

    def test_reference_matches_llamacpp_without_gelu_table(self):
        """llama.cpp built with GELU computed in f32 (ggml-cpu.c without GGML_GELU_FP16): on the
        all-F32 GeGLU files it must agree with the reference to float32 rounding."""
        files = sorted(FIXTURES.glob("*.llamacpp_exact_gelu_logits.npy"))
        if not files:
            self.skipTest("no exact-GELU llama.cpp logits recorded")
        ids = json.loads((FIXTURES / "llamacpp_ids.json").read_text())["ids"]
        for npy in files:
            model = npy.with_name(npy.name.replace(".llamacpp_exact_gelu_logits.npy", ".gguf"))
            with self.subTest(file=model.name):
                theirs = np.load(npy)
                ref = ref_model.Transformer(str(model)).logits(ids)
                err = rel_err(theirs, ref)
                RESULTS.append((model.stem, "F32", "f32", "llama.cpp (f32 GELU) vs reference",
                                err, LLAMACPP_BOUND["F32"]))
                self.assertLessEqual(err, LLAMACPP_BOUND["F32"], first_bad_position(theirs, ref))
                np.testing.assert_array_equal(theirs.argmax(1), ref.argmax(1))


# ----------------------------------------------------------------------------------------------
# kvserve against the reference.


def require_kvserve():
    """KVSERVE is set by main() after import, so the skip is decided at run time."""
    if not KVSERVE:
        raise unittest.SkipTest("no kvserve binary (--kvserve or KVSERVE_BIN)")


class KvserveSyntheticTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_kvserve()
        cls.tmp = tempfile.TemporaryDirectory(prefix="kvserve-ref-")
        cls.dir = Path(cls.tmp.name)
        cls.models = {}  # (name, type) -> (path, Transformer)
        for seed, (name, shape) in enumerate(SYNTHETIC.items()):
            for wtype in WEIGHT_TYPES:
                path = cls.dir / f"{name}-{wtype}.gguf"
                args = ["make-model", "--out", path, "--arch", shape["arch"],
                        "--layers", shape["layers"], "--hidden", shape["hidden"],
                        "--heads", shape["heads"], "--kv-heads", shape["kv_heads"],
                        "--ffn", shape["ffn"], "--vocab", shape["vocab"], "--type", wtype,
                        "--seed", 100 + seed]
                if "head_dim" in shape:
                    args += ["--head-dim", shape["head_dim"]]
                if shape.get("tie"):
                    args += ["--tie-embeddings"]
                for key, flag in (("rope_base", "--rope-base"), ("window", "--sliding-window"),
                                  ("attn_softcap", "--attn-softcap"),
                                  ("final_softcap", "--final-softcap"),
                                  ("context", "--context"),
                                  ("rope_orig", "--rope-original-context")):
                    if key in shape:
                        args += [flag, shape[key]]
                args += shape.get("extra", [])
                try:
                    run_kvserve(*args)
                    cls.models[(name, wtype)] = path
                except AssertionError as e:  # reported by each test that needs this model
                    cls.models[(name, wtype)] = e
        cls.ref_cache = {}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def model(self, name, wtype) -> Path:
        path = self.models[(name, wtype)]
        if isinstance(path, Exception):
            self.fail(f"make-model failed for {name} {wtype}: {path}")
        return path

    def reference(self, name, wtype):
        key = (name, wtype)
        if key not in self.ref_cache:
            self.ref_cache[key] = ref_model.Transformer(str(self.models[key]))
        return self.ref_cache[key]

    def test_make_model_writes_what_was_asked(self):
        for name, wtype in self.models:
            with self.subTest(model=name, type=wtype):
                f = gguf_ref.GGUFFile(str(self.model(name, wtype)))
                shape = SYNTHETIC[name]
                c = ref_model.Config.from_gguf(f)
                self.assertEqual(c.arch, shape["arch"])
                self.assertEqual((c.n_layers, c.dim, c.n_heads, c.n_kv_heads, c.ffn_dim,
                                  c.vocab_size),
                                 (shape["layers"], shape["hidden"], shape["heads"],
                                  shape["kv_heads"], shape["ffn"], shape["vocab"]))
                self.assertEqual(c.head_dim, shape.get("head_dim", c.dim // c.n_heads))
                up = next(n for n in ("blk.0.ffn_up.weight", "blk.0.ffn_up_exps.weight")
                          if n in f.tensors)
                self.assertEqual(f.tensors[up].type_name, wtype)
                self.assertEqual("output.weight" not in f.tensors, bool(shape.get("tie")))
                self.assertEqual(c.sliding_window, shape.get("window", 0))
                if "rope_base" in shape:
                    self.assertEqual(c.rope_base, shape["rope_base"])
                if "attn_softcap" in shape or "final_softcap" in shape:
                    self.assertEqual((c.attn_softcap, c.final_softcap),
                                     (shape.get("attn_softcap"), shape.get("final_softcap")))
                if shape["arch"] == "phi3":
                    self.check_phi3_file(f, c, shape, wtype)
                if shape["arch"] == "gpt-oss":
                    self.check_gpt_oss_file(f, c, shape)

    def check_phi3_file(self, f, c, shape, wtype):
        """phi3 as the converter writes it: fused attn_qkv [hidden, q + 2 kv] and ffn_up
        [hidden, 2 ffn], both LongRoPE factor sets [head_dim / 2] (F32), the converter's
        attn_factor, attention.sliding_window always present."""
        hd = c.head_dim
        qkv = f.tensors["blk.0.attn_qkv.weight"]
        self.assertEqual(qkv.dims, (c.dim, (c.n_heads + 2 * c.n_kv_heads) * hd))
        self.assertEqual(qkv.type_name, wtype)
        self.assertEqual(f.tensors["blk.0.ffn_up.weight"].dims, (c.dim, 2 * c.ffn_dim))
        self.assertNotIn("blk.0.attn_q.weight", f.tensors)
        self.assertNotIn("blk.0.ffn_gate.weight", f.tensors)
        self.assertEqual((c.ctx, c.rope_orig_ctx), (shape["context"], shape["rope_orig"]))
        for name in ("rope_factors_short.weight", "rope_factors_long.weight"):
            self.assertEqual(f.tensors[name].dims, (hd // 2,))
            self.assertEqual(f.tensors[name].type_name, "F32")
            self.assertTrue(np.all(f.tensor(name) > 0))
        self.assertGreater(np.abs(f.tensor("rope_factors_short.weight")
                                  - f.tensor("rope_factors_long.weight")).max(), 0.1)
        s = shape["context"] / shape["rope_orig"]
        want = math.sqrt(1 + math.log(s) / math.log(shape["rope_orig"]))
        self.assertAlmostEqual(c.rope_attn_factor, want, delta=1e-6)
        self.assertIn("phi3.attention.sliding_window", f.metadata)

    def check_gpt_oss_file(self, f, c, shape):
        """gpt-oss as llama.cpp's loader wants it: every bias, the sinks, the router bias and
        post_attention_norm (no ffn_norm); YaRN with the asked original context; the expert
        shapes; layers 0, 2, ... windowed."""
        D, H, hd = c.dim, c.n_heads, c.head_dim
        E, F = c.n_expert, c.expert_ffn_dim
        extra = shape["extra"]
        self.assertEqual((E, c.n_expert_used, F),
                         tuple(extra[extra.index(k) + 1] for k in
                               ("--experts", "--experts-used", "--expert-ffn")))
        want = {"attn_q.bias": (H * hd,), "attn_k.bias": (c.n_kv_heads * hd,),
                "attn_v.bias": (c.n_kv_heads * hd,), "attn_output.bias": (D,),
                "attn_sinks.weight": (H,), "post_attention_norm.weight": (D,),
                "ffn_gate_inp.weight": (D, E), "ffn_gate_inp.bias": (E,),
                "ffn_gate_exps.weight": (D, F, E), "ffn_up_exps.weight": (D, F, E),
                "ffn_down_exps.weight": (F, D, E), "ffn_gate_exps.bias": (F, E),
                "ffn_up_exps.bias": (F, E), "ffn_down_exps.bias": (D, E)}
        for i in range(c.n_layers):
            for name, dims in want.items():
                self.assertEqual(f.tensors[f"blk.{i}.{name}"].dims, dims, f"blk.{i}.{name}")
            self.assertNotIn(f"blk.{i}.ffn_norm.weight", f.tensors)
            self.assertTrue(np.any(f.tensor(f"blk.{i}.attn_sinks.weight") != 0))
        self.assertEqual((c.expert_gating, c.expert_act, c.expert_weights_norm),
                         ("softmax_weight", "swiglu_oai", False))
        self.assertEqual((c.rope_scaling, c.rope_factor, c.rope_orig_ctx),
                         ("yarn", float(extra[extra.index("--yarn-factor") + 1]),
                          extra[extra.index("--yarn-original-context") + 1]))
        self.assertEqual("".join("L" if c.is_swa_layer(i) else "G" for i in range(c.n_layers)),
                         "LG" * (c.n_layers // 2))

    def test_logits_match_reference(self):
        for name, wtype in self.models:
            vocab = SYNTHETIC[name]["vocab"]
            ids = prompt_ids(vocab, 7)
            ref = None  # [N, vocab], the same for both caches: computed once
            for kv, flags, bounds in [("f32", ["--cache-type-k", "f32", "--cache-type-v", "f32"],
                                       BOUND_F32_KV), ("f16 (default)", [], BOUND_F16_KV)]:
                with self.subTest(model=name, type=wtype, kv=kv):
                    path = self.model(name, wtype)
                    if ref is None:
                        ref = self.reference(name, wtype).logits(ids)
                    ours = kvserve_logits(path, ids, vocab, self.dir, *flags)
                    bound = bounds[wtype]
                    if is_moe(SYNTHETIC[name]) and wtype in ("Q8_0", "Q4_K"):
                        # A router is a discontinuity: with quantized weights kvserve rounds the
                        # router's input (q8 activations) and a near tie may pick another
                        # expert at a position, which changes that position's logits (and those
                        # of later positions that attend to it) by far more than rounding does.
                        # Each position's error is therefore bounded in the median, and at most
                        # a third of the positions may exceed the bound (deepseek2-v3's sigmoid
                        # router over expert groups with weights scaled by 2.5 is the most
                        # sensitive: 9 of 32 on Q4_K). A wrong expert slice or a wrong
                        # quantized path would be off at every position; F32 and F16 weights
                        # are held to the plain bound above.
                        per = position_errors(ours, ref)
                        over = int(np.sum(per > bound))
                        RESULTS.append((name, wtype, kv, f"logits median ({over} over, max "
                                        f"{per.max():.2g})", float(np.median(per)), bound))
                        self.assertLessEqual(float(np.median(per)), bound)
                        self.assertLessEqual(over, len(ids) // 3, first_bad_position(ours, ref))
                        continue
                    err = rel_err(ours, ref)
                    RESULTS.append((name, wtype, kv, "logits", err, bound))
                    self.assertLessEqual(err, bound, f"{name} {wtype} kv={kv}: "
                                         + first_bad_position(ours, ref))

    def test_chunked_prefill_gives_same_logits(self):
        """Feeding the prompt in pieces (so later pieces read earlier ones from the paged KV
        cache, across block boundaries) must not change the logits."""
        variants = [("chunk 1", ["--chunk", 1]), ("chunk 5", ["--chunk", 5]),
                    ("chunk 5, block 3", ["--chunk", 5, "--block-size", 3])]
        # The windowed models too: a window that slides across chunk and block boundaries.
        for name, wtype in [("llama-gqa", "F32"), ("qwen3-qknorm", "Q4_K"),
                            ("gemma2-swa", "F32"), ("gemma3-swa", "Q4_K"), ("phi3", "Q8_0"),
                            ("gpt-oss", "Q8_0")]:
            vocab = SYNTHETIC[name]["vocab"]
            ids = prompt_ids(vocab, 8)
            for kv, flags in [("f32", ["--cache-type-k", "f32", "--cache-type-v", "f32"]),
                              ("f16 (default)", [])]:
                full = None
                for what, extra in variants:
                    with self.subTest(model=name, type=wtype, kv=kv, variant=what):
                        path = self.model(name, wtype)
                        if full is None:  # the unchunked run, once per kv dtype
                            full = kvserve_logits(path, ids, vocab, self.dir, *flags)
                        full64 = full.astype(np.float64)
                        got = kvserve_logits(path, ids, vocab, self.dir, *extra, *flags)
                        err = rel_err(got, full64)
                        RESULTS.append((name, wtype, kv, f"{what} vs one call", err,
                                        CHUNK_BOUND))
                        self.assertLessEqual(err, CHUNK_BOUND, first_bad_position(got, full64))

    def test_phi3_rope_factor_set_follows_ctx(self):
        """`kvserve logits --ctx N` on the phi3 model: the short LongRoPE factors for
        N <= original_context_length (64), the long ones above, as the reference with ctx N.
        The two sets give logits far apart, so a wrong choice cannot pass."""
        name = "phi3"
        vocab = SYNTHETIC[name]["vocab"]
        ids = prompt_ids(vocab, 7)
        flags = ["--cache-type-k", "f32", "--cache-type-v", "f32"]
        for wtype in WEIGHT_TYPES:
            refs = {}
            for ctx in PHI3_CTX:
                with self.subTest(type=wtype, ctx=ctx):
                    path = self.model(name, wtype)
                    refs[ctx] = ref_model.Transformer(str(path), ctx=ctx).logits(ids)
                    ours = kvserve_logits(path, ids, vocab, self.dir, "--ctx", ctx, *flags)
                    bound = BOUND_F32_KV[wtype]
                    err = rel_err(ours, refs[ctx])
                    RESULTS.append((name, wtype, "f32", f"logits --ctx {ctx}", err, bound))
                    self.assertLessEqual(err, bound, first_bad_position(ours, refs[ctx]))
            if len(refs) == len(PHI3_CTX):
                # Farther apart than twice the bound: kvserve with the wrong set would fail.
                self.assertGreater(rel_err(refs[64], refs[256]), 3 * BOUND_F32_KV[wtype])
                self.assertLessEqual(rel_err(refs[65], refs[256]), 1e-12)

    def test_greedy_generation_matches_reference(self):
        for name in SYNTHETIC:
            ids = prompt_ids(SYNTHETIC[name]["vocab"], 9, 24)
            with self.subTest(model=name):
                path = self.model(name, "F32")
                m = self.reference(name, "F32")
                base = ["run", "--model", path, "--prompt-ids", ",".join(map(str, ids)),
                        "-n", N_GREEDY, "--temp", "0", "--ignore-eos", "--json",
                        "--threads", THREADS]
                p = subprocess.run([KVSERVE, *map(str, base), "--cache-type-k", "f32",
                                    "--cache-type-v", "f32"], capture_output=True, text=True,
                                   timeout=120)
                kv = "f32"
                if p.returncode != 0:  # `run` may not take cache-type flags: use its default
                    p, kv = run_kvserve(*base), "f16 (default)"
                lines = [ln for ln in p.stdout.splitlines() if ln.strip().startswith("{")]
                self.assertTrue(lines, f"no JSON object in output: {p.stdout[-1000:]}")
                out = json.loads(lines[-1])
                fed = [int(t) for t in out["prompt_ids"]]
                self.assertEqual(fed[-len(ids):], ids, "prompt_ids are not the ids we sent")
                got = [int(t) for t in out["ids"]]
                want, margins = m.greedy(fed, N_GREEDY)
                eos = m.file.get("tokenizer.ggml.eos_token_id")
                if eos is not None and eos in want:  # generation may stop at EOS
                    cut = want.index(eos)
                    self.assertIn(got, (want[:cut], want[:cut + 1]))
                else:
                    self.assertEqual(len(got), N_GREEDY, f"ids: {got}")
                    if got != want:
                        k = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
                        self.fail(f"{name} (kv {kv}): greedy ids differ at step {k}: "
                                  f"kvserve {got} vs reference {want}; reference top-2 margin "
                                  f"at that step {margins[k]:.4g}")
                RESULTS.append((name, "F32", kv, f"greedy {N_GREEDY} ids equal "
                                f"(min margin {min(margins):.3g})", 0.0, 0.0))


class KvserveForeignFileTest(unittest.TestCase):
    """kvserve on GGUF files written by another tool (llama.cpp's gguf-py GGUFWriter)."""

    @classmethod
    def setUpClass(cls):
        require_kvserve()

    def test_logits_match_reference_on_gguf_py_files(self):
        with tempfile.TemporaryDirectory(prefix="kvserve-ref-") as d:
            for path in sorted(FIXTURES.glob("gguf-py-*.gguf")):
                m = ref_model.Transformer(str(path))
                vocab = m.config.vocab_size
                ids = prompt_ids(vocab, 10, 28)
                ref = m.logits(ids)
                for kv, flags, bounds in [
                        ("f32", ["--cache-type-k", "f32", "--cache-type-v", "f32"], BOUND_F32_KV),
                        ("f16 (default)", [], BOUND_F16_KV)]:
                    with self.subTest(file=path.name, kv=kv):
                        ours = kvserve_logits(path, ids, vocab, Path(d), *flags)
                        err = rel_err(ours, ref)
                        bound = bounds[fixture_weights(path)]
                        RESULTS.append((path.stem, fixture_weights(path), kv, "logits", err,
                                        bound))
                        self.assertLessEqual(err, bound, first_bad_position(ours, ref))

    def test_greedy_run_on_gguf_py_files(self):
        """`kvserve run` loads these files, tokenizer metadata included; on the all-F32 ones
        its greedy ids equal the reference's."""
        for path in sorted(FIXTURES.glob("gguf-py-*.gguf")):
            with self.subTest(file=path.name):
                m = ref_model.Transformer(str(path))
                ids = prompt_ids(m.config.vocab_size, 11, 20)
                p = run_kvserve("run", "--model", path, "--prompt-ids", ",".join(map(str, ids)),
                                "-n", 8, "--temp", 0, "--ignore-eos", "--json",
                                "--threads", THREADS, "--cache-type-k", "f32",
                                "--cache-type-v", "f32")
                out = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])
                self.assertEqual(len(out["ids"]), 8)
                if fixture_weights(path) == "F32":
                    want, margins = m.greedy([int(t) for t in out["prompt_ids"]], 8)
                    self.assertEqual(out["ids"], want, f"reference margins {margins}")

    def test_logits_match_llamacpp_on_f32_files(self):
        """On all-F32 files llama.cpp's logits are exact to float32 rounding, so kvserve with an
        f32 KV cache must match them as closely as it matches the reference (GeGLU
        architectures: up to llama.cpp's f16 GELU table, see GELU_ARCHS)."""
        files = [f for f in llamacpp_logits_files("logits", "long_logits", "exact_gelu_logits")
                 if f[1].stem.endswith("-f32")]
        if not files:
            self.skipTest("no llama.cpp logits recorded")
        ids = json.loads((FIXTURES / "llamacpp_ids.json").read_text())["ids"]
        with tempfile.TemporaryDirectory(prefix="kvserve-ref-") as d:
            for npy, model, ctx in files:
                exact_gelu = npy.name.endswith(".llamacpp_exact_gelu_logits.npy")
                with self.subTest(file=model.name, gelu="f32" if exact_gelu else "ggml table",
                                  ctx=ctx):
                    theirs = np.load(npy).astype(np.float64)
                    ctx_flags = [] if ctx is None else ["--ctx", ctx]
                    ours = kvserve_logits(model, ids, theirs.shape[1], Path(d), *ctx_flags,
                                          "--cache-type-k", "f32", "--cache-type-v", "f32")
                    err = rel_err(ours, theirs)
                    bound = BOUND_F32_KV["F32"] if exact_gelu else \
                        llamacpp_f32_bound(model, BOUND_F32_KV["F32"])
                    what = "kvserve vs llama.cpp (f32 GELU)" if exact_gelu else \
                        "kvserve vs llama.cpp"
                    if ctx is not None:
                        what += f" (ctx {ctx})"
                    RESULTS.append((model.stem, "F32", "f32", what, err, bound))
                    self.assertLessEqual(err, bound, first_bad_position(ours, theirs))


def print_table():
    if not RESULTS:
        return
    print("\nnumerics vs the float64 reference (rel err = max|a-b| / max|b| over all logits)")
    print(f"{'model':30s} {'weights':7s} {'kv':13s} {'check':34s} {'rel err':>9s} {'bound':>7s}")
    for model, wtype, kv, what, err, bound in RESULTS:
        ok = "" if err <= bound else "  FAIL"
        print(f"{model:30s} {wtype:7s} {kv:13s} {what:34s} {err:9.2e} {bound:7.0e}{ok}")


def main() -> int:
    global KVSERVE
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvserve", default=KVSERVE, help="path of the kvserve binary")
    ap.add_argument("--no-kvserve", action="store_true", help="run only the reference tests")
    args, rest = ap.parse_known_args()
    KVSERVE = None if args.no_kvserve else args.kvserve
    if KVSERVE and not os.access(KVSERVE, os.X_OK):
        print(f"kvserve binary {KVSERVE} is not executable", file=sys.stderr)
        return 2
    start = time.monotonic()
    prog = unittest.main(argv=[sys.argv[0], *rest], exit=False, verbosity=2)
    print_table()
    print(f"\n{time.monotonic() - start:.1f} s")
    return 0 if prog.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
