"""RMSNorm as both peers compute it: in float32, whatever the compute dtype.

Gemma's norms scale by (1 + w) in transformers; llama.cpp's converter bakes the +1 into the stored
weight (transformers subtracts it again when it loads a GGUF), so over GGUF weights every family's norm
is the same `x / rms(x) * w`.
"""

from __future__ import annotations

import torch
from torch import nn


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) * weight over the last dim, in float32; the result in `out_dtype` (default: x's)."""
    h = x if x.dtype == torch.float32 else x.to(torch.float32)  # skipping the no-op call saves its dispatch
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    h = h * weight
    out_dtype = out_dtype or x.dtype
    return h if out_dtype == torch.float32 else h.to(out_dtype)


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * w over the last dimension, math in float32, result in x's dtype."""

    def __init__(self, weight: torch.Tensor, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight.to(torch.float32), requires_grad=False)
        self.eps = eps

    def forward(self, x: torch.Tensor, out_dtype: torch.dtype | None = None) -> torch.Tensor:
        """The result in `out_dtype` (default: x's): a float32 residual stream feeds bfloat16 matmuls directly."""
        return rms_norm(x, self.weight, self.eps, out_dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"
