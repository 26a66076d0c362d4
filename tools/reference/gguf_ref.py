"""An independent, deliberately simple GGUF reader and dequantizer (Python + numpy only).

This is the *reference* side of kvserve's numerics tests: it shares no code with the C++ engine
and is written from the published format facts (GGUF spec, ggml block layouts), so that when the
two agree we learn something. Speed is a non-goal; obviousness is the goal.

Format facts used (all little-endian):
  header   : magic b"GGUF", u32 version (2 or 3), u64 tensor_count, u64 metadata_kv_count
  string   : u64 byte length, UTF-8 bytes (no terminator)
  metadata : string key, u32 value type, value
             types 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool(u8), 8 string,
                   9 array (u32 element type, u64 count, elements; arrays may nest),
                   10 u64, 11 i64, 12 f64
  tensor   : string name, u32 n_dims, u64 dims[n_dims] (fastest-varying first), u32 ggml type,
             u64 offset (relative to the data section, a multiple of the alignment)
  data     : starts at the first multiple of `general.alignment` (default 32) after the infos

A tensor with dims [ne0, ne1, ...] is returned as a numpy array of shape [..., ne1, ne0], so a
weight with dims [n_in, n_out] becomes an (n_out, n_in) matrix and `W @ x` is the matvec.

Block layouts (ggml-common.h), elements per block / bytes per block:
  Q4_0  32/18  f16 d; u8 qs[16]                 x = d * (nibble - 8)
  Q4_1  32/20  f16 d, m; u8 qs[16]              x = d * nibble + m
  Q5_0  32/22  f16 d; u32 qh; u8 qs[16]         x = d * ((nibble | hibit << 4) - 16)
  Q5_1  32/24  f16 d, m; u32 qh; u8 qs[16]      x = d * (nibble | hibit << 4) + m
  Q8_0  32/34  f16 d; i8 qs[32]                 x = d * q
    (for the 32-element types: element j < 16 is the low nibble of qs[j], element j + 16 the
     high nibble of qs[j]; the fifth bit of element i is bit i of qh)
  Q4_K 256/144 f16 d, dmin; u8 scales[12]; u8 qs[128]
  Q5_K 256/176 f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]
    (8 sub-blocks of 32 with 6-bit scale and min packed in `scales`; sub-blocks 2c and 2c+1
     are the low and high nibbles of qs[32c : 32c+32]; Q5_K's fifth bit of element l of
     sub-block j is bit j of qh[l]; x = d * sc_j * q - dmin * m_j)
  Q6_K 256/210 u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d
    (x = d * scales[i // 16] * (q - 32), q a 6-bit value from ql nibbles and qh 2-bit fields)
  MXFP4 32/17  u8 e (E8M0 shared scale); u8 qs[16] (E2M1 codes)
    (OCP Microscaling Formats v1.0: x = 2^(e - 127) * E2M1(code); E2M1 is sign | 2-bit exponent
     | 1-bit mantissa: codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6 and codes 8..15 their
     negatives; element j < 16 is the low nibble of qs[j], element j + 16 the high nibble;
     e = 255, NaN in the OCP format, is decoded by ggml as the number 2^128)

Usage:
  f = GGUFFile("model.gguf"); f.metadata["general.architecture"]; f.tensor("token_embd.weight")
  /usr/bin/python3 tools/reference/gguf_ref.py model.gguf   # prints metadata and tensor list
"""

from __future__ import annotations

import struct
import sys
from dataclasses import dataclass

import numpy as np

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# Metadata value types.
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32 = 0, 1, 2, 3, 4, 5
T_FLOAT32, T_BOOL, T_STRING, T_ARRAY, T_UINT64, T_INT64, T_FLOAT64 = 6, 7, 8, 9, 10, 11, 12

# Fixed-size scalar metadata types: struct format.
_SCALAR_FMT = {
    T_UINT8: "<B", T_INT8: "<b", T_UINT16: "<H", T_INT16: "<h", T_UINT32: "<I",
    T_INT32: "<i", T_FLOAT32: "<f", T_BOOL: "<?", T_UINT64: "<Q", T_INT64: "<q",
    T_FLOAT64: "<d",
}
# numpy dtypes for fast reading of long scalar arrays (e.g. 150k token scores).
_SCALAR_NP = {
    T_UINT8: "<u1", T_INT8: "<i1", T_UINT16: "<u2", T_INT16: "<i2", T_UINT32: "<u4",
    T_INT32: "<i4", T_FLOAT32: "<f4", T_BOOL: "<u1", T_UINT64: "<u8", T_INT64: "<i8",
    T_FLOAT64: "<f8",
}


@dataclass(frozen=True)
class GgmlType:
    name: str
    type_id: int
    block_elems: int  # elements per block
    block_bytes: int  # bytes per block


# ggml type ids as numbered in ggml.h / gguf-py constants (only the ones we dequantize).
GGML_TYPES = {
    t.type_id: t
    for t in [
        GgmlType("F32", 0, 1, 4),
        GgmlType("F16", 1, 1, 2),
        GgmlType("Q4_0", 2, 32, 18),
        GgmlType("Q4_1", 3, 32, 20),
        GgmlType("Q5_0", 6, 32, 22),
        GgmlType("Q5_1", 7, 32, 24),
        GgmlType("Q8_0", 8, 32, 34),
        GgmlType("Q4_K", 12, 256, 144),
        GgmlType("Q5_K", 13, 256, 176),
        GgmlType("Q6_K", 14, 256, 210),
        GgmlType("BF16", 30, 1, 2),
        GgmlType("MXFP4", 39, 32, 17),
    ]
}
GGML_TYPE_BY_NAME = {t.name: t for t in GGML_TYPES.values()}


class GGUFError(ValueError):
    pass


@dataclass
class TensorInfo:
    name: str
    dims: tuple  # as stored: fastest-varying first
    ggml_type: int
    offset: int  # relative to the data section

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n

    @property
    def shape(self) -> tuple:
        """numpy (row-major) shape: the reverse of the GGUF dims."""
        return tuple(reversed(self.dims))

    @property
    def type_name(self) -> str:
        t = GGML_TYPES.get(self.ggml_type)
        return t.name if t else f"type{self.ggml_type}"

    @property
    def n_bytes(self) -> int:
        t = GGML_TYPES.get(self.ggml_type)
        if t is None:
            raise GGUFError(f"tensor {self.name}: unsupported ggml type {self.ggml_type}")
        if self.dims and self.dims[0] % t.block_elems:
            raise GGUFError(f"tensor {self.name}: row of {self.dims[0]} is not a multiple of "
                            f"the {t.name} block size {t.block_elems}")
        return self.n_elements // t.block_elems * t.block_bytes


class _Cursor:
    """Bounds-checked little-endian reader over a bytes-like object."""

    def __init__(self, buf):
        self.buf = buf
        self.pos = 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise GGUFError(f"truncated file: need {n} bytes at offset {self.pos}, "
                            f"file has {len(self.buf)}")
        view = memoryview(self.buf)[self.pos:self.pos + n]
        self.pos += n
        return view

    def scalar(self, fmt: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def u32(self) -> int:
        return self.scalar("<I")

    def u64(self) -> int:
        return self.scalar("<Q")

    def string(self) -> str:
        n = self.u64()
        return bytes(self.take(n)).decode("utf-8", errors="surrogateescape")

    def value(self, vtype: int, depth: int = 0):
        if vtype in _SCALAR_FMT:
            return self.scalar(_SCALAR_FMT[vtype])
        if vtype == T_STRING:
            return self.string()
        if vtype == T_ARRAY:
            if depth > 8:
                raise GGUFError("metadata arrays nested too deeply")
            etype = self.u32()
            count = self.u64()
            if etype in _SCALAR_NP:
                dt = np.dtype(_SCALAR_NP[etype])
                arr = np.frombuffer(self.take(count * dt.itemsize), dtype=dt)
                return [bool(x) for x in arr] if etype == T_BOOL else arr.tolist()
            if etype not in (T_STRING, T_ARRAY):
                raise GGUFError(f"unknown array element type {etype}")
            return [self.value(etype, depth + 1) for _ in range(count)]
        raise GGUFError(f"unknown metadata value type {vtype}")


class GGUFFile:
    """A parsed GGUF file: .version, .metadata (key -> python value), .tensors (name -> info)."""

    def __init__(self, path: str):
        self.path = path
        self._data = np.memmap(path, dtype=np.uint8, mode="r")
        cur = _Cursor(self._data)
        if bytes(cur.take(4)) != GGUF_MAGIC:
            raise GGUFError(f"{path}: not a GGUF file (bad magic)")
        self.version = cur.u32()
        if self.version not in (2, 3):
            raise GGUFError(f"{path}: GGUF version {self.version} not supported (want 2 or 3)")
        n_tensors = cur.u64()
        n_kv = cur.u64()
        self.metadata: dict = {}
        self.metadata_types: dict = {}
        for _ in range(n_kv):
            key = cur.string()
            vtype = cur.u32()
            self.metadata[key] = cur.value(vtype)
            self.metadata_types[key] = vtype
        self.tensors: dict = {}
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = cur.u32()
            if n_dims > 4:
                raise GGUFError(f"tensor {name}: {n_dims} dims (max 4)")
            dims = tuple(cur.u64() for _ in range(n_dims))
            ggml_type = cur.u32()
            offset = cur.u64()
            if name in self.tensors:
                raise GGUFError(f"duplicate tensor {name}")
            self.tensors[name] = TensorInfo(name, dims, ggml_type, offset)
        self.alignment = int(self.metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        if self.alignment <= 0 or self.alignment & (self.alignment - 1):
            raise GGUFError(f"general.alignment {self.alignment} is not a power of two")
        self.data_offset = -(-cur.pos // self.alignment) * self.alignment
        for t in self.tensors.values():
            if t.offset % self.alignment:
                raise GGUFError(f"tensor {t.name}: offset {t.offset} not aligned")
            if t.ggml_type in GGML_TYPES and \
                    self.data_offset + t.offset + t.n_bytes > len(self._data):
                raise GGUFError(f"tensor {t.name}: data runs past the end of the file")

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes as a uint8 array (a view into the mapped file)."""
        t = self.tensors[name]
        start = self.data_offset + t.offset
        return self._data[start:start + t.n_bytes]

    def tensor(self, name: str) -> np.ndarray:
        """Dequantized float32 array of numpy shape reversed(dims)."""
        t = self.tensors[name]
        flat = dequantize(self.raw(name), t.ggml_type, t.n_elements)
        return flat.reshape(t.shape)

    def get(self, key: str, default=None):
        return self.metadata.get(key, default)


# ----------------------------------------------------------------------------------------------
# Dequantizers. Each takes the raw bytes of n_blocks whole blocks (uint8 array) and returns a
# float32 array of n_blocks * block_elems values.


def _f16(raw_u8: np.ndarray) -> np.ndarray:
    """uint8 [..., 2] (little-endian f16 bits) -> float32 [...]."""
    return np.ascontiguousarray(raw_u8).view("<f2")[..., 0].astype(np.float32)


def _blocks(raw: np.ndarray, t: GgmlType) -> np.ndarray:
    raw = np.asarray(raw, dtype=np.uint8)
    if raw.size % t.block_bytes:
        raise GGUFError(f"{t.name}: {raw.size} bytes is not a whole number of blocks")
    return raw.reshape(-1, t.block_bytes)  # [n_blocks, block_bytes]


def _low_high_nibbles(qs: np.ndarray) -> np.ndarray:
    """uint8 [nb, 16] -> uint8 [nb, 32]: element j = low nibble of qs[j], j+16 = high nibble."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _fifth_bits(qh4: np.ndarray) -> np.ndarray:
    """uint8 [nb, 4] (a little-endian u32) -> uint8 [nb, 32]: bit i of the u32 for element i."""
    qh = np.ascontiguousarray(qh4).view("<u4")[:, 0]  # [nb]
    return ((qh[:, None] >> np.arange(32, dtype=np.uint32)[None, :]) & 1).astype(np.uint8)


def dq_f32(raw):
    return np.ascontiguousarray(raw).view("<f4").astype(np.float32)


def dq_f16(raw):
    return np.ascontiguousarray(raw).view("<f2").astype(np.float32)


def dq_bf16(raw):
    bits = np.ascontiguousarray(raw).view("<u2").astype(np.uint32) << 16  # bf16 = top half
    return bits.view(np.float32).copy()


def dq_q4_0(raw):
    b = _blocks(raw, GGML_TYPE_BY_NAME["Q4_0"])                # [nb, 18]
    d = _f16(b[:, 0:2])                                         # [nb]
    q = _low_high_nibbles(b[:, 2:18]).astype(np.float32) - 8   # [nb, 32]
    return (d[:, None] * q).reshape(-1)


def dq_q4_1(raw):
    b = _blocks(raw, GGML_TYPE_BY_NAME["Q4_1"])                # [nb, 20]
    d, m = _f16(b[:, 0:2]), _f16(b[:, 2:4])                     # [nb], [nb]
    q = _low_high_nibbles(b[:, 4:20]).astype(np.float32)       # [nb, 32]
    return (d[:, None] * q + m[:, None]).reshape(-1)


def dq_q5_0(raw):
    b = _blocks(raw, GGML_TYPE_BY_NAME["Q5_0"])                # [nb, 22]
    d = _f16(b[:, 0:2])                                         # [nb]
    q = _low_high_nibbles(b[:, 6:22]) | (_fifth_bits(b[:, 2:6]) << 4)  # [nb, 32] in 0..31
    return (d[:, None] * (q.astype(np.float32) - 16)).reshape(-1)


def dq_q5_1(raw):
    b = _blocks(raw, GGML_TYPE_BY_NAME["Q5_1"])                # [nb, 24]
    d, m = _f16(b[:, 0:2]), _f16(b[:, 2:4])                     # [nb], [nb]
    q = _low_high_nibbles(b[:, 8:24]) | (_fifth_bits(b[:, 4:8]) << 4)  # [nb, 32] in 0..31
    return (d[:, None] * q.astype(np.float32) + m[:, None]).reshape(-1)


def dq_q8_0(raw):
    b = _blocks(raw, GGML_TYPE_BY_NAME["Q8_0"])                # [nb, 34]
    d = _f16(b[:, 0:2])                                         # [nb]
    q = b[:, 2:34].view(np.int8).astype(np.float32)            # [nb, 32]
    return (d[:, None] * q).reshape(-1)


def k_scales_mins(s: np.ndarray):
    """The 12 packed scale bytes of Q4_K/Q5_K -> (scales [nb, 8], mins [nb, 8]), 6 bits each.

    Sub-blocks 0..3: scale = s[j] & 63, min = s[j+4] & 63.
    Sub-blocks 4..7: low 4 bits from s[j+4] (scale: low nibble, min: high nibble), the top 2 bits
    from the top 2 bits of s[j-4] (scale) and s[j] (min).
    """
    s = s.astype(np.uint8)                                      # [nb, 12]
    sc_lo, m_lo = s[:, 0:4] & 63, s[:, 4:8] & 63                # [nb, 4] each
    sc_hi = (s[:, 8:12] & 0x0F) | ((s[:, 0:4] >> 6) << 4)       # [nb, 4]
    m_hi = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)         # [nb, 4]
    scales = np.concatenate([sc_lo, sc_hi], axis=1).astype(np.float32)  # [nb, 8]
    mins = np.concatenate([m_lo, m_hi], axis=1).astype(np.float32)      # [nb, 8]
    return scales, mins


def _k_nibbles(qs: np.ndarray) -> np.ndarray:
    """uint8 [nb, 128] -> uint8 [nb, 8, 32]: sub-block 2c = low nibbles of qs[32c:32c+32],
    sub-block 2c+1 = their high nibbles."""
    q = qs.reshape(-1, 4, 32)                                   # [nb, 4, 32]
    return np.stack([q & 0x0F, q >> 4], axis=2).reshape(-1, 8, 32)


def dq_q4_k(raw):
    b = _blocks(raw, GGML_TYPE_BY_NAME["Q4_K"])                # [nb, 144]
    d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])                  # [nb], [nb]
    sc, mn = k_scales_mins(b[:, 4:16])                          # [nb, 8], [nb, 8]
    q = _k_nibbles(b[:, 16:144]).astype(np.float32)            # [nb, 8, 32]
    y = (d[:, None] * sc)[:, :, None] * q - (dmin[:, None] * mn)[:, :, None]
    return y.reshape(-1)


def dq_q5_k(raw):
    b = _blocks(raw, GGML_TYPE_BY_NAME["Q5_K"])                # [nb, 176]
    d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])                  # [nb], [nb]
    sc, mn = k_scales_mins(b[:, 4:16])                          # [nb, 8], [nb, 8]
    qh = b[:, 16:48]                                            # [nb, 32]
    hb = (qh[:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1  # [nb, 8, 32]
    q = (_k_nibbles(b[:, 48:176]) | (hb << 4)).astype(np.float32)           # [nb, 8, 32]
    y = (d[:, None] * sc)[:, :, None] * q - (dmin[:, None] * mn)[:, :, None]
    return y.reshape(-1)


def dq_q6_k(raw):
    b = _blocks(raw, GGML_TYPE_BY_NAME["Q6_K"])                # [nb, 210]
    ql = b[:, 0:128].reshape(-1, 2, 64)                         # [nb, half, 64]
    qh = b[:, 128:192].reshape(-1, 2, 32)                       # [nb, half, 32]
    sc = b[:, 192:208].view(np.int8).astype(np.float32)        # [nb, 16]
    d = _f16(b[:, 208:210])                                     # [nb]
    # Within each half of 128 outputs, quarter k (32 values, l = 0..31) takes its low 4 bits
    # from ql[l] (k=0), ql[l+32] (k=1), ql[l]>>4 (k=2), ql[l+32]>>4 (k=3), and its top 2 bits
    # from bits 2k..2k+1 of qh[l].
    lo = np.stack([ql[..., :32] & 0x0F, ql[..., 32:] & 0x0F,
                   ql[..., :32] >> 4, ql[..., 32:] >> 4], axis=2)            # [nb, 2, 4, 32]
    hi = np.stack([(qh >> (2 * k)) & 3 for k in range(4)], axis=2)          # [nb, 2, 4, 32]
    q = (lo | (hi << 4)).astype(np.float32).reshape(-1, 256) - 32          # [nb, 256]
    scale = np.repeat(sc, 16, axis=1)                           # [nb, 256]: one per 16 values
    return (d[:, None] * scale * q).reshape(-1)


# E2M1 (FP4) code -> value: sign bit 3, exponent bits 2..1 (bias 1), mantissa bit 0; exponent 0
# is subnormal (0 or 0.5).
E2M1_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                        -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float64)


def dq_mxfp4(raw):
    b = _blocks(raw, GGML_TYPE_BY_NAME["MXFP4"])               # [nb, 17]
    scale = np.ldexp(1.0, b[:, 0].astype(np.int64) - 127)       # [nb] 2^(e-127), exact in f64
    q = _low_high_nibbles(b[:, 1:17])                           # [nb, 32] codes
    return (scale[:, None] * E2M1_VALUES[q]).astype(np.float32).reshape(-1)


DEQUANTIZERS = {
    0: dq_f32, 1: dq_f16, 30: dq_bf16, 2: dq_q4_0, 3: dq_q4_1, 6: dq_q5_0, 7: dq_q5_1,
    8: dq_q8_0, 12: dq_q4_k, 13: dq_q5_k, 14: dq_q6_k, 39: dq_mxfp4,
}


def dequantize(raw: np.ndarray, ggml_type: int, n_elements: int | None = None) -> np.ndarray:
    """Raw bytes of a tensor of the given ggml type id -> float32 [n_elements]."""
    fn = DEQUANTIZERS.get(ggml_type)
    if fn is None:
        raise GGUFError(f"dequantization of ggml type {ggml_type} is not implemented")
    out = fn(np.asarray(raw, dtype=np.uint8))
    if n_elements is not None and out.size != n_elements:
        raise GGUFError(f"expected {n_elements} values, got {out.size}")
    return out


def _describe(value) -> str:
    if isinstance(value, list):
        head = ", ".join(repr(v) for v in value[:6])
        return f"[{len(value)} items: {head}{', ...' if len(value) > 6 else ''}]"
    return repr(value)


def main(argv) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} FILE.gguf", file=sys.stderr)
        return 2
    f = GGUFFile(argv[1])
    print(f"GGUF v{f.version}, {len(f.metadata)} metadata keys, {len(f.tensors)} tensors, "
          f"alignment {f.alignment}, data at {f.data_offset}")
    for k, v in f.metadata.items():
        print(f"  {k} = {_describe(v)}")
    for t in f.tensors.values():
        print(f"  {t.name:32s} {t.type_name:5s} dims={list(t.dims)} offset={t.offset}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
