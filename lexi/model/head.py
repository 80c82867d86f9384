"""The output layer: final hidden states -> float32 logits over the vocabulary.

It is the largest matrix a decode step reads (Llama 3's 128256 x 4096, Gemma 3's 262144 x 640), so it takes the
same forms as every other layer (lexi/model/linear.py): on a CPU the C kernels over the file's blocks (int8
activations, exact integer sums: logits within ~1e-3 relative of float32's), on CUDA the Triton kernels with
activations in the compute dtype, and a dense float32 matrix for float32 reference loads. Logits always come back
float32, so sampling never sees bfloat16's steps of 0.125 near 20.
"""

from __future__ import annotations

import torch
from torch import nn

from lexi.model.linear import QuantLinear


class OutputHead(nn.Module):
    """h (R, dim) -> logits (R, vocab) float32 through `layer`."""

    def __init__(self, layer: QuantLinear) -> None:
        super().__init__()
        self.layer = layer
        self.out_features, self.in_features = layer.out_features, layer.in_features

    def forward(self, h: torch.Tensor, force_rowwise: bool = False) -> torch.Tensor:
        return self.layer(h, force_rowwise).to(torch.float32)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}"
