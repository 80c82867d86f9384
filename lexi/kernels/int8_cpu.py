"""Per-row int8 weights for torch's CPU weight-only matmul: the decode path of GGUF types int4 cannot hold.

`torch._weight_int8pack_mm(x, q, s)` computes x @ (q * s[:, None])^T with q int8 (N, K) and one scale per
output row, s in x's dtype. Q5_0, Q5_1, Q6_K, Q8_0 and the other K-quants have no affine 4-bit form, so
their exactly dequantized weights are requantized here: s = max|w_row| / 127, q = round(w / s). That is a
second rounding (at most half a step of s per weight; for Q8_0, whose own step is max|w_block| / 127, the
added error is of the file's own size), and s is rounded to bfloat16; tests bound both, and the model's
teacher-forced top-1 agreement with the float32 path is measured over both bundled models.

Why int8: at M = 1 the op reads 1 byte per weight instead of bfloat16's 2 (measured on 2 cores: Gemma 3's
262144x640 output head 12.7 ms vs 25 ms for the float32 GEMV), and each output row is computed the same way
whatever M is, so a row's result does not depend on the batch it shares (tests check this bit for bit).
Its cost grows linearly with M, so dense GEMMs win for prefill-sized inputs: callers keep both.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import torch

_ROWS_PER_PIECE = 8192


@cache
def int8_supported() -> bool:
    """Whether this torch build has the CPU int8 weight-only op and it computes the documented math."""
    try:
        q = torch.arange(-64, 64, dtype=torch.int8).reshape(2, 64)
        s = torch.tensor([1.0, 0.5], dtype=torch.bfloat16)
        y = torch._weight_int8pack_mm(torch.ones(1, 64, dtype=torch.bfloat16), q, s)
    except (AttributeError, RuntimeError, NotImplementedError):
        return False
    want = q.to(torch.float32).sum(dim=1) * s.to(torch.float32)
    return bool(torch.equal(y.float().reshape(-1), want))


@dataclass(frozen=True, slots=True)
class Int8Weight:
    """One (N, K) weight as int8 `qweight` (N, K) and `scales` (N,): W[n, k] = qweight[n, k] * scales[n].

    Scales are bfloat16 for `int8_mm` (the op wants the activations' dtype) or float32 for `int8_dynamic_mm`.
    """

    shape: tuple[int, int]
    qweight: torch.Tensor
    scales: torch.Tensor

    def __post_init__(self) -> None:
        n, k = self.shape
        if self.qweight.dtype != torch.int8 or tuple(self.qweight.shape) != (n, k):
            raise ValueError(f"qweight: want int8 {(n, k)}, got {self.qweight.dtype} {tuple(self.qweight.shape)}")
        if self.scales.dtype not in (torch.bfloat16, torch.float32) or tuple(self.scales.shape) != (n,):
            got = f"{self.scales.dtype} {tuple(self.scales.shape)}"
            raise ValueError(f"scales: want bfloat16 or float32 ({n},), got {got}")

    @classmethod
    def from_dense(cls, w: torch.Tensor, scale_dtype: torch.dtype = torch.bfloat16) -> Int8Weight:
        """Symmetric per-row quantization of an exactly dequantized (N, K) weight (float32 recommended)."""
        if w.dim() != 2:
            raise ValueError(f"w must be a matrix, got shape {tuple(w.shape)}")
        qs, ss = [], []
        for rows in w.split(_ROWS_PER_PIECE):  # bounded temporaries: a 262144-row head is 670 MB as float32
            rows = rows.to(torch.float32)
            scales = (rows.abs().amax(dim=1) / 127.0).to(scale_dtype)
            # The op multiplies by the stored (maybe bfloat16) scale, so quantize against that same value; an
            # all-zero row keeps scale 0 and q 0. A scale rounded down can push |q| to 127.5: clamp.
            s = scales.to(torch.float32)[:, None]
            q = torch.where(s > 0, rows / s.clamp_min(torch.finfo(torch.float32).tiny), 0.0)
            qs.append(q.round_().clamp_(-127, 127).to(torch.int8))
            ss.append(scales)
        return cls((int(w.shape[0]), int(w.shape[1])), torch.cat(qs).contiguous(), torch.cat(ss).contiguous())

    @classmethod
    def cat(cls, parts: list[Int8Weight]) -> Int8Weight:
        """Weights with the same K stacked along N."""
        q, s = torch.cat([p.qweight for p in parts]), torch.cat([p.scales for p in parts])
        return cls((int(q.shape[0]), int(q.shape[1])), q, s)

    def dequantize(self) -> torch.Tensor:
        """The float32 weight this op multiplies by (for tests and references)."""
        return self.qweight.to(torch.float32) * self.scales.to(torch.float32)[:, None]


def int8_mm(x: torch.Tensor, w: Int8Weight) -> torch.Tensor:
    """x (M, K) bfloat16 @ W^T -> (M, N) bfloat16 (W's scales must be bfloat16)."""
    return torch._weight_int8pack_mm(x.contiguous(), w.qweight, w.scales)


def split_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, K) -> (q (2M, K) int8, s (2M, 1) float32) with x ~= s[:M] q[:M] + s[M:] q[M:] row by row.

    The second term quantizes what the first leaves, so the error is at most max|x_row| / 64516 per element
    (about 16 bits relative to the row's largest element, finer than bfloat16 for the elements near it): one
    int8 term alone (llama.cpp's Q8 activations, per 32 elements there) would be 1/254, coarse for the many
    small elements of a row with an outlier.
    """
    x = x.to(torch.float32)
    tiny = torch.finfo(torch.float32).tiny
    s1 = x.abs().amax(dim=-1, keepdim=True).div_(127.0).clamp_min_(tiny)
    q1 = (x / s1).round_()
    rest = x - q1 * s1
    s2 = rest.abs().amax(dim=-1, keepdim=True).div_(127.0).clamp_min_(tiny)
    q2 = (rest / s2).round_()
    return torch.cat((q1, q2)).to(torch.int8), torch.cat((s1, s2))


def int8_dynamic_mm(x: torch.Tensor, w: Int8Weight) -> torch.Tensor:
    """x (M, K) @ W^T -> (M, N) float32, through int8 x int8 products summed exactly in int32.

    `split_int8` turns x into two int8 rows per row, `torch._int_mm` (oneDNN; AMX or VNNI where the CPU has
    them) sums every product exactly, and the scales are applied in float32. An integer sum does not depend on
    the order it is taken in, so a row's result is the same whatever else is in the batch, by construction.
    Its cost is flat up to tens of rows (measured: Gemma 3's 262144x640 head ~16 ms at M = 1 to 16).
    """
    m = x.shape[0]
    q, s = split_int8(x)
    acc = torch._int_mm(q, w.qweight.t())
    y = acc[:m] * s[:m]
    y += acc[m:] * s[m:]
    return y * w.scales.to(torch.float32)
