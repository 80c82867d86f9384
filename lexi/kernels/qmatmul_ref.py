"""Reference quantized matmul: dequantize the whole weight with lexi.gguf.dequant, then one fp32 matmul.

This is the yardstick the Triton kernels are tested against and the CPU path of `qmatmul`. It keeps no
dequantized copy: the float32 weight lives only for the duration of the call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from lexi.gguf.dequant import dequantize

if TYPE_CHECKING:
    from lexi.kernels.quant_weight import QuantWeight


def dequantize_weight(w: QuantWeight) -> torch.Tensor:
    """The (N, K) float32 weight, on w's device."""
    return dequantize(w.data, w.qtype, w.shape)


def qmatmul_ref(x: torch.Tensor, w: QuantWeight) -> torch.Tensor:
    """x (..., K) @ W^T -> (..., N) in x's dtype; products and sums in fp32."""
    if x.shape[-1] != w.shape[1]:
        raise ValueError(f"x has {x.shape[-1]} features, weight {w.qtype.name} {w.shape} expects {w.shape[1]}")
    y = x.reshape(-1, w.shape[1]).to(torch.float32) @ dequantize_weight(w).T
    return y.to(x.dtype).reshape(*x.shape[:-1], w.shape[0])
