"""`Block`: one decoder layer, attention then the FFN, each behind its norm and added to the residual stream."""

from __future__ import annotations

import torch
from torch import nn

from lexi.kernels.paged_attention import AttentionMetadata
from lexi.model.attention import Attention
from lexi.model.mlp import GatedMLP
from lexi.model.moe import MoEFFN
from lexi.model.norms import RMSNorm
from lexi.model.step import StepPlan


class Block(nn.Module):
    """Pre-norm residual block; gemma3 adds norms on the attention and MLP outputs (sandwich norms).

    The residual stream x may be wider than the compute dtype (float32 on a CPU): the norms then read it as
    it is and hand the matmuls `dtype`, and each block's output is added at full precision.
    """

    def __init__(
        self,
        attn_norm: RMSNorm,
        attn: Attention,
        ffn_norm: RMSNorm,
        mlp: GatedMLP | MoEFFN,
        post_attn_norm: RMSNorm | None = None,
        post_ffn_norm: RMSNorm | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.attn_norm, self.attn, self.ffn_norm, self.mlp = attn_norm, attn, ffn_norm, mlp
        self.post_attn_norm, self.post_ffn_norm = post_attn_norm, post_ffn_norm
        self.dtype = dtype  # the matmuls' input dtype; None: the residual stream's

    def forward(
        self, x: torch.Tensor, plan: StepPlan, meta: AttentionMetadata, cache: tuple[torch.Tensor, torch.Tensor]
    ) -> torch.Tensor:
        h = self.attn(self.attn_norm(x, self.dtype), plan, meta, cache)
        if self.post_attn_norm is not None:
            h = self.post_attn_norm(h, x.dtype)
        x = x + h
        h = self.mlp(self.ffn_norm(x, self.dtype), plan.deterministic)
        if self.post_ffn_norm is not None:
            h = self.post_ffn_norm(h, x.dtype)
        return x + h
