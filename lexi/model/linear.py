"""Linear layers and the token embedding as a module swap over GGUF tensors.

A `QuantLinear` holds its weight in one of three forms:
  - CPU kernels (`cpu`): the file's blocks, or the same bytes interleaved eight rows at a time, read by LexiEngine's
    C kernels (lexi/kernels/cpu_qmatmul.py) with int8 activations: the CPU's serving path, as large in memory as
    the file, each output row computed the same way whatever the batch (so `--deterministic` costs it nothing);
  - GGUF blocks (`qweight`, lexi/kernels/qmatmul.py): the Triton kernels on CUDA (or the interpreter), or their
    PyTorch reference, which dequantizes for the call only;
  - dense (`weight`): F32/F16/BF16 tensors, and every weight of a CPU float32 load (exact dequantization, 4 bytes a
    weight: the reference path tests compare with transformers).
`FusedLinear` multiplies one input by several CPU-kernel weights in one call (q/k/v, gate/up).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lexi.gguf.dequant import dequantize, dequantize_tensor
from lexi.kernels.cpu_qmatmul import CPU_KERNEL_TYPES, CpuKernels, CpuWeight, cpu_qmatmul

if TYPE_CHECKING:
    from lexi.gguf.reader import TensorInfo
    from lexi.kernels.quant_weight import QuantWeight

_DENSE_TYPES = ("F32", "F16", "BF16")


def dense_weight(info: TensorInfo, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Dequantize a GGUF tensor (float32, exact) and cast it once into the compute dtype."""
    return dequantize_tensor(info).to(device=device, dtype=dtype).contiguous()


def cpu_weight(info: TensorInfo, kernels: CpuKernels) -> CpuWeight:
    """A quantized 2-D tensor for the C kernels: repacked where this CPU has an interleaved kernel for its type (the
    mapped pages then given back), else the mapped file rows themselves."""
    return CpuWeight.repacked(kernels, info.data, info.qtype, (int(info.shape[0]), int(info.shape[1])))


class QuantLinear(nn.Module):
    """y = x W^T (+ b), W in one of the three forms of the module docstring."""

    def __init__(
        self,
        weight: torch.Tensor | None,
        qweight: QuantWeight | None,
        bias: torch.Tensor | None = None,
        kernels: str = "auto",
        cpu: tuple[CpuWeight, CpuKernels] | None = None,
    ) -> None:
        super().__init__()
        if sum(w is not None for w in (weight, qweight, cpu)) != 1:
            raise ValueError("QuantLinear needs exactly one of weight (dense), qweight (GGUF blocks) and cpu")
        self.weight = None if weight is None else nn.Parameter(weight, requires_grad=False)
        self.qweight = qweight
        self.cpu = cpu
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)
        if weight is not None:
            shape = tuple(weight.shape)
        elif qweight is not None:
            shape = tuple(qweight.shape)
        else:
            shape = cpu[0].shape
        self.out_features, self.in_features = shape
        self.kernels = kernels  # which qmatmul implementations read `qweight`: auto | triton | reference

    @classmethod
    def from_gguf(
        cls,
        info: TensorInfo,
        dtype: torch.dtype,
        device: torch.device,
        bias: TensorInfo | None = None,
        quantized: bool = False,
        kernels: str = "auto",
        cpu_kernels: CpuKernels | None = None,
    ) -> QuantLinear:
        """`cpu_kernels`: the CPU path's kernels, for a quantized weight of a type they read; else `quantized`
        keeps GGUF blocks for qmatmul (`kernels` says whose), and otherwise the weight is dense in `dtype`."""
        b = None if bias is None else dequantize_tensor(bias).to(device=device, dtype=torch.float32)
        if info.qtype.name not in _DENSE_TYPES:
            if cpu_kernels is not None and info.qtype in CPU_KERNEL_TYPES:
                return cls(None, None, b, cpu=(cpu_weight(info, cpu_kernels), cpu_kernels))
            if quantized:
                from lexi.kernels.quant_weight import QuantWeight

                return cls(None, QuantWeight.from_gguf(info, device), b, kernels=kernels)
        dense_dtype = torch.float32 if cpu_kernels is not None else dtype
        return cls(dense_weight(info, dense_dtype, device), None, None if b is None else b.to(dense_dtype))

    def forward(self, x: torch.Tensor, force_rowwise: bool = False) -> torch.Tensor:
        """y = x W^T (+ b). `force_rowwise` (--deterministic): a dense CPU weight multiplies one row at a time, so
        a row's result does not depend on the others (the CPU kernels and qmatmul's are row-independent already)."""
        if self.cpu is not None:
            y = cpu_qmatmul(x, [self.cpu[0]], self.cpu[1])
            return y if self.bias is None else y + self.bias
        if self.qweight is not None:
            from lexi.kernels.qmatmul import qmatmul

            flat = x.reshape(-1, x.shape[-1])
            y = qmatmul(flat, self.qweight, kernels=self.kernels).reshape(*x.shape[:-1], self.out_features)
            return y if self.bias is None else y + self.bias.to(y.dtype)
        x = x.to(self.weight.dtype)
        rows = x.numel() // x.shape[-1]
        if force_rowwise and rows > 1 and x.device.type == "cpu":
            flat = x.reshape(rows, x.shape[-1])
            y = torch.cat([F.linear(flat[i : i + 1], self.weight, self.bias) for i in range(rows)])
            return y.reshape(*x.shape[:-1], self.out_features)
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        if self.cpu is not None:
            w = self.cpu[0]
            kind = f"{w.qtype.name} {w.layout} (cpu kernels, {self.cpu[1].isa})"
        elif self.qweight is not None:
            kind = f"{self.qweight.qtype.name} ({self.kernels})"
        else:
            kind = f"dense {self.weight.dtype}"
        return f"in={self.in_features}, out={self.out_features}, {kind}, bias={self.bias is not None}"


class FusedLinear(nn.Module):
    """Several CPU-kernel layers that read the same input, in one call: x is quantized once and the rows of every
    weight are shared out among the threads together. `sizes` splits the (T, sum) result."""

    def __init__(self, parts: list[QuantLinear]) -> None:
        super().__init__()
        if not parts or any(p.cpu is None for p in parts):
            raise ValueError("FusedLinear takes one or more CPU-kernel QuantLinears")
        self.weights = [p.cpu[0] for p in parts]
        self.kernels = parts[0].cpu[1]
        self.sizes = tuple(p.out_features for p in parts)
        biases = [p.bias for p in parts]
        self.bias = None
        if any(b is not None for b in biases):
            full = [b if b is not None else torch.zeros(n) for b, n in zip(biases, self.sizes, strict=True)]
            self.bias = nn.Parameter(torch.cat(full).to(torch.float32), requires_grad=False)

    @classmethod
    def maybe(cls, parts: list[QuantLinear]) -> FusedLinear | None:
        """The fused layer when every part runs on the CPU kernels, else None (each part then runs alone)."""
        return cls(parts) if all(p.cpu is not None for p in parts) else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = cpu_qmatmul(x, self.weights, self.kernels)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"sizes={self.sizes}, {', '.join(w.qtype.name for w in self.weights)}"


class TokenEmbedding(nn.Module):
    """Rows of a dense token embedding (float-typed tables, and float32 reference loads), in the residual dtype."""

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
    """Token embedding read from the file's own (memory-mapped) rows, each looked-up row dequantized exactly.

    Nothing is copied at load: a step reads the rows of its tokens (Llama-3-8B's table is 525 MB as Q4_K blocks,
    2.1 GB as float32), and only their pages become resident.
    """

    def __init__(self, info: TensorInfo, scale: float, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.qtype = info.qtype
        self.vocab, self.dim = int(info.shape[0]), int(info.shape[1])
        self.rows = info.data.reshape(self.vocab, -1)  # the mapped file, never written
        self.scale = scale
        self.dtype = dtype
        self.device = device

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        ids = tokens.to("cpu").numpy()
        picked = torch.from_numpy(np.take(self.rows, ids, axis=0))
        x = dequantize(picked, self.qtype, (len(ids), self.dim))
        if self.scale != 1.0:
            x = x * self.scale  # llama.cpp scales in float32
        return x.to(device=self.device, dtype=self.dtype)

    def extra_repr(self) -> str:
        return f"{self.vocab} x {self.dim}, {self.qtype.name} rows from the file"
