"""The output layer: final hidden states -> float32 logits over the vocabulary.

It is the largest matrix a decode step reads (SmolLM2's tied 49152x576, Gemma 3's 262144x640: 113 MB and
670 MB as float32), so its form decides much of a small model's decode speed. Three forms:
  - dense, in the head's dtype (float32 on a CPU float32 load; quantized blocks on CUDA),
  - estimate, then rescore (CPU bfloat16 loads of a quantized head): every logit is first estimated from a
    compact copy, then each row's RESCORE highest are recomputed in float32 from the file's own blocks, so the
    argmax, and every token a top-k of up to RESCORE keeps, see the file's exact weights. The estimate:
      - up to INT4_ROWS rows: an int4 copy (asymmetric per 32 weights) through torch's int4 matmul, a quarter
        of float32's bytes (Gemma 3: 84 MB instead of 670 MB a token); its logits are off by 0.3-0.4 on average,
      - more rows, or --deterministic: an int8 copy (per-row scale) with the activations split into two int8
        terms and exact int32 sums (`lexi.kernels.int8_cpu.int8_dynamic_mm`), flat in cost up to tens of rows
        and row-independent by construction; its logits are off by ~0.06 on average.
    Measured over 256 teacher-forced positions of each bundled model: the float32 argmax was always among the
    estimate's 8 best, and rescored top-1 agreement with float32 is 100% with either estimate. Logits below
    the RESCORE best keep the estimate's error (sampling with top_k = 0 sees it in the tail).
"""

from __future__ import annotations

import torch
from torch import nn

from lexi.gguf.dequant import dequantize
from lexi.kernels.int4_cpu import Int4Weight, int4_mm, int4_supported, quantize_int4
from lexi.kernels.int8_cpu import Int8Weight, int8_dynamic_mm
from lexi.model.linear import QuantLinear

RESCORE = 64  # logits per row recomputed exactly (top-k of 262144: ~0.6 ms a row on 2 cores)
INT4_ROWS = 4  # rows up to which the int4 estimate is used (int4 cost grows with rows; int8's is flat)


_ROWS_PER_PIECE = 16384  # a multiple of 64 (see Int4Weight.cat): a Gemma 3 piece is 42 MB as float32


def head_copies(info) -> tuple[Int8Weight, Int4Weight | None]:
    """The int8 and int4 estimates of a quantized head (TensorInfo), built a piece of rows at a time so the
    whole float32 matrix (670 MB for Gemma 3) never exists at once."""
    n, k = (int(s) for s in info.shape)
    int8, int4 = [], []
    for a in range(0, n, _ROWS_PER_PIECE):
        b = min(n, a + _ROWS_PER_PIECE)
        exact = dequantize(info.data[a:b], info.qtype, (b - a, k))
        int8.append(Int8Weight.from_dense(exact, torch.float32))
        if int4_supported():
            int4.append(quantize_int4(exact))
    return Int8Weight.cat(int8), Int4Weight.cat(int4) if int4 else None


class OutputHead(nn.Module):
    """h (R, dim) -> logits (R, vocab) float32, through the int8 copy when there is one, else `dense`."""

    def __init__(
        self,
        dense: QuantLinear | None,
        int8: Int8Weight | None = None,
        blocks: torch.Tensor | None = None,
        qtype=None,
        int4: Int4Weight | None = None,
    ) -> None:
        """`blocks` (vocab, bytes_per_row) uint8 and `qtype`: the file's own rows, for rescoring the estimates;
        `int4`: the estimate for up to INT4_ROWS rows (else the int8 one serves every row count)."""
        super().__init__()
        if (dense is None) == (int8 is None):
            raise ValueError("OutputHead needs exactly one of a dense layer and an int8 weight")
        if int8 is not None and (blocks is None or qtype is None):
            raise ValueError("an int8 head needs the file's blocks and their type, to rescore its best logits")
        self.dense = dense
        self.int8 = int8
        self.blocks, self.qtype = blocks, qtype
        self.int4 = int4
        shape = int8.shape if int8 is not None else (dense.out_features, dense.in_features)
        self.out_features, self.in_features = shape

    def forward(self, h: torch.Tensor, force_fast: bool = False) -> torch.Tensor:
        if self.int8 is not None:
            if self.int4 is not None and not force_fast and h.shape[0] <= INT4_ROWS:
                estimate = int4_mm(h.to(torch.bfloat16), self.int4).to(torch.float32)
            else:
                estimate = int8_dynamic_mm(h, self.int8)
            return self._rescored(h, estimate)
        d = self.dense
        # Logits are computed from float32 inputs (quantized head) or in the dense head's own dtype (float32
        # on a CPU): a bfloat16 result would round logits near 20 to steps of 0.125.
        h = h.to(torch.float32 if d.qweight is not None else d.weight.dtype)
        return d(h, force_fast=force_fast).to(torch.float32)

    def _rescored(self, h: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """Replace each row's RESCORE highest logits by x . w in float32 over the exactly dequantized file rows.

        Elementwise products and a sum over the last dim: each row's result depends on that row alone.
        """
        k = min(RESCORE, logits.shape[1])
        if logits.shape[0] == 0:
            return logits
        ids = logits.topk(k, dim=-1).indices  # (R, k)
        rows = dequantize(self.blocks.index_select(0, ids.flatten()), self.qtype, (ids.numel(), self.in_features))
        exact = (rows.view(*ids.shape, -1) * h.to(torch.float32)[:, None, :]).sum(-1)
        return logits.scatter_(1, ids, exact)

    def extra_repr(self) -> str:
        kind = "dense"
        if self.int8 is not None:
            kind = f"int4 up to {INT4_ROWS} rows, else int8; best {RESCORE} rescored from the file's rows"
        return f"in={self.in_features}, out={self.out_features}, {kind}"
