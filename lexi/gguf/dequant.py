"""PyTorch reference dequantizers for the GGUF tensor types LexiEngine supports.

Each `_dq_<type>` takes uint8 blocks `(n_blocks, type_size)` and returns float32 `(n_blocks, block_size)`.
They follow ggml-common.h / gguf-py's `quants.py` operation by operation (same products in the same order,
no fused multiply-add), so results are bit-exact with `gguf.quants.dequantize`; tests check that on random
blocks for every type. They are vectorised over blocks and write into a preallocated output; `dequantize`
walks a large tensor in chunks, so temporaries stay small and a memory-mapped tensor is read piece by piece.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from typing import TYPE_CHECKING

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

if TYPE_CHECKING:
    from lexi.gguf.reader import TensorInfo

QK_K = 256
# Elements per chunk. On the CPU, at most ATen's 32768-element grain size, so every op runs on the calling
# thread: these ops are memory-bound, and OpenMP threads that spin-wait on a busy machine made the whole
# Gemma 3 270M dequantization 3.5x slower in wall time (load average 10 on 2 cores). On a GPU, large
# chunks keep the launches few.
_CPU_CHUNK_ELEMENTS = 1 << 15
_DEVICE_CHUNK_ELEMENTS = 1 << 24

Q = GGMLQuantizationType


def _f16(b: torch.Tensor) -> torch.Tensor:
    """(n, 2) little-endian fp16 bytes -> (n, 1) float32."""
    return b.contiguous().view(torch.float16).to(torch.float32)


def _shifts(*values: int, device: torch.device) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.uint8, device=device)


def _nibbles(qs: torch.Tensor, group: int) -> torch.Tensor:
    """Bytes (n, g*group) -> (n, g, 2, group): low nibbles of each group of `group` bytes, then high nibbles."""
    n = qs.shape[0]
    q = qs.reshape(n, -1, 1, group) >> _shifts(0, 4, device=qs.device).reshape(1, 1, 2, 1)
    return q & 0x0F


def _bits32(qh: torch.Tensor) -> torch.Tensor:
    """(n, 4) bytes of a little-endian u32 -> (n, 32) uint8 bits, bit j of the word at column j."""
    n = qh.shape[0]
    bits = qh.reshape(n, 4, 1) >> torch.arange(8, dtype=torch.uint8, device=qh.device).reshape(1, 1, 8)
    return (bits & 1).reshape(n, 32)


def _dq_q4_0(b: torch.Tensor, out: torch.Tensor) -> None:
    n = b.shape[0]
    d = _f16(b[:, 0:2])
    out.copy_(_nibbles(b[:, 2:18], 16).reshape(n, 32).to(torch.int8) - 8)
    out.mul_(d)


def _dq_q4_1(b: torch.Tensor, out: torch.Tensor) -> None:
    n = b.shape[0]
    d, m = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    out.copy_(_nibbles(b[:, 4:20], 16).reshape(n, 32))
    out.mul_(d).add_(m)


def _dq_q5_0(b: torch.Tensor, out: torch.Tensor) -> None:
    n = b.shape[0]
    d = _f16(b[:, 0:2])
    ql = _nibbles(b[:, 6:22], 16).reshape(n, 32)
    out.copy_((ql | (_bits32(b[:, 2:6]) << 4)).to(torch.int8) - 16)
    out.mul_(d)


def _dq_q5_1(b: torch.Tensor, out: torch.Tensor) -> None:
    n = b.shape[0]
    d, m = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    ql = _nibbles(b[:, 8:24], 16).reshape(n, 32)
    out.copy_(ql | (_bits32(b[:, 4:8]) << 4))
    out.mul_(d).add_(m)


def _dq_q8_0(b: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(b[:, 2:34].contiguous().view(torch.int8))
    out.mul_(_f16(b[:, 0:2]))


def _dq_q2_k(b: torch.Tensor, out: torch.Tensor) -> None:
    n = b.shape[0]
    scales, qs = b[:, 0:16], b[:, 16:80]
    d, dmin = _f16(b[:, 80:82]), _f16(b[:, 82:84])
    dl = (d * (scales & 0x0F).to(torch.float32)).reshape(n, 16, 1)
    ml = (dmin * (scales >> 4).to(torch.float32)).reshape(n, 16, 1)
    # Two halves of 32 bytes; within a half, 2-bit field s of byte l is element 32*s + l.
    q = (qs.reshape(n, 2, 1, 32) >> _shifts(0, 2, 4, 6, device=b.device).reshape(1, 1, 4, 1)) & 3
    o = out.view(n, 16, 16)
    o.copy_(q.reshape(n, 16, 16))
    o.mul_(dl).sub_(ml)


def _dq_q3_k(b: torch.Tensor, out: torch.Tensor) -> None:
    n = b.shape[0]
    hmask, qs, sc = b[:, 0:32], b[:, 32:96], b[:, 96:108]
    d = _f16(b[:, 108:110])
    # 16 6-bit signed scales: low nibbles from bytes 0-7 (low then high nibble), top 2 bits from bytes 8-11.
    low = (sc[:, 0:8].reshape(n, 1, 8) >> _shifts(0, 4, device=b.device).reshape(1, 2, 1)).reshape(n, 16)
    high = (sc[:, 8:12].reshape(n, 1, 4) >> _shifts(0, 2, 4, 6, device=b.device).reshape(1, 4, 1)).reshape(n, 16)
    scales = ((low & 0x0F) | ((high & 0x03) << 4)).to(torch.int8) - 32
    dl = (d * scales.to(torch.float32)).reshape(n, 16, 1)
    ql = (qs.reshape(n, 2, 1, 32) >> _shifts(0, 2, 4, 6, device=b.device).reshape(1, 1, 4, 1)) & 3
    hbit = (hmask.reshape(n, 1, 1, 32) >> torch.arange(8, dtype=torch.uint8, device=b.device).reshape(1, 1, 8, 1)) & 1
    # A cleared hmask bit subtracts 4 (ggml stores the high bit inverted).
    o = out.view(n, 16, 16)
    o.copy_(ql.reshape(n, 16, 16).to(torch.int8) - ((hbit.reshape(n, 16, 16) ^ 1) << 2).to(torch.int8))
    o.mul_(dl)


def _scale_min_k4(sc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """12 packed bytes -> 8 six-bit scales and 8 six-bit mins (ggml's get_scale_min_k4, all eight at once).

    Sub-blocks 0-3 take the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); sub-blocks 4-7 take a nibble
    of bytes 8-11 plus the top 2 bits of bytes 0-3 (scales) or 4-7 (mins).
    """
    d, m, md = sc[:, 0:4], sc[:, 4:8], sc[:, 8:12]
    scale = torch.cat([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], dim=1)
    mins = torch.cat([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], dim=1)
    return scale, mins


def _dq_q4_k(b: torch.Tensor, out: torch.Tensor) -> None:
    n = b.shape[0]
    d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    scale, mins = _scale_min_k4(b[:, 4:16])
    dl = (d * scale.to(torch.float32)).reshape(n, 8, 1)
    ml = (dmin * mins.to(torch.float32)).reshape(n, 8, 1)
    o = out.view(n, 8, 32)
    o.copy_(_nibbles(b[:, 16:144], 32).reshape(n, 8, 32))
    o.mul_(dl).sub_(ml)


def _dq_q5_k(b: torch.Tensor, out: torch.Tensor) -> None:
    n = b.shape[0]
    d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    scale, mins = _scale_min_k4(b[:, 4:16])
    dl = (d * scale.to(torch.float32)).reshape(n, 8, 1)
    ml = (dmin * mins.to(torch.float32)).reshape(n, 8, 1)
    ql = _nibbles(b[:, 48:176], 32).reshape(n, 8, 32)
    qh = (b[:, 16:48].reshape(n, 1, 32) >> torch.arange(8, dtype=torch.uint8, device=b.device).reshape(1, 8, 1)) & 1
    o = out.view(n, 8, 32)
    o.copy_(ql | (qh << 4))
    o.mul_(dl).sub_(ml)


def _dq_q6_k(b: torch.Tensor, out: torch.Tensor) -> None:
    n = b.shape[0]
    ql, qh = b[:, 0:128], b[:, 128:192]
    scales = b[:, 192:208].contiguous().view(torch.int8).to(torch.float32)
    d = _f16(b[:, 208:210])
    dl = (d * scales).reshape(n, 16, 1)
    lo = _nibbles(ql, 64).reshape(n, 8, 32)
    hi = ((qh.reshape(n, 2, 1, 32) >> _shifts(0, 2, 4, 6, device=b.device).reshape(1, 1, 4, 1)) & 3).reshape(n, 8, 32)
    o = out.view(n, 16, 16)
    o.copy_(((lo | (hi << 4)).to(torch.int8) - 32).reshape(n, 16, 16))
    o.mul_(dl)


# The 16 values a 4-bit index selects: IQ4_NL's non-linear grid (IQ4_XS shares it), and MXFP4's E2M1 values
# doubled (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives, times 2, so they are integers; the E8M0 scale is
# halved to match: ggml's kvalues_mxfp4 and ggml_e8m0_to_fp32_half).
KVALUES_IQ4NL = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)
KVALUES_MXFP4 = (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)


def _lookup_nibbles(values: tuple[int, ...], qs: torch.Tensor, group: int) -> torch.Tensor:
    """Bytes (n, g*group) -> float32 (n, g, 2, group): values[low nibble] of each group of `group` bytes, then
    values[high nibble] (the order of `_nibbles`). One lookup per byte in a 256-entry table of value pairs, not
    one per nibble after shifting them out: IQ4_NL went from 22 to 126 M elements/s (2 cores, load 2)."""
    n = qs.shape[0]
    table = torch.tensor(values, dtype=torch.float32, device=qs.device)
    byte = torch.arange(256, device=qs.device)
    pairs = torch.stack([table[byte & 15], table[byte >> 4]], dim=1)  # (256, 2): low nibble's value, high's
    v = pairs.index_select(0, qs.reshape(-1).to(torch.int32)).view(n, -1, group, 2)
    return v.transpose(-1, -2)


def _e8m0_half(e: torch.Tensor) -> torch.Tensor:
    """(n, 1) E8M0 exponent bytes -> float32 2^(e - 128), built from its bits as ggml does: e < 2 are the
    subnormals 2^-128 and 2^-127, which no float32 exponent field holds."""
    e = e.to(torch.int32)
    bits = torch.where(e < 2, torch.full_like(e, 0x00200000) << e, (e - 1) << 23)
    return bits.view(torch.float32)


def _dq_iq4_nl(b: torch.Tensor, out: torch.Tensor) -> None:
    n = b.shape[0]
    out.view(n, 1, 2, 16).copy_(_lookup_nibbles(KVALUES_IQ4NL, b[:, 2:18], 16))
    out.mul_(_f16(b[:, 0:2]))


def _dq_iq4_xs(b: torch.Tensor, out: torch.Tensor) -> None:
    n = b.shape[0]
    d = _f16(b[:, 0:2])
    # Sub-block ib's 6-bit scale: a nibble of scales_l (byte 4 + ib / 2) and 2 bits of the u16 scales_h (bytes 2-3).
    scales_h = b[:, 2].to(torch.int32) | (b[:, 3].to(torch.int32) << 8)
    high = (scales_h.reshape(n, 1) >> torch.arange(0, 16, 2, dtype=torch.int32, device=b.device)) & 3
    low = _nibbles(b[:, 4:8], 1).reshape(n, 8).to(torch.int32)
    dl = (d * ((low | (high << 4)) - 32).to(torch.float32)).reshape(n, 8, 1)
    out.view(n, 8, 2, 16).copy_(_lookup_nibbles(KVALUES_IQ4NL, b[:, 8:136], 16))
    out.view(n, 8, 32).mul_(dl)


def _dq_mxfp4(b: torch.Tensor, out: torch.Tensor) -> None:
    n = b.shape[0]
    out.view(n, 1, 2, 16).copy_(_lookup_nibbles(KVALUES_MXFP4, b[:, 1:17], 16))
    out.mul_(_e8m0_half(b[:, 0:1]))


def _dq_bf16(b: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(b.contiguous().view(torch.bfloat16).reshape(out.shape))


_BLOCK_DEQUANT: dict[GGMLQuantizationType, Callable[[torch.Tensor, torch.Tensor], None]] = {
    Q.BF16: _dq_bf16,
    Q.Q4_0: _dq_q4_0,
    Q.Q4_1: _dq_q4_1,
    Q.Q5_0: _dq_q5_0,
    Q.Q5_1: _dq_q5_1,
    Q.Q8_0: _dq_q8_0,
    Q.Q2_K: _dq_q2_k,
    Q.Q3_K: _dq_q3_k,
    Q.Q4_K: _dq_q4_k,
    Q.Q5_K: _dq_q5_k,
    Q.Q6_K: _dq_q6_k,
    Q.IQ4_NL: _dq_iq4_nl,
    Q.IQ4_XS: _dq_iq4_xs,
    Q.MXFP4: _dq_mxfp4,
}

DEQUANT_TYPES: frozenset[GGMLQuantizationType] = frozenset({Q.F32, Q.F16, *_BLOCK_DEQUANT})


def dequantize_blocks(blocks: torch.Tensor, qtype: GGMLQuantizationType) -> torch.Tensor:
    """uint8 blocks (n_blocks, type_size) -> float32 (n_blocks, block_size); one vectorised pass, no chunking."""
    out = torch.empty(blocks.shape[0], GGML_QUANT_SIZES[qtype][0], dtype=torch.float32, device=blocks.device)
    _BLOCK_DEQUANT[qtype](blocks, out)
    return out


def _as_bytes(data: torch.Tensor | np.ndarray) -> torch.Tensor:
    if isinstance(data, np.ndarray):
        # np.array copies: memory-mapped GGUF data is read-only and torch refuses to alias it writably.
        data = torch.from_numpy(np.array(data, copy=True).view(np.uint8))
    if data.dtype != torch.uint8:
        data = data.contiguous().view(torch.uint8)
    return data.reshape(-1)


def dequantize(data: torch.Tensor | np.ndarray, qtype: GGMLQuantizationType, shape: tuple[int, ...]) -> torch.Tensor:
    """GGUF tensor data -> float32 tensor of `shape` (PyTorch order), on the device of `data`.

    `data` is uint8 blocks `(rows, bytes_per_row)` for quantized types and BF16, or the F32/F16 values
    themselves (any shape with `prod(shape)` elements). Rows of a quantized tensor hold whole blocks.
    """
    qtype = GGMLQuantizationType(qtype)
    numel = prod(shape)
    if qtype in (Q.F32, Q.F16):
        t = torch.from_numpy(np.array(data, copy=True)) if isinstance(data, np.ndarray) else data
        if t.dtype == torch.uint8:
            t = t.contiguous().view(torch.float32 if qtype == Q.F32 else torch.float16)
        if t.numel() != numel:
            raise ValueError(f"{qtype.name} data has {t.numel()} elements, shape {shape} needs {numel}")
        return t.reshape(shape).to(torch.float32, copy=True)
    if qtype not in _BLOCK_DEQUANT:
        raise ValueError(f"no dequantizer for tensor type {qtype.name}")
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    if numel % block_size:
        raise ValueError(f"{qtype.name}: {numel} elements is not a whole number of {block_size}-element blocks")
    n_blocks = numel // block_size
    flat = data.reshape(-1).view(np.uint8) if isinstance(data, np.ndarray) else _as_bytes(data)
    if flat.nbytes != n_blocks * type_size:
        raise ValueError(f"{qtype.name} data has {flat.nbytes} bytes, shape {shape} needs {n_blocks * type_size}")
    device = flat.device if isinstance(flat, torch.Tensor) else torch.device("cpu")
    out = torch.empty(n_blocks, block_size, dtype=torch.float32, device=device)
    fn = _BLOCK_DEQUANT[qtype]
    chunk_elements = _CPU_CHUNK_ELEMENTS if device.type == "cpu" else _DEVICE_CHUNK_ELEMENTS
    step = max(1, chunk_elements // block_size)
    for start in range(0, n_blocks, step):
        stop = min(start + step, n_blocks)
        chunk = flat[start * type_size : stop * type_size]
        # A memory-mapped chunk is copied (read from disk) here, one chunk at a time.
        blocks = _as_bytes(chunk) if isinstance(chunk, np.ndarray) else chunk
        fn(blocks.reshape(stop - start, type_size), out[start:stop])
    return out.reshape(shape)


def dequantize_tensor(info: TensorInfo) -> torch.Tensor:
    """Dequantize a `TensorInfo` (memory-mapped numpy data, PyTorch-order shape) to a float32 CPU tensor."""
    return dequantize(info.data, info.qtype, tuple(info.shape))
