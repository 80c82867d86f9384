"""A linear layer's weight kept in its GGUF blocks, and what every quantized-matmul implementation checks against it.

`QuantWeight.data` is the tensor's bytes exactly as in the GGUF file, (N, row_bytes) uint8, on the device
(F32/F16/BF16 weights too: their bytes, viewed as that dtype by the kernels). Its own module so that the
dispatch (qmatmul.py) imports its implementations and they import only this, never the dispatch back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

if TYPE_CHECKING:
    from lexi.gguf.reader import TensorInfo

Q = GGMLQuantizationType
QMATMUL_TYPES: frozenset[GGMLQuantizationType] = frozenset(
    {Q.F32, Q.F16, Q.BF16, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.IQ4_NL,
     Q.IQ4_XS, Q.MXFP4}
)  # fmt: skip
_FLOAT_DTYPES = {Q.F32: torch.float32, Q.F16: torch.float16, Q.BF16: torch.bfloat16}
GEMV_MAX_M = 16  # decode batches up to this many rows stream the weight once; larger ones are GEMMs


def row_bytes(qtype: GGMLQuantizationType, k: int) -> int:
    """Bytes of one weight row of k elements."""
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    return k // block_size * type_size


@dataclass(frozen=True, slots=True)
class QuantWeight:
    """One linear layer's weight, still in GGUF blocks."""

    qtype: GGMLQuantizationType
    shape: tuple[int, int]  # (N, K): out_features, in_features
    data: torch.Tensor  # (N, row_bytes(qtype, K)) uint8, contiguous: the GGUF bytes on the device

    def __post_init__(self) -> None:
        if self.qtype not in QMATMUL_TYPES:
            raise ValueError(
                f"qtype: {getattr(self.qtype, 'name', self.qtype)} has no qmatmul; supported: "
                f"{sorted(q.name for q in QMATMUL_TYPES)}"
            )
        if len(self.shape) != 2 or min(self.shape) < 1:
            raise ValueError(f"shape: must be (N, K) with N, K >= 1, got {self.shape}")
        block_size = GGML_QUANT_SIZES[self.qtype][0]
        if self.shape[1] % block_size:
            raise ValueError(
                f"shape: K={self.shape[1]} is not a multiple of the {self.qtype.name} block ({block_size})"
            )
        want = (self.shape[0], row_bytes(self.qtype, self.shape[1]))
        if self.data.dtype != torch.uint8 or tuple(self.data.shape) != want or not self.data.is_contiguous():
            raise ValueError(
                f"data: must be contiguous uint8 {want} for {self.qtype.name} {self.shape}, "
                f"got {self.data.dtype} {tuple(self.data.shape)}"
            )
        if self.data.device.type != "meta" and self.data.data_ptr() % 2:
            # The kernels read the fp16 scale fields as aligned 2-byte words.
            raise ValueError("data: must start at an even address")

    @classmethod
    def from_gguf(cls, info: TensorInfo, device: torch.device | str = "cpu") -> QuantWeight:
        """Copy a 2-D GGUF tensor's bytes (memory-mapped) to `device` without dequantizing."""
        if len(info.shape) != 2:
            raise ValueError(f"{info.name}: a linear weight must be 2-D, got shape {info.shape}")
        n, k = (int(s) for s in info.shape)
        raw = np.ascontiguousarray(info.data).view(np.uint8).reshape(n, -1)
        data = torch.empty(raw.shape, dtype=torch.uint8, device=device)
        data.copy_(torch.from_numpy(np.array(raw, copy=True)))
        return cls(GGMLQuantizationType(info.qtype), (n, k), data)

    @classmethod
    def from_float(cls, weight: torch.Tensor, qtype: GGMLQuantizationType = Q.F16) -> QuantWeight:
        """An F32/F16/BF16 QuantWeight from a float (N, K) tensor (cast to that dtype), on its device."""
        if qtype not in _FLOAT_DTYPES:
            raise ValueError(f"qtype: from_float takes F32, F16 or BF16, got {qtype.name}")
        w = weight.to(_FLOAT_DTYPES[qtype]).contiguous()
        return cls(qtype, (w.shape[0], w.shape[1]), w.view(torch.uint8).reshape(w.shape[0], -1))

    def kernel_view(self) -> torch.Tensor:
        """`data` as the kernels read it: the float matrix for F32/F16/BF16, the bytes otherwise."""
        dtype = _FLOAT_DTYPES.get(self.qtype)
        return self.data if dtype is None else self.data.view(dtype)

    @property
    def nbytes(self) -> int:
        return self.data.numel()


def flatten_input(x: torch.Tensor, w: QuantWeight) -> torch.Tensor:
    """Check x against w for the Triton launchers and return it as (M, K) with unit stride along K."""
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"x: dtype must be float16, bfloat16 or float32, got {x.dtype}")
    if x.shape[-1] != w.shape[1]:
        raise ValueError(f"x has {x.shape[-1]} features, weight {w.qtype.name} {w.shape} expects {w.shape[1]}")
    if x.device != w.data.device:
        raise ValueError(f"x is on {x.device}, the weight on {w.data.device}")
    x2 = x.reshape(-1, w.shape[1])
    return x2 if x2.stride(-1) == 1 else x2.contiguous()
