"""Quantized linear layers: a weight kept in its GGUF blocks and `y = x @ W^T` computed from them.

`QuantWeight.data` is the tensor's bytes exactly as in the GGUF file, (N, row_bytes) uint8, on the device
(F32/F16/BF16 weights too: their bytes, viewed as that dtype by the kernels). No dequantized copy is kept.
`qmatmul` picks one implementation with `choose_variant`:

- ``ref``  (`qmatmul_ref`): dequantize then matmul; the CPU path and the yardstick.
- ``gemv`` (`qmatmul_gemv`, decode, M <= 16): split-K streaming kernel, each weight byte read once.
- ``gemm`` (`qmatmul_gemm`, prefill): tiles dequantized in registers feed `tl.dot`, fp32 accumulation.

Triton on CPU tensors can only be Triton's interpreter (lexi/kernels/backend.py), where every program and every
`tl.dot` step costs milliseconds of Python whatever its size: there `interpreter_tiles` replaces the launchers'
GPU tiles by tiles as large as the shape allows (measured: a 49152x128 Q8_0 GEMV took 61 s with the GPU tiles,
under 1 s with large ones). The kernel code and the bytes it reads are the same.

The Triton modules are imported only when a Triton variant runs, so a CPU-only install never needs triton.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from lexi.kernels.qmatmul_ref import qmatmul_ref

if TYPE_CHECKING:
    from lexi.gguf.reader import TensorInfo

Q = GGMLQuantizationType
QMATMUL_TYPES: frozenset[GGMLQuantizationType] = frozenset(
    {Q.F32, Q.F16, Q.BF16, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.IQ4_NL,
     Q.IQ4_XS, Q.MXFP4}
)  # fmt: skip
_FLOAT_DTYPES = {Q.F32: torch.float32, Q.F16: torch.float16, Q.BF16: torch.bfloat16}
Variant = Literal["ref", "gemv", "gemm"]
GEMV_MAX_M = 16  # decode batches up to this many rows stream the weight once; larger ones are GEMMs


def row_bytes(qtype: GGMLQuantizationType, k: int) -> int:
    """Bytes of one weight row of k elements."""
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    return k // block_size * type_size


@dataclass(frozen=True, slots=True)
class QuantWeight:
    """One linear layer's weight, still in GGUF blocks."""

    qtype: GGMLQuantizationType
    shape: tuple[int, int]  # (N, K): out_features, in_features
    data: torch.Tensor  # (N, row_bytes(qtype, K)) uint8, contiguous: the GGUF bytes on the device

    def __post_init__(self) -> None:
        if self.qtype not in QMATMUL_TYPES:
            raise ValueError(
                f"qtype: {getattr(self.qtype, 'name', self.qtype)} has no qmatmul; supported: "
                f"{sorted(q.name for q in QMATMUL_TYPES)}"
            )
        if len(self.shape) != 2 or min(self.shape) < 1:
            raise ValueError(f"shape: must be (N, K) with N, K >= 1, got {self.shape}")
        block_size = GGML_QUANT_SIZES[self.qtype][0]
        if self.shape[1] % block_size:
            raise ValueError(
                f"shape: K={self.shape[1]} is not a multiple of the {self.qtype.name} block ({block_size})"
            )
        want = (self.shape[0], row_bytes(self.qtype, self.shape[1]))
        if self.data.dtype != torch.uint8 or tuple(self.data.shape) != want or not self.data.is_contiguous():
            raise ValueError(
                f"data: must be contiguous uint8 {want} for {self.qtype.name} {self.shape}, "
                f"got {self.data.dtype} {tuple(self.data.shape)}"
            )
        if self.data.device.type != "meta" and self.data.data_ptr() % 2:
            # The kernels read the fp16 scale fields as aligned 2-byte words.
            raise ValueError("data: must start at an even address")

    @classmethod
    def from_gguf(cls, info: TensorInfo, device: torch.device | str = "cpu") -> QuantWeight:
        """Copy a 2-D GGUF tensor's bytes (memory-mapped) to `device` without dequantizing."""
        if len(info.shape) != 2:
            raise ValueError(f"{info.name}: a linear weight must be 2-D, got shape {info.shape}")
        n, k = (int(s) for s in info.shape)
        raw = np.ascontiguousarray(info.data).view(np.uint8).reshape(n, -1)
        data = torch.empty(raw.shape, dtype=torch.uint8, device=device)
        data.copy_(torch.from_numpy(np.array(raw, copy=True)))
        return cls(GGMLQuantizationType(info.qtype), (n, k), data)

    @classmethod
    def from_float(cls, weight: torch.Tensor, qtype: GGMLQuantizationType = Q.F16) -> QuantWeight:
        """An F32/F16/BF16 QuantWeight from a float (N, K) tensor (cast to that dtype), on its device."""
        if qtype not in _FLOAT_DTYPES:
            raise ValueError(f"qtype: from_float takes F32, F16 or BF16, got {qtype.name}")
        w = weight.to(_FLOAT_DTYPES[qtype]).contiguous()
        return cls(qtype, (w.shape[0], w.shape[1]), w.view(torch.uint8).reshape(w.shape[0], -1))

    def kernel_view(self) -> torch.Tensor:
        """`data` as the kernels read it: the float matrix for F32/F16/BF16, the bytes otherwise."""
        dtype = _FLOAT_DTYPES.get(self.qtype)
        return self.data if dtype is None else self.data.view(dtype)

    @property
    def nbytes(self) -> int:
        return self.data.numel()


def choose_variant(x: torch.Tensor, w: QuantWeight, kernels: str = "auto") -> Variant:
    """The implementation `qmatmul` runs: the reference for kernels "reference" (and for "auto" off CUDA),
    else a Triton kernel by the number of rows M."""
    if kernels == "reference" or (kernels == "auto" and x.device.type != "cuda"):
        return "ref"
    m = prod(x.shape[:-1])
    return "gemv" if m <= GEMV_MAX_M else "gemm"


def interpreter_tiles(variant: Variant, m: int, n: int, k: int) -> dict[str, int]:
    """Launch options for Triton's interpreter: few, large programs (up to 2^17 weight elements a tile, no
    split-K), within the shape's next powers of two. Measured on 1536x576 and 576x1536 Q4_1 GEMVs: 0.13-0.20 s
    against 0.2-0.7 s for tiles twice as large or half as wide; GPU tiles take seconds."""
    block_k = min(_pow2(k), 128)
    if variant == "gemv":
        return {"block_n": max(16, min(_pow2(n), (1 << 17) // block_k)), "block_k": block_k, "split_k": 1}
    return {"block_m": max(16, min(_pow2(m), 64)), "block_n": max(16, min(_pow2(n), 256)), "block_k": block_k}


def _pow2(v: int) -> int:
    return 1 << max(0, v - 1).bit_length()


def qmatmul(x: torch.Tensor, w: QuantWeight, variant: Variant | None = None, kernels: str = "auto") -> torch.Tensor:
    """x (..., K) fp16/bf16/fp32 @ W^T -> (..., N) in x's dtype. `variant` forces an implementation; else
    `kernels` (auto | triton | reference, see lexi/kernels/backend.py) and the shape choose one."""
    variant = variant or choose_variant(x, w, kernels)
    if variant == "ref":
        return qmatmul_ref(x, w)
    if variant not in ("gemv", "gemm"):
        raise ValueError(f"variant: must be ref, gemv or gemm, got {variant!r}")
    tiles = {}
    if x.device.type == "cpu":
        tiles = interpreter_tiles(variant, prod(x.shape[:-1]), *w.shape)
    if variant == "gemv":
        from lexi.kernels.qmatmul_gemv import qmatmul_gemv

        return qmatmul_gemv(x, w, **tiles)
    from lexi.kernels.qmatmul_gemm import qmatmul_gemm

    return qmatmul_gemm(x, w, **tiles)


def flatten_input(x: torch.Tensor, w: QuantWeight) -> torch.Tensor:
    """Check x against w for the Triton launchers and return it as (M, K) with unit stride along K."""
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"x: dtype must be float16, bfloat16 or float32, got {x.dtype}")
    if x.shape[-1] != w.shape[1]:
        raise ValueError(f"x has {x.shape[-1]} features, weight {w.qtype.name} {w.shape} expects {w.shape[1]}")
    if x.device != w.data.device:
        raise ValueError(f"x is on {x.device}, the weight on {w.data.device}")
    x2 = x.reshape(-1, w.shape[1])
    return x2 if x2.stride(-1) == 1 else x2.contiguous()
