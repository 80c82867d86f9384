"""The output layer: final hidden states -> float32 logits over the vocabulary.

It is the largest matrix a decode step reads (SmolLM2's tied 49152x576, Gemma 3's 262144x640: 113 MB and
670 MB as float32), so its form decides much of a small model's decode speed. Three forms:
  - dense, in the head's dtype (float32 on a CPU float32 load; quantized blocks on CUDA),
  - int8 (CPU bfloat16 loads of a quantized head): the weight requantized per row and the activations split
    into two int8 terms, multiplied with exact int32 sums (`lexi.kernels.int8_cpu.int8_dynamic_mm`). The
    logits stay float32 (a bfloat16 result would round logits near 20 to steps of 0.125 and make near-ties
    exact ties), and a row's logits do not depend on the other rows of the step.
"""

from __future__ import annotations

import torch
from torch import nn

from lexi.kernels.int8_cpu import Int8Weight, int8_dynamic_mm
from lexi.model.linear import QuantLinear


class OutputHead(nn.Module):
    """h (R, dim) -> logits (R, vocab) float32, through the int8 copy when there is one, else `dense`."""

    def __init__(self, dense: QuantLinear | None, int8: Int8Weight | None = None) -> None:
        super().__init__()
        if (dense is None) == (int8 is None):
            raise ValueError("OutputHead needs exactly one of a dense layer and an int8 weight")
        self.dense = dense
        self.int8 = int8
        shape = int8.shape if int8 is not None else (dense.out_features, dense.in_features)
        self.out_features, self.in_features = shape

    def forward(self, h: torch.Tensor, force_fast: bool = False) -> torch.Tensor:
        if self.int8 is not None:
            return int8_dynamic_mm(h, self.int8)
        d = self.dense
        # Logits are computed from float32 inputs (quantized head) or in the dense head's own dtype (float32
        # on a CPU): a bfloat16 result would round logits near 20 to steps of 0.125.
        h = h.to(torch.float32 if d.qweight is not None else d.weight.dtype)
        return d(h, force_fast=force_fast).to(torch.float32)

    def extra_repr(self) -> str:
        kind = "int8 (exact int32 sums)" if self.int8 is not None else "dense"
        return f"in={self.in_features}, out={self.out_features}, {kind}"
