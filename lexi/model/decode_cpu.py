"""The CPU decode step as one lean loop over plain tensors: the same math as the modules, fewer calls.

A decode step of a small model is mostly fixed cost per op: measured on 2 cores, SmolLM2's 30 layers took
13.3 ms a token through the nn.Module tree against 8.6 ms for the same ops in one function over plain tensors
(module calls, attribute lookups, shape checks and no-op casts add up over ~1500 calls a token). So steps where
every sequence adds one token, few enough for the decode copies of the weights (lexi/model/fast_weights.py),
run here; every other step runs the modules. Both paths share the math helpers (`rms_norm`, `apply_rope`,
`fast_mm`, `decode_attention`), and tests/model/test_fidelity.py holds each to the float32 path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from lexi.kernels.paged_attention_cpu import decode_attention
from lexi.model.fast_weights import FastWeight, fast_mm
from lexi.model.linear import fast_max_rows
from lexi.model.norms import rms_norm
from lexi.model.rope import apply_rope

if TYPE_CHECKING:
    from lexi.model.step import StepPlan
    from lexi.model.transformer import Block


@dataclass(frozen=True, slots=True)
class DecodeLayer:
    """What one layer's decode step reads: norm weights (float32) and the decode copies of its matmuls."""

    attn_norm: torch.Tensor
    qkv: FastWeight  # q, k, v stacked along N
    qkv_bias: torch.Tensor | None
    qk_norm: torch.Tensor | None  # (H + KVH, head_dim): q heads' then k heads' norm weights
    wo: FastWeight
    post_attn_norm: torch.Tensor | None
    ffn_norm: torch.Tensor
    gate_up: FastWeight  # gate and up stacked along N
    down: FastWeight
    post_ffn_norm: torch.Tensor | None
    window: int  # sliding window, 0 = global


@dataclass(frozen=True, slots=True)
class DecodeStack:
    layers: tuple[DecodeLayer, ...]
    eps: float
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rope_dim: int
    rope_style: str
    scale: float
    ffn_dim: int
    gelu: bool  # gemma's tanh GELU, else SiLU
    dtype: torch.dtype  # the matmuls' input dtype
    max_rows: int  # steps with more rows than this run the modules (dense GEMMs win there)

    @classmethod
    def from_blocks(cls, blocks: list[Block], dtype: torch.dtype) -> DecodeStack | None:
        """The lean view of the layers, or None when a layer lacks a decode copy or uses attention softcapping."""
        layers, limits = [], []
        for b in blocks:
            a, m = b.attn, b.mlp
            if a.qkv is None or m.gate_up is None or a.wo.fast is None or m.down.fast is None or a.softcap:
                return None
            post_a, post_f = b.post_attn_norm, b.post_ffn_norm
            layers.append(
                DecodeLayer(
                    attn_norm=b.attn_norm.weight,
                    qkv=a.qkv.weight,
                    qkv_bias=a.qkv.bias,
                    qk_norm=None if a.qk_norm is None else a.qk_norm.weight,
                    wo=a.wo.fast,
                    post_attn_norm=None if post_a is None else post_a.weight,
                    ffn_norm=b.ffn_norm.weight,
                    gate_up=m.gate_up.weight,
                    down=m.down.fast,
                    post_ffn_norm=None if post_f is None else post_f.weight,
                    window=a.sliding_window,
                )
            )
            limits += [fast_max_rows(w) for w in (a.qkv.weight, a.wo.fast, m.gate_up.weight, m.down.fast)]
        a0 = blocks[0].attn
        return cls(
            tuple(layers),
            blocks[0].attn_norm.eps,
            a0.n_heads,
            a0.n_kv_heads,
            a0.head_dim,
            a0.rope_dim,
            a0.rope_style,
            a0.scale,
            blocks[0].mlp.gate.out_features,
            blocks[0].mlp.activation == "gelu_tanh",
            dtype,
            min(limits),
        )


def run_decode(
    stack: DecodeStack, x: torch.Tensor, plan: StepPlan, slot_mapping: torch.Tensor, kv_cache
) -> torch.Tensor:
    """x (B, dim) float32, one new token per sequence -> x after every layer."""
    s = stack
    b, h, kvh, d, eps, dt = x.shape[0], s.n_heads, s.n_kv_heads, s.head_dim, s.eps, s.dtype
    qk_cols = (h + kvh) * d
    for layer, (k_cache, v_cache) in zip(s.layers, kv_cache, strict=True):
        qkv = fast_mm(rms_norm(x, layer.attn_norm, eps, dt), layer.qkv)
        if layer.qkv_bias is not None:
            qkv = qkv + layer.qkv_bias
        qk = qkv[:, :qk_cols].view(b, h + kvh, d)
        if layer.qk_norm is not None:
            qk = rms_norm(qk, layer.qk_norm, eps, torch.float32)
        rope = plan.rope_local if layer.window else plan.rope_global
        qk = apply_rope(qk, rope, s.rope_style, s.rope_dim)
        if qk.dtype != dt:
            qk = qk.to(dt)
        k_cache.view(-1, kvh, d).index_copy_(0, slot_mapping, qk[:, h:])
        v_cache.view(-1, kvh, d).index_copy_(0, slot_mapping, qkv[:, qk_cols:].view(b, kvh, d))
        o = decode_attention(qk[:, :h], k_cache, v_cache, plan.decode, scale=s.scale, sliding_window=layer.window)
        o = fast_mm(o.reshape(b, h * d), layer.wo)
        if layer.post_attn_norm is not None:
            o = rms_norm(o, layer.post_attn_norm, eps, torch.float32)
        x = x + o
        gu = fast_mm(rms_norm(x, layer.ffn_norm, eps, dt), layer.gate_up)
        g, u = gu[:, : s.ffn_dim], gu[:, s.ffn_dim :]
        g = F.gelu(g, approximate="tanh") if s.gelu else F.silu(g)
        y = fast_mm(g * u, layer.down)
        if layer.post_ffn_norm is not None:
            y = rms_norm(y, layer.post_ffn_norm, eps, torch.float32)
        x = x + y
    return x
