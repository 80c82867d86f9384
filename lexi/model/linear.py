"""Linear layers and the token embedding as a module swap over GGUF tensors.

On CUDA a `QuantLinear` keeps the GGUF blocks (a `QuantWeight`) and calls the quantized matmul, so
weights stay as small on the device as they are in the file. On a CPU the weight is dequantized once
at load into the compute dtype and `forward` is a plain `F.linear`: there the reference math is the
serving path. For bfloat16 Q4_0/Q4_1/Q4_K weights on a CPU the layer also keeps a lossless int4 repack
(`lexi.kernels.int4_cpu`): torch's int4 weight-only matmul reads a quarter of the bytes, so it wins for
decode-sized inputs, while the dense GEMM wins for prefill; `use_int4` picks by the number of rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from lexi.gguf.dequant import dequantize_tensor
from lexi.kernels.int4_cpu import INT4_TYPES, Int4Weight, int4_mm, int4_supported

if TYPE_CHECKING:
    from lexi.gguf.reader import TensorInfo
    from lexi.kernels.qmatmul import QuantWeight

# Types whose blocks the quantized matmul reads; F32/F16/BF16 are cheaper as plain dense weights.
_DENSE_TYPES = ("F32", "F16", "BF16")
# Rows (tokens) up to which the int4 matmul beats the dense bf16 GEMM. Measured on 2 cores, int4/dense ms:
# 1536x576 M=1 0.096/0.129, M=8 0.169/0.190, M=16 0.268/0.216; 576x1536 M=8 0.158/0.154, M=12 0.195/0.126;
# 2048x640 M=8 0.197/0.220, M=16 0.368/0.312.
INT4_MAX_ROWS = 8


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
        self.int4: Int4Weight | None = None  # an optional second copy of a dense CPU weight, see use_int4
        self.int4_max_rows = INT4_MAX_ROWS

    def use_int4(self, rows: int) -> bool:
        """The path for an input of `rows` rows: int4 for decode-sized inputs. Tests force a path by setting
        `int4_max_rows` (0: always dense; a large number: always int4)."""
        return self.int4 is not None and rows <= self.int4_max_rows

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
        layer = cls(dense_weight(info, dtype, device), None, b)
        if dtype == torch.bfloat16 and torch.device(device).type == "cpu":
            if info.qtype in INT4_TYPES and int4_supported():
                layer.int4 = Int4Weight.from_blocks(info.data, info.qtype, layer.weight.shape)
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.qweight is not None:
            from lexi.kernels.qmatmul import qmatmul

            y = qmatmul(x.reshape(-1, x.shape[-1]), self.qweight).reshape(*x.shape[:-1], self.out_features)
            return y if self.bias is None else y + self.bias
        rows = x.numel() // x.shape[-1]
        if self.use_int4(rows) and x.dtype == torch.bfloat16:
            y = int4_mm(x.reshape(rows, x.shape[-1]), self.int4).reshape(*x.shape[:-1], self.out_features)
            return y if self.bias is None else y + self.bias
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        kind = self.qweight.qtype.name if self.qweight is not None else "dense" if self.int4 is None else "dense+int4"
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
