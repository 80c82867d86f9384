"""The CPU path's quantized matmul: y = x W^T computed by LexiEngine's C kernels (lexi/kernels/cpu) over GGUF blocks.

Why C: on a CPU, torch's weight-only kernels read 4-bit weights at a third of the memory bandwidth llama.cpp
reaches (measured on this project's AVX2 machines: 7 GB/s against 18 GB/s), and a dense copy costs 2-4 bytes a
weight. The kernels here quantize x to int8 per 32 or 256 values (llama.cpp's Q8_0 / Q8_K activations; by default twice,
the second time what the first leaves, see `CpuKernels`) and sum the integer products exactly, so a row's result
does not depend on the batch it shares; `lexi/kernels/cpu/lexi_cpu.h`
states the arithmetic and `qmatmul_ref` (dequantize, then a float32 matmul) is their yardstick.

A weight keeps the file's bytes, memory-mapped (`CpuWeight.layout == "file"`), or, where this CPU has kernels for
it, the same bytes rearranged eight rows at a time (`"x8"`: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K under AVX2 and
AVX-512 VNNI, one layout for both; +3% for Q4_K), built once at load; the mapped pages of a repacked tensor are then
given back, so the model stays the file's size in memory.

The kernels come in ISA variants compiled into every build (`available_isas()`): "scalar" (portable C), "avx2" and
"avx512vnni" (AVX-512 F/BW/VL/VNNI: vpdpbusd in the interleaved kernels). `CpuKernels(isa="auto")` takes the widest
the CPU runs; naming one forces it (tests compare each with "scalar" bit for bit).
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from lexi.kernels import _cpu

Q = GGMLQuantizationType
# Every quantized type the C kernels read (unpack_impl.h); F32/F16/BF16 weights stay dense torch tensors.
CPU_KERNEL_TYPES: frozenset[GGMLQuantizationType] = frozenset(
    {Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.IQ4_NL, Q.IQ4_XS, Q.MXFP4}
)
MAX_FUSED = 4  # weights one call may multiply by the same x (the C driver's limit)


def available_isas() -> tuple[str, ...]:
    """The kernel variants this CPU runs, portable first: "scalar", then "avx2", then "avx512vnni"."""
    return tuple(_cpu.isas())


ACTIVATIONS = ("int16", "int8")


class CpuKernels:
    """The kernels and their thread pool, owned by one model (no global pool): `threads` includes the caller.

    `activations`: "int16" (default) carries each row of x as two int8 terms, the value and what it leaves, which is
    finer than bfloat16 (measured: Gemma 3's teacher-forced logits within 0.017 of float32 on average, against 0.21
    for one term) and costs up to twice the integer work while the weights are still read once; "int8" is
    llama.cpp's arithmetic (one term, Q8_0/Q8_K), the faster prefill.
    """

    def __init__(self, threads: int, isa: str = "auto", activations: str = "int16") -> None:
        if not 1 <= threads <= 1024:
            raise ValueError(f"threads must be in [1, 1024], got {threads}")
        if activations not in ACTIVATIONS:
            raise ValueError(f"activations must be one of {', '.join(ACTIVATIONS)}, got {activations!r}")
        self.impl = _cpu.Kernels(threads, isa)
        self.activations = activations
        self.terms = 2 if activations == "int16" else 1

    @property
    def isa(self) -> str:
        return self.impl.isa

    @property
    def threads(self) -> int:
        return self.impl.threads

    @property
    def decode_rows(self) -> int:
        """Rows of x a step may give these kernels and stay on their cheap path: GEMV_MAX_M (cpu/lexi_cpu.h), the
        rows the decode kernels take with each weight row read once for all. A bound on work more than an exact
        switch: the driver counts a row's two int16 terms as two rows (the file layouts leave the decode kernels
        past GEMV_MAX_M / 2 rows of x with the default activations), and the interleaved (x8) layouts have no
        switch, their work growing with every row."""
        return _cpu.GEMV_MAX_M


@dataclass(frozen=True, slots=True)
class CpuWeight:
    """One (N, K) quantized weight as the C kernels read it. `data` owns (or maps) the bytes: the file's rows
    (N, row_bytes) for layout "file", the interleaved groups (flat uint8 tensor) for layout "x8"."""

    qtype: GGMLQuantizationType
    shape: tuple[int, int]
    layout: str
    data: np.ndarray | torch.Tensor
    stride: int  # bytes between rows ("file") or between 8-row groups ("x8")

    def __post_init__(self) -> None:
        if self.qtype not in CPU_KERNEL_TYPES:
            raise ValueError(f"qtype: {self.qtype.name} has no CPU kernel; supported: "
                             f"{sorted(t.name for t in CPU_KERNEL_TYPES)}")  # fmt: skip
        if self.layout not in ("file", "x8"):
            raise ValueError(f"layout must be 'file' or 'x8', got {self.layout!r}")
        n, k = self.shape
        block = GGML_QUANT_SIZES[self.qtype][0]
        if n < 1 or k < 1 or k % block:
            raise ValueError(f"shape: {self.shape} is not (N, K) with K a multiple of {self.qtype.name}'s {block}")

    @property
    def address(self) -> int:
        return self.data.ctypes.data if isinstance(self.data, np.ndarray) else self.data.data_ptr()

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes) if isinstance(self.data, np.ndarray) else self.data.numel()

    def descriptor(self, col: int) -> tuple[int, int, int, int, int, int]:
        return (int(self.qtype), self.address, self.stride, self.shape[0], col, 1 if self.layout == "x8" else 0)

    @classmethod
    def from_rows(cls, rows: np.ndarray, qtype: GGMLQuantizationType, shape: tuple[int, int]) -> CpuWeight:
        """The file's rows as they are, (N, row_bytes) uint8 (a memory-mapped view is kept, not copied)."""
        if Q(qtype) not in CPU_KERNEL_TYPES:
            raise ValueError(f"qtype: {Q(qtype).name} has no CPU kernel")
        n, k = shape
        block, size = GGML_QUANT_SIZES[qtype]
        rows = rows.reshape(n, -1).view(np.uint8)
        if rows.shape[1] != k // block * size or not rows.flags.c_contiguous:
            raise ValueError(f"rows: need contiguous uint8 ({n}, {k // block * size}), got {rows.shape}")
        return cls(Q(qtype), (n, k), "file", rows, int(rows.shape[1]))

    @classmethod
    def repacked(cls, kernels: CpuKernels, rows: np.ndarray, qtype: GGMLQuantizationType, shape: tuple[int, int],
                 release: bool = True) -> CpuWeight:  # fmt: skip
        """The interleaved layout when this CPU has kernels for it, else the file's rows. `release`: give back the
        resident pages of `rows` once copied (they are not read again; see `release_pages`)."""
        file = cls.from_rows(rows, qtype, shape)
        n, k = shape
        size = kernels.impl.x8_bytes(int(qtype), n, k)
        if not size:
            return file
        out = torch.empty(size, dtype=torch.uint8)
        kernels.impl.repack(int(qtype), file.address, n, file.stride, k, out.data_ptr())
        if release:
            release_pages(rows)
        return cls(file.qtype, shape, "x8", out, size // ((n + 7) // 8))


def release_pages(view: np.ndarray) -> bool:
    """Drop the resident pages under a memory-mapped array (whole pages only) with MADV_DONTNEED: a clean file page is
    re-read from the page cache if touched again, so a tensor copied into another layout is not counted twice in
    the process's memory. False (nothing done) when `view` is not inside a memory map."""
    owner = view  # the array whose buffer is the mapping itself (views of a np.memmap are np.memmaps too)
    while isinstance(owner, np.ndarray) and not isinstance(owner.base, mmap.mmap):
        owner = owner.base
    if not isinstance(owner, np.ndarray):
        return False
    start = view.ctypes.data - owner.ctypes.data
    page = mmap.PAGESIZE
    first, last = -(-start // page) * page, (start + view.nbytes) // page * page
    if last > first:
        owner.base.madvise(mmap.MADV_DONTNEED, first, last - first)
    return True


def cpu_qmatmul(x: torch.Tensor, weights: Sequence[CpuWeight], kernels: CpuKernels) -> torch.Tensor:
    """x (..., K) @ [W_1; W_2; ...]^T -> (..., N_1 + N_2 + ...) float32: weights that read the same x in one call."""
    if not 1 <= len(weights) <= MAX_FUSED:
        raise ValueError(f"between 1 and {MAX_FUSED} weights per call, got {len(weights)}")
    k = weights[0].shape[1]
    if any(w.shape[1] != k for w in weights):
        raise ValueError(f"fused weights need the same K, got {[w.shape for w in weights]}")
    if x.shape[-1] != k:
        raise ValueError(f"x has {x.shape[-1]} features, the weights expect {k}")
    if x.device.type != "cpu":
        raise ValueError(f"x is on {x.device}; the CPU kernels read CPU tensors")
    lead = x.shape[:-1]
    flat = x.reshape(-1, k)
    if flat.dtype != torch.float32 or flat.stride(-1) != 1 or flat.stride(0) != k:
        flat = flat.to(torch.float32).contiguous()
    m = flat.shape[0]
    n = sum(w.shape[0] for w in weights)
    y = torch.empty(m, n, dtype=torch.float32)
    if m:
        descs, col = [], 0
        for w in weights:
            descs.append(w.descriptor(col))
            col += w.shape[0]
        kernels.impl.qmatmul(flat.data_ptr(), m, k, k, descs, y.data_ptr(), n, kernels.terms)
    return y.reshape(*lead, n)
