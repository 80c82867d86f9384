"""A layer's mixture-of-experts FFN over GGUF expert blocks: `fused_moe` picks the implementation.

- ``ref``  (`fused_moe_ref`): only the chosen experts, dequantized one at a time and batched over the rows that
  share them; the CPU path and the yardstick.
- ``gemv`` (`fused_moe_triton`, decode, T <= 16): one block per used expert, each expert's weights read once.
- ``gemm`` (`fused_moe_triton`, prefill): a grouped GEMM over tokens sorted by expert, tl.dot tiles.

The router is the caller's: it passes each token's k expert ids and their weights (softmax over the chosen
logits or over all of them, normalised or not, as the family does). As with `qmatmul`, Triton on CPU tensors is
Triton's interpreter, where few large programs run fastest: `interpreter_moe_tiles` picks them. The Triton module
is imported only when a Triton variant runs.
"""

from __future__ import annotations

from typing import Literal

import torch

from lexi.kernels.fused_moe_ref import fused_moe_ref
from lexi.kernels.moe_types import GEMV_MAX_TOKENS, ExpertFFN

MoEVariant = Literal["ref", "gemv", "gemm"]


def choose_moe_variant(x: torch.Tensor, kernels: str = "auto") -> MoEVariant:
    """The reference for kernels "reference" (and for "auto" off CUDA), else a Triton form by token count."""
    if kernels == "reference" or (kernels == "auto" and x.device.type != "cuda"):
        return "ref"
    return "gemv" if x.shape[0] <= GEMV_MAX_TOKENS else "gemm"


def interpreter_moe_tiles(variant: MoEVariant, n_tokens: int, ffn: ExpertFFN) -> dict[str, int]:
    """Tiles for Triton's interpreter, where a program's cost is mostly dequantizing its weight tiles: a whole
    expert width per program where it fits (2^16 weight elements a tile; gate/up dequantize two), the GEMV form's
    BLOCK_M as on a GPU, 64-row GEMM blocks (the padding rows cost less than more programs would)."""
    widest = max(ffn.dim, ffn.ffn_dim)
    block_k = min(_pow2(min(ffn.dim, ffn.ffn_dim)), 128)
    block_n = max(16, min(_pow2(widest), (1 << 16) // block_k))
    block_m = (_pow2(n_tokens) if n_tokens <= 4 else 16) if variant == "gemv" else 64
    return {"block_m": block_m, "block_n": block_n, "block_k": block_k}


def _pow2(v: int) -> int:
    return 1 << max(0, v - 1).bit_length()


def fused_moe(
    x: torch.Tensor, ffn: ExpertFFN, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
    variant: MoEVariant | None = None, kernels: str = "auto",
) -> torch.Tensor:  # fmt: skip
    """x (T, D) through the experts topk_ids (T, k) with router weights topk_weights (T, k) -> (T, D) in x's dtype.
    `variant` forces an implementation; else `kernels` (auto | triton | reference) and T choose one."""
    variant = variant or choose_moe_variant(x, kernels)
    if variant == "ref":
        return fused_moe_ref(x, ffn, topk_ids, topk_weights)
    if variant not in ("gemv", "gemm"):
        raise ValueError(f"variant: must be ref, gemv or gemm, got {variant!r}")
    from lexi.kernels.fused_moe_triton import fused_moe_triton

    tiles = interpreter_moe_tiles(variant, x.shape[0], ffn) if x.device.type == "cpu" else {}
    return fused_moe_triton(x, ffn, topk_ids, topk_weights, variant, **tiles)
