"""Linear layers and the token embedding as a module swap over GGUF tensors.

On CUDA a `QuantLinear` keeps the GGUF blocks (a `QuantWeight`) and calls the quantized matmul, so
weights stay as small on the device as they are in the file. On a CPU the weight is dequantized once
at load into the compute dtype and `forward` is a plain `F.linear`: there the reference math is the
serving path, and a dense GEMM is the fastest thing PyTorch offers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from lexi.gguf.dequant import dequantize_tensor

if TYPE_CHECKING:
    from lexi.gguf.reader import TensorInfo
    from lexi.kernels.qmatmul import QuantWeight

# Types whose blocks the quantized matmul reads; F32/F16/BF16 are cheaper as plain dense weights.
_DENSE_TYPES = ("F32", "F16", "BF16")


def dense_weight(info: TensorInfo, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Dequantize a GGUF tensor (float32, exact) and cast it once into the compute dtype."""
    return dequantize_tensor(info).to(device=device, dtype=dtype).contiguous()


class QuantLinear(nn.Module):
    """y = x W^T (+ b), W either dense (CPU) or GGUF blocks read by `lexi.kernels.qmatmul` (CUDA)."""

    def __init__(
        self, weight: torch.Tensor | None, qweight: QuantWeight | None, bias: torch.Tensor | None = None
    ) -> None:
        super().__init__()
        if (weight is None) == (qweight is None):
            raise ValueError("QuantLinear needs exactly one of weight (dense) and qweight (quantized)")
        self.weight = None if weight is None else nn.Parameter(weight, requires_grad=False)
        self.qweight = qweight
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)
        shape = tuple(weight.shape) if weight is not None else tuple(qweight.shape)
        self.out_features, self.in_features = shape

    @classmethod
    def from_gguf(
        cls,
        info: TensorInfo,
        dtype: torch.dtype,
        device: torch.device,
        bias: TensorInfo | None = None,
        quantized: bool = False,
    ) -> QuantLinear:
        b = None if bias is None else dequantize_tensor(bias).to(device=device, dtype=dtype)
        if quantized and info.qtype.name not in _DENSE_TYPES:
            from lexi.kernels.qmatmul import QuantWeight

            return cls(None, QuantWeight.from_gguf(info, device), b)
        return cls(dense_weight(info, dtype, device), None, b)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.qweight is not None:
            from lexi.kernels.qmatmul import qmatmul

            y = qmatmul(x.reshape(-1, x.shape[-1]), self.qweight).reshape(*x.shape[:-1], self.out_features)
            return y if self.bias is None else y + self.bias
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        kind = "dense" if self.qweight is None else self.qweight.qtype.name
        return f"in={self.in_features}, out={self.out_features}, {kind}, bias={self.bias is not None}"


class TokenEmbedding(nn.Module):
    """Rows of the token embedding, dense (a gather needs no matmul kernel), returned in the compute dtype.

    The matrix may be stored wider than the compute dtype (float32 when it doubles as the tied output
    layer on a CPU); rows are scaled at the stored precision and then cast.
    """

    def __init__(self, weight: torch.Tensor, scale: float = 1.0, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.scale = scale
        self.dtype = dtype or weight.dtype

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = F.embedding(tokens, self.weight)
        if self.scale != 1.0:
            # transformers rounds the scale to the stored dtype before multiplying; llama.cpp scales in float32.
            x = x * torch.tensor(self.scale, dtype=x.dtype, device=x.device)
        return x.to(self.dtype)
