"""Rotary position embedding in the two layouts GGUF files use.

llama.cpp's converter permutes the q/k rows of llama-family models so that rotated pairs are adjacent
("norm" style: dims 2i and 2i+1); qwen2, qwen3 and gemma3 keep the halves layout ("neox": dims i and
i + d/2). Rotating the stored weights in their own layout gives the same attention scores as
transformers' un-permuted weights, because q.k is unchanged when both are permuted alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

ROPE_CHUNK = 1024  # positions per computed piece of a RopeCache (a multiple of every SIMD width)


@dataclass(frozen=True, slots=True)
class RopeTable:
    """The rotation of this step's T positions, shared by every layer that uses it.

    `cos_full` and `sin_signed` (T, 1, rope_dim) float32 spread cos and sin over both members of each rotated
    pair, in the table's own layout, so rotating is x * cos_full + partner(x) * sin_signed.
    """

    cos_full: torch.Tensor
    sin_signed: torch.Tensor
    style: str


def inverse_frequencies(rope_dim: int, base: float, freq_factors: torch.Tensor | None = None) -> torch.Tensor:
    """base^(-2i/d) for i < d/2 (transformers' float32 formula), divided by llama 3's per-dim factors if any."""
    inv = 1.0 / (base ** (torch.arange(0, rope_dim, 2, dtype=torch.int64).to(torch.float32) / rope_dim))
    if freq_factors is not None:
        inv = inv / freq_factors.to(torch.float32)
    return inv


def yarn_frequencies(
    inv_freq: torch.Tensor, base: float, factor: float, orig_ctx: int, beta_fast: float = 32.0, beta_slow: float = 1.0,
    attn_factor: float = 1.0,
) -> tuple[torch.Tensor, float]:  # fmt: skip
    """YaRN as ggml computes it (ggml_rope_yarn_corr_dims, rope_yarn): (the blended inverse frequencies, mscale).

    Dims i (of d/2 pairs) below the fast boundary keep their frequency (extrapolation), those above the slow one are
    divided by `factor` (interpolation), with a linear ramp between; cos and sin are then multiplied by
    mscale = attn_factor * (1 + 0.1 ln factor). Position-linear, so it folds into the frequencies once.
    """
    rope_dim = 2 * inv_freq.numel()

    def corr_dim(n_rot: float) -> float:
        return rope_dim * math.log(orig_ctx / (n_rot * 2 * math.pi)) / (2 * math.log(base))

    low = max(0.0, math.floor(corr_dim(beta_fast)))
    high = min(rope_dim - 1.0, math.ceil(corr_dim(beta_slow)))
    i = torch.arange(inv_freq.numel(), dtype=torch.float32)
    ramp = 1.0 - ((i - low) / max(0.001, high - low)).clamp(0.0, 1.0)  # 1 = extrapolate, 0 = interpolate
    blended = inv_freq * ((1.0 / factor) * (1.0 - ramp) + ramp)
    return blended, attn_factor * (1.0 + 0.1 * math.log(factor))


def _spread(cos: torch.Tensor, sin: torch.Tensor, style: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(T, d/2) cos and sin -> (T, d) cos_full and sin_signed in the style's pair layout."""
    if style == "neox":  # pairs (i, i + d/2): [a, b] -> [a cos - b sin, b cos + a sin]
        return torch.cat((cos, cos), dim=-1), torch.cat((-sin, sin), dim=-1)
    return torch.stack((cos, cos), dim=-1).flatten(-2), torch.stack((-sin, sin), dim=-1).flatten(-2)


def rope_table(
    positions: torch.Tensor, inv_freq: torch.Tensor, scale: float = 1.0, style: str = "neox", mscale: float = 1.0
) -> RopeTable:
    """Angles p * scale * inv_freq; `scale` < 1 is linear position interpolation; cos and sin times `mscale` (YaRN)."""
    pos = positions.to(torch.float32)
    if scale != 1.0:
        pos = pos * scale
    angles = pos[:, None] * inv_freq.to(pos.device)[None, :]
    cos, sin = torch.cos(angles), torch.sin(angles)
    if mscale != 1.0:
        cos, sin = cos * mscale, sin * mscale
    cos_full, sin_signed = _spread(cos, sin, style)
    return RopeTable(cos_full[:, None, :], sin_signed[:, None, :], style)


class RopeCache:
    """The rotation of every position, computed once in pieces of ROPE_CHUNK positions and looked up per step.

    Why a cache: a lookup is two index_selects per step instead of cos, sin and the spreading ops; and it
    makes a position's rotation independent of the batch it is in. Vectorized cos/sin and their scalar tail
    loop may round differently, so computing a step's positions together would let the same position get a
    different rotation when it falls in a different place of the batch; here it is always computed at the
    same place of the same piece.
    """

    def __init__(self, inv_freq: torch.Tensor, scale: float, style: str, mscale: float = 1.0) -> None:
        self.inv_freq, self.scale, self.style, self.mscale = inv_freq, scale, style, mscale
        width = 2 * inv_freq.numel()
        self.cos_full = torch.empty(0, width, device=inv_freq.device)
        self.sin_signed = torch.empty(0, width, device=inv_freq.device)

    def _grow(self, positions_needed: int) -> None:
        pieces_c, pieces_s = [self.cos_full], [self.sin_signed]
        start = self.cos_full.shape[0]
        while start < positions_needed:
            pos = torch.arange(start, start + ROPE_CHUNK, device=self.inv_freq.device)
            t = rope_table(pos, self.inv_freq, self.scale, self.style, self.mscale)
            pieces_c.append(t.cos_full[:, 0])
            pieces_s.append(t.sin_signed[:, 0])
            start += ROPE_CHUNK
        self.cos_full, self.sin_signed = torch.cat(pieces_c), torch.cat(pieces_s)

    def table(self, positions: torch.Tensor, max_position: int) -> RopeTable:
        """The RopeTable of `positions` (T,), all of which are <= max_position."""
        if max_position >= self.cos_full.shape[0]:
            self._grow(max_position + 1)
        cos = self.cos_full.index_select(0, positions)
        sin = self.sin_signed.index_select(0, positions)
        return RopeTable(cos[:, None, :], sin[:, None, :], self.style)


def _partner(x: torch.Tensor, style: str) -> torch.Tensor:
    """Each element's rotation partner: [b, a] for neox halves, (b, a) within each adjacent pair otherwise."""
    if style == "neox":
        return x.roll(x.shape[-1] // 2, dims=-1)
    return x.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)


def apply_rope(x: torch.Tensor, table: RopeTable, style: str, rope_dim: int) -> torch.Tensor:
    """Rotate the first `rope_dim` dims of each head of x (T, H, D); math in float32, result in x's dtype.

    Per pair (a, b): (a cos - b sin, b cos + a sin), written as x * cos + partner(x) * (-sin, +sin): the same
    products and one addition per element, so the result is bit for bit the textbook formula.
    """
    if style != table.style:
        raise ValueError(f"the table was built for {table.style!r} rope, not {style!r}")
    rot = x if rope_dim == x.shape[-1] else x[..., :rope_dim]
    # Products with the float32 tables promote bfloat16 inputs exactly, so no cast is needed first. Not addcmul:
    # its fused multiply-add rounds once where the formula rounds twice (1 ulp apart).
    out = rot * table.cos_full + _partner(rot, style) * table.sin_signed
    out = out if out.dtype == x.dtype else out.to(x.dtype)
    if rope_dim == x.shape[-1]:
        return out
    return torch.cat((out, x[..., rope_dim:]), dim=-1)
