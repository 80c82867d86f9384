"""Self-attention of one layer over the paged KV cache."""

from __future__ import annotations

import torch
from torch import nn

from lexi.kernels.paged_attention import AttentionMetadata, paged_attention, write_kv
from lexi.kernels.paged_attention_cpu import attention_rowwise, decode_attention
from lexi.model.linear import FusedLinear, QuantLinear
from lexi.model.norms import RMSNorm
from lexi.model.rope import apply_rope
from lexi.model.step import StepPlan


class Attention(nn.Module):
    """q/k/v projections (+ qwen2/gpt-oss biases), per-head q/k norms (qwen3, gemma3), rope, paged attention (with
    gpt-oss's sinks), output.

    `qkv` (CPU kernels) multiplies the three projections in one call; q, k and v then come out float32, and q is
    cast to the cache's dtype for attention.
    """

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
        qkv: FusedLinear | None = None,
        sinks: torch.Tensor | None = None,
        kernels: str = "auto",
    ) -> None:
        super().__init__()
        self.wq, self.wk, self.wv, self.wo = wq, wk, wv, wo
        self.q_norm, self.k_norm = q_norm, k_norm
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, head_dim
        self.rope_dim, self.rope_style = rope_dim, rope_style
        self.scale, self.sliding_window, self.softcap = scale, sliding_window, softcap
        self.qkv = qkv
        # gpt-oss: one learned logit per head that joins the softmax (float32, (H,)); None elsewhere.
        self.sinks = None if sinks is None else nn.Parameter(sinks.to(torch.float32).contiguous(), requires_grad=False)
        self.kernels = kernels  # paged attention implementations: auto | triton | reference (kernels/backend.py)
        self.qk_norm: RMSNorm | None = None
        if q_norm is not None and k_norm is not None:
            # q and k heads normed in one call: each head row gets its own projection's weight.
            w = torch.cat([q_norm.weight.expand(n_heads, -1), k_norm.weight.expand(n_kv_heads, -1)])
            self.qk_norm = RMSNorm(w, q_norm.eps)

    def forward(
        self,
        x: torch.Tensor,
        plan: StepPlan,
        meta: AttentionMetadata,
        cache: tuple[torch.Tensor, torch.Tensor],
    ) -> torch.Tensor:
        t, h, kvh, d = x.shape[0], self.n_heads, self.n_kv_heads, self.head_dim
        rope = plan.rope_local if self.sliding_window else plan.rope_global
        if self.qkv is not None:
            stacked = self.qkv(x)
            # q and k heads are adjacent columns: norm and rotate them in one go, as (T, H + KVH, D).
            qk = stacked[:, : (h + kvh) * d].view(t, h + kvh, d)
            if self.qk_norm is not None:
                qk = self.qk_norm(qk)
            qk = apply_rope(qk, rope, self.rope_style, self.rope_dim)
            q, k, v = qk[:, :h], qk[:, h:], stacked[:, (h + kvh) * d :]
        else:
            force = plan.deterministic
            q = self.wq(x, force).view(t, h, d)
            k = self.wk(x, force).view(t, kvh, d)
            v = self.wv(x, force)
            if self.q_norm is not None:
                q = self.q_norm(q)
            if self.k_norm is not None:
                k = self.k_norm(k)
            q = apply_rope(q, rope, self.rope_style, self.rope_dim)
            k = apply_rope(k, rope, self.rope_style, self.rope_dim)
        k_cache, v_cache = cache
        q = q.to(k_cache.dtype)
        write_kv(k.to(k_cache.dtype), v.reshape(t, kvh, d).to(k_cache.dtype), k_cache, v_cache, meta.slot_mapping)
        kwargs = {"scale": self.scale, "sliding_window": self.sliding_window, "sinks": self.sinks}
        if plan.deterministic and q.device.type == "cpu" and self.kernels != "triton":
            o = attention_rowwise(q, k_cache, v_cache, meta, softcap=self.softcap, **kwargs)
        elif plan.decode is not None and self.softcap == 0.0:
            o = decode_attention(q, k_cache, v_cache, plan.decode, **kwargs)
        else:
            q = q.contiguous()
            o = paged_attention(q, k_cache, v_cache, meta, softcap=self.softcap, kernels=self.kernels, **kwargs)
        return self.wo(o.reshape(t, h * d), plan.deterministic)

    def extra_repr(self) -> str:
        h = f"heads={self.n_heads}, kv_heads={self.n_kv_heads}, head_dim={self.head_dim}"
        sinks = f", sinks={self.sinks is not None}"
        return f"{h}, window={self.sliding_window}, fused_qkv={self.qkv is not None}{sinks}, kernels={self.kernels}"
