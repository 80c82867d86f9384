"""Quantized linear layers: `y = x @ W^T` computed from a weight kept in its GGUF blocks (quant_weight.py).

No dequantized copy of the weight is kept. `qmatmul` picks one implementation with `choose_variant`:

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

from math import prod
from typing import Literal

import torch

from lexi.kernels.qmatmul_ref import qmatmul_ref
from lexi.kernels.quant_weight import GEMV_MAX_M, QuantWeight

Variant = Literal["ref", "gemv", "gemm"]


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
