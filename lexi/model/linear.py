"""Linear layers and the token embedding as a module swap over GGUF tensors.

On CUDA a `QuantLinear` keeps the GGUF blocks (a `QuantWeight`) and calls the quantized matmul, so
weights stay as small on the device as they are in the file; `kernels` (lexi/kernels/backend.py) says
whether the Triton kernels or the reference read them (Triton on a CPU: the interpreter, for tests). On a CPU
the weight is dequantized once at load into the compute dtype and `forward` is a plain `F.linear`: there the
reference math is the serving path. For bfloat16 loads on a CPU a quantized layer also keeps a compact decode copy
(`lexi.model.fast_weights`: int4 for Q4_0/Q4_1/Q4_K, per-row int8 otherwise): torch's weight-only matmuls
read a quarter or half of the bytes, so they win for decode-sized inputs, while the dense GEMM wins for
prefill; `use_fast` picks by the number of rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lexi.gguf.dequant import dequantize, dequantize_tensor
from lexi.kernels.int4_cpu import Int4Weight
from lexi.model.fast_weights import FastWeight, fast_mm, fast_weight

if TYPE_CHECKING:
    from lexi.gguf.reader import TensorInfo
    from lexi.kernels.qmatmul import QuantWeight

# Types whose blocks the quantized matmul reads; F32/F16/BF16 are cheaper as plain dense weights.
_DENSE_TYPES = ("F32", "F16", "BF16")
# Rows (tokens) up to which the weight-only kernels beat the dense bf16 GEMM. Measured on 2 cores, ms:
# int4/dense 1536x576 M=1 0.096/0.129, M=8 0.169/0.190, M=16 0.268/0.216; 576x1536 M=8 0.158/0.154;
# int8/dense 960x576 M=2 0.027/0.065, M=8 0.107/0.072; 3072x576 M=2 0.112/0.163, M=8 0.372/0.200.
# Two int4 planes cost twice one: int4x2/dense 1536x640 M=4 0.106/0.101.
INT4_MAX_ROWS = 8
INT4_PLANES_MAX_ROWS = 4
INT8_MAX_ROWS = 4


def fast_max_rows(w: FastWeight | None) -> int:
    if w is None:
        return 0
    if isinstance(w, Int4Weight):
        return INT4_MAX_ROWS if w.planes == 1 else INT4_PLANES_MAX_ROWS
    return INT8_MAX_ROWS


def dense_weight(info: TensorInfo, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Dequantize a GGUF tensor (float32, exact) and cast it once into the compute dtype."""
    return dequantize_tensor(info).to(device=device, dtype=dtype).contiguous()


class QuantLinear(nn.Module):
    """y = x W^T (+ b), W either dense (CPU) or GGUF blocks read by `lexi.kernels.qmatmul` (CUDA)."""

    def __init__(
        self,
        weight: torch.Tensor | None,
        qweight: QuantWeight | None,
        bias: torch.Tensor | None = None,
        kernels: str = "auto",
    ) -> None:
        super().__init__()
        if (weight is None) == (qweight is None):
            raise ValueError("QuantLinear needs exactly one of weight (dense) and qweight (quantized)")
        self.weight = None if weight is None else nn.Parameter(weight, requires_grad=False)
        self.qweight = qweight
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)
        shape = tuple(weight.shape) if weight is not None else tuple(qweight.shape)
        self.out_features, self.in_features = shape
        self.fast: FastWeight | None = None  # an optional decode copy of a dense CPU weight, see use_fast
        self.fast_max_rows = 0
        self.kernels = kernels  # which qmatmul implementations read `qweight`: auto | triton | reference

    def set_fast(self, w: FastWeight | None) -> None:
        self.fast, self.fast_max_rows = w, fast_max_rows(w)

    def use_fast(self, rows: int, force: bool = False) -> bool:
        """The path for an input of `rows` rows: the decode copy for decode-sized inputs, or always when forced
        (--deterministic). Tests force a path by setting `fast_max_rows` (0: always dense)."""
        return self.fast is not None and (force or rows <= self.fast_max_rows)

    @classmethod
    def from_gguf(
        cls,
        info: TensorInfo,
        dtype: torch.dtype,
        device: torch.device,
        bias: TensorInfo | None = None,
        quantized: bool = False,
        fast: bool = True,
        kernels: str = "auto",
    ) -> QuantLinear:
        """`fast`: keep a decode copy on a CPU bfloat16 load (off for layers a stacked projection covers).
        `kernels`: the qmatmul implementations of a quantized layer (lexi/kernels/backend.py)."""
        b = None if bias is None else dequantize_tensor(bias).to(device=device, dtype=dtype)
        if quantized and info.qtype.name not in _DENSE_TYPES:
            from lexi.kernels.qmatmul import QuantWeight

            return cls(None, QuantWeight.from_gguf(info, device), b, kernels=kernels)
        layer = cls(dense_weight(info, dtype, device), None, b)
        if fast and dtype == torch.bfloat16 and torch.device(device).type == "cpu":
            layer.set_fast(fast_weight([info]))
        return layer

    def forward(self, x: torch.Tensor, force_fast: bool = False) -> torch.Tensor:
        """y = x W^T (+ b). `force_fast` (--deterministic) takes a path whose rows do not depend on each other:
        the decode copy at any row count, or one dense GEMV per row for a float-typed weight on a CPU."""
        if self.qweight is not None:
            from lexi.kernels.qmatmul import qmatmul

            flat = x.reshape(-1, x.shape[-1])
            y = qmatmul(flat, self.qweight, kernels=self.kernels).reshape(*x.shape[:-1], self.out_features)
            return y if self.bias is None else y + self.bias
        rows = x.numel() // x.shape[-1]
        if self.use_fast(rows, force_fast) and x.dtype == torch.bfloat16:
            y = fast_mm(x if x.dim() == 2 else x.reshape(rows, x.shape[-1]), self.fast)
            y = y if x.dim() == 2 else y.reshape(*x.shape[:-1], self.out_features)
            return y if self.bias is None else y + self.bias
        if force_fast and rows > 1 and x.device.type == "cpu":
            flat = x.reshape(rows, x.shape[-1])
            y = torch.cat([F.linear(flat[i : i + 1], self.weight, self.bias) for i in range(rows)])
            return y.reshape(*x.shape[:-1], self.out_features)
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        fast = "" if self.fast is None else "+int4" if isinstance(self.fast, Int4Weight) else "+int8"
        kind = f"{self.qweight.qtype.name} ({self.kernels})" if self.qweight is not None else "dense" + fast
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


class BlockEmbedding(nn.Module):
    """Token embedding kept as the file's quantized rows, each looked-up row dequantized exactly per step.

    The CPU bfloat16 path's output head reads its own int8 copy, so nothing else needs the dense table:
    this keeps the rows exact (no bfloat16 rounding before the scale) at the file's size (Gemma 3: 178 MB
    of Q8_0 blocks instead of a 670 MB float32 table).
    """

    def __init__(self, info: TensorInfo, scale: float, dtype: torch.dtype) -> None:
        super().__init__()
        self.qtype = info.qtype
        self.dim = int(info.shape[1])
        self.register_buffer("blocks", torch.from_numpy(np.array(info.data, dtype=np.uint8, copy=True)))
        self.scale = scale
        self.dtype = dtype

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        rows = dequantize(self.blocks.index_select(0, tokens), self.qtype, (tokens.numel(), self.dim))
        if self.scale != 1.0:
            rows = rows * self.scale  # llama.cpp scales in float32
        return rows.to(self.dtype)
