"""The CPU decode step as one lean loop over plain tensors: the same math as the modules, fewer calls.

A decode step of a small model is mostly fixed cost per op: measured on 2 cores, SmolLM2's 30 layers took
13.3 ms a token through the nn.Module tree against 8.6 ms for the same ops in one function over plain tensors
(module calls, attribute lookups, shape checks and no-op casts add up over ~1500 calls a token). So steps where
every sequence adds one token, or a few (a speculative draft's positions; paged_attention_cpu.DecodeBatch), run
here when every layer's matmuls are on the CPU kernels; every other step runs the modules. Both paths share the
math helpers (`rms_norm`, `apply_rope`, `cpu_qmatmul`, `decode_attention`), so a row's result is the same either
way, and tests/model/test_fidelity.py holds both to the float32 path.
Where the C kernels can run the whole step (lexi/model/decode_c.py: one call for every layer, 3x faster again on
SmolLM2), this loop is their reference in tests and the path of what they do not take (a float16 cache).
A mixture-of-experts layer's FFN (`MoEFFN`) is called as the module it is: its router and the fused MoE do their
own work per step, and the loop's overhead is small beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from lexi.kernels.cpu_qmatmul import CpuKernels, CpuWeight, cpu_qmatmul
from lexi.kernels.paged_attention_cpu import decode_attention
from lexi.model.mlp import GatedMLP, gated
from lexi.model.moe import MoEFFN
from lexi.model.norms import rms_norm
from lexi.model.rope import apply_rope

if TYPE_CHECKING:
    from lexi.model.block import Block
    from lexi.model.step import StepPlan


@dataclass(frozen=True, slots=True)
class DecodeLayer:
    """What one layer's decode step reads: norm weights (float32) and its matmuls' CPU-kernel weights."""

    attn_norm: torch.Tensor
    qkv: tuple[CpuWeight, ...]  # q, k, v, multiplied in one call
    qkv_bias: torch.Tensor | None
    qk_norm: torch.Tensor | None  # (H + KVH, head_dim): q heads' then k heads' norm weights
    wo: CpuWeight
    wo_bias: torch.Tensor | None  # gpt-oss
    sinks: torch.Tensor | None  # (H,) float32 attention sink logits (gpt-oss)
    post_attn_norm: torch.Tensor | None
    ffn_norm: torch.Tensor
    gate_up: tuple[CpuWeight, ...]  # empty with `moe`
    down: CpuWeight | None  # None with `moe`
    moe: MoEFFN | None  # a mixture-of-experts FFN in place of gate_up/down
    post_ffn_norm: torch.Tensor | None
    window: int  # sliding window, 0 = global


@dataclass(frozen=True, slots=True)
class DecodeStack:
    layers: tuple[DecodeLayer, ...]
    kernels: CpuKernels
    eps: float
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rope_dim: int
    rope_style: str
    scale: float
    ffn_dim: int  # the dense layers' FFN width (0 when every layer is MoE)
    activation: str

    @classmethod
    def from_blocks(cls, blocks: list[Block]) -> DecodeStack | None:
        """The lean view of the layers, or None when a layer's matmuls are not all on the CPU kernels, or a dense
        layer has FFN biases, or attention softcapping (the modules handle those)."""
        layers = []
        dense = next((b.mlp for b in blocks if isinstance(b.mlp, GatedMLP)), None)
        for b in blocks:
            a, m = b.attn, b.mlp
            moe = m if isinstance(m, MoEFFN) else None
            if a.qkv is None or a.wo.cpu is None or a.softcap:
                return None
            if moe is None and (m.gate_up is None or m.down.cpu is None):
                return None
            if moe is None and (m.down.bias is not None or m.gate_up.bias is not None):
                return None
            post_a, post_f = b.post_attn_norm, b.post_ffn_norm
            layers.append(
                DecodeLayer(
                    attn_norm=b.attn_norm.weight,
                    qkv=tuple(a.qkv.weights),
                    qkv_bias=a.qkv.bias,
                    qk_norm=None if a.qk_norm is None else a.qk_norm.weight,
                    wo=a.wo.cpu[0],
                    wo_bias=a.wo.bias,
                    sinks=a.sinks,
                    post_attn_norm=None if post_a is None else post_a.weight,
                    ffn_norm=b.ffn_norm.weight,
                    gate_up=() if moe else tuple(m.gate_up.weights),
                    down=None if moe else m.down.cpu[0],
                    moe=moe,
                    post_ffn_norm=None if post_f is None else post_f.weight,
                    window=a.sliding_window,
                )
            )
        a0 = blocks[0].attn
        return cls(
            tuple(layers),
            a0.qkv.kernels,
            blocks[0].attn_norm.eps,
            a0.n_heads,
            a0.n_kv_heads,
            a0.head_dim,
            a0.rope_dim,
            a0.rope_style,
            a0.scale,
            0 if dense is None else dense.gate.out_features,
            "silu" if dense is None else dense.activation,
        )


def run_decode(
    stack: DecodeStack, x: torch.Tensor, plan: StepPlan, slot_mapping: torch.Tensor, kv_cache
) -> torch.Tensor:
    """x (T, dim) float32, the step's new rows (1 to SHORT_STEP_ROWS a sequence) -> x after every layer."""
    s, kern = stack, stack.kernels
    b, h, kvh, d, eps = x.shape[0], s.n_heads, s.n_kv_heads, s.head_dim, s.eps
    qk_cols = (h + kvh) * d
    for layer, (k_cache, v_cache) in zip(s.layers, kv_cache, strict=True):
        qkv = cpu_qmatmul(rms_norm(x, layer.attn_norm, eps), layer.qkv, kern)
        if layer.qkv_bias is not None:
            qkv = qkv + layer.qkv_bias
        qk = qkv[:, :qk_cols].view(b, h + kvh, d)
        if layer.qk_norm is not None:
            qk = rms_norm(qk, layer.qk_norm, eps)
        rope = plan.rope_local if layer.window else plan.rope_global
        qk = apply_rope(qk, rope, s.rope_style, s.rope_dim).to(k_cache.dtype)
        k_cache.view(-1, kvh, d).index_copy_(0, slot_mapping, qk[:, h:])
        v_cache.view(-1, kvh, d).index_copy_(0, slot_mapping, qkv[:, qk_cols:].reshape(b, kvh, d).to(v_cache.dtype))
        o = decode_attention(
            qk[:, :h], k_cache, v_cache, plan.decode, scale=s.scale, sliding_window=layer.window, sinks=layer.sinks
        )
        o = cpu_qmatmul(o.reshape(b, h * d), [layer.wo], kern)
        if layer.wo_bias is not None:
            o = o + layer.wo_bias
        if layer.post_attn_norm is not None:
            o = rms_norm(o, layer.post_attn_norm, eps)
        x = x + o
        xn = rms_norm(x, layer.ffn_norm, eps)
        if layer.moe is not None:
            y = layer.moe(xn)
        else:
            gu = cpu_qmatmul(xn, layer.gate_up, kern)
            y = cpu_qmatmul(gated(gu[:, : s.ffn_dim], gu[:, s.ffn_dim :], s.activation), [layer.down], kern)
        if layer.post_ffn_norm is not None:
            y = rms_norm(y, layer.post_ffn_norm, eps)
        x = x + y
    return x
