"""Rotary position embedding in the two layouts GGUF files use.

llama.cpp's converter permutes the q/k rows of llama-family models so that rotated pairs are adjacent
("norm" style: dims 2i and 2i+1); qwen2, qwen3 and gemma3 keep the halves layout ("neox": dims i and
i + d/2). Rotating the stored weights in their own layout gives the same attention scores as
transformers' un-permuted weights, because q.k is unchanged when both are permuted alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class RopeTable:
    """cos and sin (T, rope_dim/2) float32 for this step's positions, shared by every layer that uses them."""

    cos: torch.Tensor
    sin: torch.Tensor


def inverse_frequencies(rope_dim: int, base: float, freq_factors: torch.Tensor | None = None) -> torch.Tensor:
    """base^(-2i/d) for i < d/2 (transformers' float32 formula), divided by llama 3's per-dim factors if any."""
    inv = 1.0 / (base ** (torch.arange(0, rope_dim, 2, dtype=torch.int64).to(torch.float32) / rope_dim))
    if freq_factors is not None:
        inv = inv / freq_factors.to(torch.float32)
    return inv


def rope_table(positions: torch.Tensor, inv_freq: torch.Tensor, scale: float = 1.0) -> RopeTable:
    """Angles p * scale * inv_freq; `scale` < 1 is linear position interpolation."""
    pos = positions.to(torch.float32)
    if scale != 1.0:
        pos = pos * scale
    angles = pos[:, None] * inv_freq.to(pos.device)[None, :]
    return RopeTable(torch.cos(angles), torch.sin(angles))


def apply_rope(x: torch.Tensor, table: RopeTable, style: str, rope_dim: int) -> torch.Tensor:
    """Rotate the first `rope_dim` dims of each head of x (T, H, D); math in float32, result in x's dtype."""
    rot = x[..., :rope_dim].to(torch.float32)
    cos, sin = table.cos[:, None, :], table.sin[:, None, :]
    if style == "neox":
        half = rope_dim // 2
        a, b = rot[..., :half], rot[..., half:]
        out = torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)
    else:
        a, b = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2)
    out = out.to(x.dtype)
    if rope_dim == x.shape[-1]:
        return out
    return torch.cat((out, x[..., rope_dim:]), dim=-1)
