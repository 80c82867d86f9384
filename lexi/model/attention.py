"""Self-attention of one layer over the paged KV cache."""

from __future__ import annotations

import torch
from torch import nn

from lexi.kernels.paged_attention import AttentionMetadata, paged_attention, write_kv
from lexi.model.linear import QuantLinear
from lexi.model.norms import RMSNorm
from lexi.model.rope import RopeTable, apply_rope


class Attention(nn.Module):
    """q/k/v projections (+ qwen2 biases), per-head q/k norms (qwen3, gemma3), rope, paged attention, output."""

    def __init__(
        self,
        wq: QuantLinear,
        wk: QuantLinear,
        wv: QuantLinear,
        wo: QuantLinear,
        *,
        n_heads: int,
        n_kv_heads: int,
        head_dim: int,
        rope_dim: int,
        rope_style: str,
        scale: float,
        sliding_window: int = 0,
        softcap: float = 0.0,
        q_norm: RMSNorm | None = None,
        k_norm: RMSNorm | None = None,
    ) -> None:
        super().__init__()
        self.wq, self.wk, self.wv, self.wo = wq, wk, wv, wo
        self.q_norm, self.k_norm = q_norm, k_norm
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, head_dim
        self.rope_dim, self.rope_style = rope_dim, rope_style
        self.scale, self.sliding_window, self.softcap = scale, sliding_window, softcap

    def forward(
        self,
        x: torch.Tensor,
        rope: RopeTable,
        meta: AttentionMetadata,
        cache: tuple[torch.Tensor, torch.Tensor],
    ) -> torch.Tensor:
        t = x.shape[0]
        q = self.wq(x).view(t, self.n_heads, self.head_dim)
        k = self.wk(x).view(t, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(t, self.n_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q = self.q_norm(q)
        if self.k_norm is not None:
            k = self.k_norm(k)
        q = apply_rope(q, rope, self.rope_style, self.rope_dim)
        k = apply_rope(k, rope, self.rope_style, self.rope_dim)
        k_cache, v_cache = cache
        write_kv(k, v, k_cache, v_cache, meta.slot_mapping)
        o = paged_attention(
            q, k_cache, v_cache, meta, scale=self.scale, sliding_window=self.sliding_window, softcap=self.softcap
        )
        return self.wo(o.reshape(t, self.n_heads * self.head_dim))

    def extra_repr(self) -> str:
        h = f"heads={self.n_heads}, kv_heads={self.n_kv_heads}, head_dim={self.head_dim}"
        return f"{h}, window={self.sliding_window}"
