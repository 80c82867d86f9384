"""The CPU decode path's weights: GGUF blocks kept in the form torch's weight-only matmuls read fastest.

A decode step multiplies one row per sequence by every weight, so it is bound by the bytes it reads and by
the number of op calls; a dense bfloat16 GEMV reads 2 bytes a weight. Here every quantized linear layer also
gets a compact copy for decode-sized steps:
  - Q4_0, Q4_1, Q4_K: int4 with a 32-element group scale and zero (lossless up to bfloat16 scale/zero),
  - Q5_0, Q5_1, Q8_0: two int4 planes (lo and hi bits), summed (lossless up to bfloat16 scales),
  - any other quantized type (Q2_K, Q3_K, Q5_K, Q6_K): per-row int8 (a second rounding, measured),
  - F32, F16, BF16: none (the dense weight serves).
Matrices that read the same input are stacked (q/k/v, gate/up), so a layer makes 4 matmul calls, not 7.
Both kernels compute each output row the same way whatever the number of rows, which is what lets
`--deterministic` run every step through them (see lexi/model/step.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from lexi.gguf.dequant import dequantize_tensor
from lexi.kernels.int4_cpu import PLANE_TYPES, Int4Weight, int4_mm, int4_supported
from lexi.kernels.int8_cpu import Int8Weight, int8_mm, int8_supported

if TYPE_CHECKING:
    from lexi.gguf.reader import TensorInfo

FastWeight = Int4Weight | Int8Weight
_FLOAT_TYPES = ("F32", "F16", "BF16")


def fast_mm(x: torch.Tensor, w: FastWeight) -> torch.Tensor:
    """x (M, K) bfloat16 @ W^T -> (M, N) bfloat16 through the weight's own kernel."""
    return int4_mm(x, w) if isinstance(w, Int4Weight) else int8_mm(x, w)


def fast_weight(parts: list[TensorInfo]) -> FastWeight | None:
    """The stacked decode copy of `parts` (same in_features), or None when they are float tensors or this
    torch lacks the kernel. int4 planes when every part has an int4 form; otherwise int8 for all."""
    if any(p.qtype.name in _FLOAT_TYPES for p in parts):
        return None
    if all(p.qtype in PLANE_TYPES for p in parts) and int4_supported():
        return Int4Weight.from_parts([(p.data, p.qtype, tuple(p.shape)) for p in parts])
    if not int8_supported():
        return None
    return Int8Weight.from_dense(torch.cat([dequantize_tensor(p) for p in parts]))


@dataclass(frozen=True, slots=True)
class StackedProjection:
    """Several projections of one input in one matmul: `weight` stacks them along N, `sizes` splits the result.

    `bias` (qwen2's q/k/v biases) is the stacked bias in bfloat16, or None.
    """

    weight: FastWeight
    sizes: tuple[int, ...]
    bias: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if sum(self.sizes) != self.weight.shape[0]:
            raise ValueError(f"sizes {self.sizes} must add up to the stacked weight's N={self.weight.shape[0]}")
        if self.bias is not None and tuple(self.bias.shape) != (self.weight.shape[0],):
            raise ValueError(f"bias must be ({self.weight.shape[0]},), got {tuple(self.bias.shape)}")

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x (M, K) bfloat16 -> (M, sum(sizes)) bfloat16; callers slice it (views, no copies)."""
        y = fast_mm(x, self.weight)
        return y if self.bias is None else y + self.bias

    @classmethod
    def build(cls, parts: list[TensorInfo], biases: list[TensorInfo] | None = None) -> StackedProjection | None:
        weight = fast_weight(parts)
        if weight is None:
            return None
        bias = None
        if biases:
            bias = torch.cat([dequantize_tensor(b) for b in biases]).to(torch.bfloat16)
        return cls(weight, tuple(int(p.shape[0]) for p in parts), bias)
