"""In-register dequantization of a (BLOCK_N, BLOCK_K) weight tile, shared by the GEMV and GEMM kernels.

The weight is the GGUF tensor as it sits in the file: row n (an output feature) is K / BS blocks of TS
bytes, back to back, `row_bytes = K / BS * TS` (ggml-common.h layouts; little-endian; d, m, dmin fp16):

    type  BS/TS    bytes of one block (offsets)                         element j of the block
    Q4_0  32/18    d@0 qs[16]@2                                         d * (nib(qs[j%16], j/16) - 8)
    Q4_1  32/20    d@0 m@2 qs[16]@4                                     d * nib(...) + m
    Q5_0  32/22    d@0 qh[4]@2 qs[16]@6                                 d * (nib | bit(qh, j) << 4) - 16)
    Q5_1  32/24    d@0 m@2 qh[4]@4 qs[16]@8                             d * (nib | bit(qh, j) << 4) + m
    Q8_0  32/34    d@0 int8 qs[32]@2                                    qs[j] * d
    Q2_K  256/84   scales[16]@0 qs[64]@16 d@80 dmin@82                  d*(sc&15) * q2 - dmin*(sc>>4), sc = scales[j/16]
    Q3_K  256/110  hmask[32]@0 qs[64]@32 scales[12]@96 d@108            d*(s6-32) * (q2 - 4*!hbit)
    Q4_K  256/144  d@0 dmin@2 scales[12]@4 qs[128]@16                   d*sc(j/32) * q4 - dmin*mn(j/32)
    Q5_K  256/176  d@0 dmin@2 scales[12]@4 qh[32]@16 qs[128]@48         d*sc * (q4 | hbit << 4) - dmin*mn
    Q6_K  256/210  ql[128]@0 qh[64]@128 int8 scales[16]@192 d@208      d*scales[j/16] * ((q4 | q2 << 4) - 32)
    IQ4_NL 32/18   d@0 qs[16]@2                                         d * kv_nl[nib(qs[j%16], j/16)]
    IQ4_XS 256/136 d@0 scales_h(u16)@2 scales_l[4]@4 qs[128]@8         d*(s6(j/32)-32) * kv_nl[q4], q4 as Q4_0's
                                                                        in sub-block j/32's 16 bytes
    MXFP4 32/17    e(E8M0)@0 qs[16]@1                                   2^(e-128) * kv_e2m1x2[nib(qs[j%16], j/16)]

kv_nl is IQ4_NL's 16-value int8 grid and kv_e2m1x2 the E2M1 values doubled (ggml's kvalues_iq4nl and
kvalues_mxfp4). Both are computed without a table in memory (there is no constant memory to put one in
from Triton): kv_nl from four int32 words that pack its magnitudes, kv_e2m1x2 from its bits.

F32 / F16 / BF16 weights are plain (N, K) matrices of that dtype. Every element of the tile computes its
own byte addresses (block kb = k / BS, position j = k % BS), so any BLOCK_K works and ragged K/N edges
are masked; the scale bytes of a block are re-read by the elements that share them and hit L1. Quant and
scale bytes are loaded one by one, because 18-, 22- or 210-byte blocks leave wider fields unaligned; the
fp16 fields are always at even offsets and are loaded as 2-byte words (QuantWeight keeps data 2-aligned).
"""

from __future__ import annotations

import triton
import triton.language as tl
from gguf import GGMLQuantizationType as Q

# Type ids as constexprs, so each kernel specialisation keeps only its own branch.
F32: tl.constexpr = tl.constexpr(int(Q.F32))
F16: tl.constexpr = tl.constexpr(int(Q.F16))
BF16: tl.constexpr = tl.constexpr(int(Q.BF16))
Q4_0: tl.constexpr = tl.constexpr(int(Q.Q4_0))
Q4_1: tl.constexpr = tl.constexpr(int(Q.Q4_1))
Q5_0: tl.constexpr = tl.constexpr(int(Q.Q5_0))
Q5_1: tl.constexpr = tl.constexpr(int(Q.Q5_1))
Q8_0: tl.constexpr = tl.constexpr(int(Q.Q8_0))
Q2_K: tl.constexpr = tl.constexpr(int(Q.Q2_K))
Q3_K: tl.constexpr = tl.constexpr(int(Q.Q3_K))
Q4_K: tl.constexpr = tl.constexpr(int(Q.Q4_K))
Q5_K: tl.constexpr = tl.constexpr(int(Q.Q5_K))
Q6_K: tl.constexpr = tl.constexpr(int(Q.Q6_K))
IQ4_NL: tl.constexpr = tl.constexpr(int(Q.IQ4_NL))
IQ4_XS: tl.constexpr = tl.constexpr(int(Q.IQ4_XS))
MXFP4: tl.constexpr = tl.constexpr(int(Q.MXFP4))


def _pack4(values: tuple[int, ...]) -> tl.constexpr:
    """Four magnitudes below 128, little-endian in one int32 word (so the word itself is a positive int32)."""
    return tl.constexpr(sum(abs(v) << (8 * i) for i, v in enumerate(values)))


# IQ4_NL's grid (lexi.gguf.dequant.KVALUES_IQ4NL): codes 0-7 negative, 8-15 positive, four to a word.
_NL_W0 = _pack4((-127, -104, -83, -65))
_NL_W1 = _pack4((-49, -35, -22, -10))
_NL_W2 = _pack4((1, 13, 25, 38))
_NL_W3 = _pack4((53, 69, 89, 113))


@triton.jit
def _u8(ptr, mask):
    """One byte per element, widened to int32 so shifts and ors never overflow."""
    return tl.load(ptr, mask=mask, other=0).to(tl.int32)


@triton.jit
def _i8(ptr, mask):
    return tl.load(ptr, mask=mask, other=0).to(tl.int8, bitcast=True).to(tl.int32)


@triton.jit
def _f16(ptr, mask):
    """A little-endian fp16 field, as fp32: one 2-byte load. Every fp16 field of every block type sits at an
    even offset and every block size is even, so with an even base address the load is aligned."""
    bits = tl.load(ptr.to(tl.pointer_type(tl.uint16)), mask=mask, other=0)
    return bits.to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _scale_min_k4(sc_ptr, sb, mask):
    """ggml's get_scale_min_k4 for sub-block sb (0-7) of a Q4_K/Q5_K block: 6-bit scale and min."""
    lo = sb < 4
    sb4 = sb & 3
    a = _u8(sc_ptr + sb4, mask)  # byte sb (sb < 4) or sb - 4
    b = _u8(sc_ptr + sb4 + 4, mask)  # byte sb + 4 (sb < 4) or sb
    c = _u8(sc_ptr + sb4 + 8, mask)  # byte sb + 4 for sb >= 4
    scale = tl.where(lo, a & 63, (c & 15) | ((a >> 6) << 4))
    mn = tl.where(lo, b & 63, (c >> 4) | ((b >> 6) << 4))
    return scale.to(tl.float32), mn.to(tl.float32)


@triton.jit
def _iq4nl_value(q):
    """IQ4_NL's grid value of each 4-bit code q (int32): byte q % 4 of the word q / 4, negated for q < 8."""
    word = tl.where(q < 8, tl.where(q < 4, _NL_W0, _NL_W1), tl.where(q < 12, _NL_W2, _NL_W3))
    mag = (word >> ((q & 3) * 8)) & 0xFF
    return tl.where(q < 8, -mag, mag)


@triton.jit
def _e2m1_doubled(q):
    """Twice the E2M1 value of each 4-bit code q: magnitudes 0, 1, 2, 3, then (2 | m) << (e - 1) for the
    exponent e = (q & 7) >> 1 >= 2 and mantissa bit m, so 4, 6, 8, 12; bit 3 is the sign."""
    mag = q & 7
    big = (2 + (mag & 1)) << tl.maximum((mag >> 1) - 1, 0)
    v = tl.where(mag < 4, mag, big)
    return tl.where(q >= 8, -v, v)


@triton.jit
def _e8m0_half(e):
    """fp32 2^(e - 128) of an E8M0 byte e (int32), built from its bits as ggml_e8m0_to_fp32_half does: bytes 0
    and 1 are the subnormals 2^-128 and 2^-127 (mantissa bit 21 + e), the rest have the exponent field e - 1."""
    bits = tl.where(e < 2, (e * 0 + 0x00200000) << e, (e - 1) << 23)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def dequant_tile(w_ptr, stride_wn, offs_n, offs_k, N, K, QTYPE: tl.constexpr):
    """fp32 tile W[offs_n, offs_k] of shape (len(offs_n), len(offs_k)); zero outside (N, K)."""
    n = offs_n[:, None]
    k = offs_k[None, :]
    mask = (n < N) & (k < K)
    # 64-bit row offsets: a 262144 x 2560 F16 embedding is past 2^31 bytes.
    row = w_ptr + n.to(tl.int64) * stride_wn
    # GGML ids: F32 0, F16 1, Q4_0..Q8_0 2-8, Q2_K..Q6_K 10-14, IQ4_NL 20, IQ4_XS 23, BF16 30, MXFP4 39. Range
    # tests, because Triton's code generator refuses chained `or` (the interpreter would accept it). Each family's
    # helper is inlined (Triton inlines every @triton.jit call), so this is one kernel as before.
    if QTYPE == BF16 or QTYPE < Q4_0:
        w = tl.load(row + k, mask=mask, other=0.0).to(tl.float32)
    elif QTYPE < Q2_K:
        w = _dequant_32(row, k, mask, QTYPE)
    elif QTYPE <= Q6_K:
        w = _dequant_k(row, k, mask, QTYPE)
    elif QTYPE == IQ4_NL or QTYPE == IQ4_XS:
        w = _dequant_iq4(row, k, mask, QTYPE)
    else:
        tl.static_assert(QTYPE == MXFP4, "unsupported GGML type id")
        j = k % 32
        blk = row + (k // 32) * 17  # 17-byte blocks: every field is a byte, so no alignment is assumed
        q = (_u8(blk + 1 + (j % 16), mask) >> ((j // 16) * 4)) & 15
        w = _e2m1_doubled(q).to(tl.float32) * _e8m0_half(_u8(blk, mask))
    return tl.where(mask, w, 0.0)


@triton.jit
def _dequant_32(row, k, mask, QTYPE: tl.constexpr):
    """The 32-value block types, Q4_0 to Q8_0: fp32 values at columns k of the rows at `row`."""
    j = k % 32
    if QTYPE == Q4_0:
        blk = row + (k // 32) * 18
        q = (_u8(blk + 2 + (j % 16), mask) >> ((j // 16) * 4)) & 15
        w = _f16(blk, mask) * (q - 8).to(tl.float32)
    elif QTYPE == Q4_1:
        blk = row + (k // 32) * 20
        q = (_u8(blk + 4 + (j % 16), mask) >> ((j // 16) * 4)) & 15
        w = _f16(blk, mask) * q.to(tl.float32) + _f16(blk + 2, mask)
    elif QTYPE == Q5_0:
        blk = row + (k // 32) * 22
        q = (_u8(blk + 6 + (j % 16), mask) >> ((j // 16) * 4)) & 15
        q = q | (((_u8(blk + 2 + j // 8, mask) >> (j % 8)) & 1) << 4)
        w = _f16(blk, mask) * (q - 16).to(tl.float32)
    elif QTYPE == Q5_1:
        blk = row + (k // 32) * 24
        q = (_u8(blk + 8 + (j % 16), mask) >> ((j // 16) * 4)) & 15
        q = q | (((_u8(blk + 4 + j // 8, mask) >> (j % 8)) & 1) << 4)
        w = _f16(blk, mask) * q.to(tl.float32) + _f16(blk + 2, mask)
    else:
        blk = row + (k // 32) * 34
        w = _i8(blk + 2 + j, mask).to(tl.float32) * _f16(blk, mask)
    return w


@triton.jit
def _dequant_k(row, k, mask, QTYPE: tl.constexpr):
    """The K-quants, Q2_K to Q6_K (256-value super-blocks): fp32 values at columns k of the rows at `row`."""
    j = k % 256
    if QTYPE == Q2_K:
        blk = row + (k // 256) * 84
        # 2-bit field s = (j / 32) % 4 of byte 16 + 32 * (j / 128) + j % 32.
        q = (_u8(blk + 16 + (j // 128) * 32 + (j % 32), mask) >> (((j // 32) % 4) * 2)) & 3
        sc = _u8(blk + j // 16, mask)
        dl = _f16(blk + 80, mask) * (sc & 15).to(tl.float32)
        ml = _f16(blk + 82, mask) * (sc >> 4).to(tl.float32)
        w = dl * q.to(tl.float32) - ml
    elif QTYPE == Q3_K:
        blk = row + (k // 256) * 110
        q = (_u8(blk + 32 + (j // 128) * 32 + (j % 32), mask) >> (((j // 32) % 4) * 2)) & 3
        hbit = (_u8(blk + (j % 32), mask) >> (j // 32)) & 1
        q = q - ((hbit ^ 1) << 2)
        i = j // 16  # 6-bit scale i: nibble i / 8 of byte 96 + i % 8, 2 bits (i / 4) of byte 104 + i % 4
        low = (_u8(blk + 96 + (i % 8), mask) >> ((i // 8) * 4)) & 15
        high = (_u8(blk + 104 + (i % 4), mask) >> ((i // 4) * 2)) & 3
        s6 = (low | (high << 4)) - 32
        w = (_f16(blk + 108, mask) * s6.to(tl.float32)) * q.to(tl.float32)
    elif QTYPE == Q4_K:
        blk = row + (k // 256) * 144
        sb = j // 32  # sub-block: low nibbles (even sb) or high nibbles (odd) of 32-byte group sb / 2
        q = (_u8(blk + 16 + (sb // 2) * 32 + (j % 32), mask) >> ((sb % 2) * 4)) & 15
        scale, mn = _scale_min_k4(blk + 4, sb, mask)
        w = (_f16(blk, mask) * scale) * q.to(tl.float32) - _f16(blk + 2, mask) * mn
    elif QTYPE == Q5_K:
        blk = row + (k // 256) * 176
        sb = j // 32
        q = (_u8(blk + 48 + (sb // 2) * 32 + (j % 32), mask) >> ((sb % 2) * 4)) & 15
        q = q | (((_u8(blk + 16 + (j % 32), mask) >> sb) & 1) << 4)
        scale, mn = _scale_min_k4(blk + 4, sb, mask)
        w = (_f16(blk, mask) * scale) * q.to(tl.float32) - _f16(blk + 2, mask) * mn
    else:
        tl.static_assert(QTYPE == Q6_K, "unsupported GGML type id")
        blk = row + (k // 256) * 210
        h = j // 128
        r = j % 128  # low 4 bits: nibble r / 64 of byte 64h + r % 64; high 2: bits 2(r / 32) of 128 + 32h + r % 32
        lo = (_u8(blk + h * 64 + (r % 64), mask) >> ((r // 64) * 4)) & 15
        hi = (_u8(blk + 128 + h * 32 + (r % 32), mask) >> ((r // 32) * 2)) & 3
        q = (lo | (hi << 4)) - 32
        dl = _f16(blk + 208, mask) * _i8(blk + 192 + j // 16, mask).to(tl.float32)
        w = dl * q.to(tl.float32)
    return w


@triton.jit
def _dequant_iq4(row, k, mask, QTYPE: tl.constexpr):
    """IQ4_NL (32-value blocks) and IQ4_XS (256): fp32 values at columns k of the rows at `row`."""
    if QTYPE == IQ4_NL:
        j = k % 32
        blk = row + (k // 32) * 18
        q = (_u8(blk + 2 + (j % 16), mask) >> ((j // 16) * 4)) & 15
        w = _iq4nl_value(q).to(tl.float32) * _f16(blk, mask)
    else:
        j = k % 256
        blk = row + (k // 256) * 136
        ib = j // 32  # 6-bit scale: nibble ib % 2 of scales_l[ib / 2], bits 2 (ib % 4) of byte ib / 4 of scales_h
        sl = (_u8(blk + 4 + ib // 2, mask) >> ((ib % 2) * 4)) & 15
        sh = (_u8(blk + 2 + ib // 4, mask) >> ((ib % 4) * 2)) & 3
        dl = _f16(blk, mask) * ((sl | (sh << 4)) - 32).to(tl.float32)
        q = (_u8(blk + 8 + ib * 16 + (j % 16), mask) >> (((j % 32) // 16) * 4)) & 15
        w = dl * _iq4nl_value(q).to(tl.float32)
    return w
