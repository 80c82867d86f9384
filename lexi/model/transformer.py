"""The decoder stack: one `Block` per layer and the `Transformer` that runs a step over the paged cache."""

from __future__ import annotations

import torch
from torch import nn

from lexi.kernels.paged_attention import AttentionMetadata
from lexi.model.args import ModelArgs
from lexi.model.attention import Attention
from lexi.model.linear import QuantLinear, TokenEmbedding
from lexi.model.mlp import GatedMLP
from lexi.model.norms import RMSNorm
from lexi.model.rope import RopeTable, inverse_frequencies, rope_table

KVCache = list[tuple[torch.Tensor, torch.Tensor]]


class Block(nn.Module):
    """Pre-norm residual block; gemma3 adds norms on the attention and MLP outputs (sandwich norms)."""

    def __init__(
        self,
        attn_norm: RMSNorm,
        attn: Attention,
        ffn_norm: RMSNorm,
        mlp: GatedMLP,
        post_attn_norm: RMSNorm | None = None,
        post_ffn_norm: RMSNorm | None = None,
    ) -> None:
        super().__init__()
        self.attn_norm, self.attn, self.ffn_norm, self.mlp = attn_norm, attn, ffn_norm, mlp
        self.post_attn_norm, self.post_ffn_norm = post_attn_norm, post_ffn_norm

    def forward(
        self, x: torch.Tensor, rope: RopeTable, meta: AttentionMetadata, cache: tuple[torch.Tensor, torch.Tensor]
    ) -> torch.Tensor:
        h = self.attn(self.attn_norm(x), rope, meta, cache)
        if self.post_attn_norm is not None:
            h = self.post_attn_norm(h)
        x = x + h
        h = self.mlp(self.ffn_norm(x))
        if self.post_ffn_norm is not None:
            h = self.post_ffn_norm(h)
        return x + h


class Transformer(nn.Module):
    """Token ids of one flat batch -> float32 logits of the rows `meta.logit_rows` asks for."""

    def __init__(
        self,
        args: ModelArgs,
        embed: TokenEmbedding,
        blocks: list[Block],
        norm: RMSNorm,
        output: QuantLinear,
        dtype: torch.dtype,
        device: torch.device,
        rope_freq_factors: torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        self.args, self.dtype, self.device = args, dtype, device
        self.embed = embed
        self.blocks = nn.ModuleList(blocks)
        self.norm = norm
        self.output = output
        self.register_buffer(
            "inv_freq_global",
            inverse_frequencies(args.rope_dim, args.rope_base, rope_freq_factors).to(device),
            persistent=False,
        )
        self.register_buffer(
            "inv_freq_local", inverse_frequencies(args.rope_dim, args.rope_base_local).to(device), persistent=False
        )

    def new_kv_cache(self, num_blocks: int, block_size: int) -> KVCache:
        """One (k, v) pair per layer, each (num_blocks, block_size, n_kv_heads, head_dim) in the compute dtype."""
        a = self.args
        shape = (num_blocks, block_size, a.n_kv_heads, a.head_dim)
        return [
            (
                torch.zeros(shape, dtype=self.dtype, device=self.device),
                torch.zeros(shape, dtype=self.dtype, device=self.device),
            )
            for _ in range(a.n_layers)
        ]

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, meta: AttentionMetadata, kv_cache: KVCache) -> torch.Tensor:
        """tokens (T,) -> logits (R, vocab) float32 for meta.logit_rows (all T rows when None)."""
        a = self.args
        if len(kv_cache) != a.n_layers:
            raise ValueError(f"kv_cache has {len(kv_cache)} layers, the model {a.n_layers}")
        x = self.embed(tokens)
        rope_global = rope_table(meta.positions, self.inv_freq_global, a.rope_scale)
        # Sliding-window layers (gemma3) have their own base and are never position-scaled.
        rope_local = rope_table(meta.positions, self.inv_freq_local) if any(a.layer_windows) else rope_global
        for block, cache, window in zip(self.blocks, kv_cache, a.layer_windows, strict=True):
            x = block(x, rope_local if window else rope_global, meta, cache)
        if meta.logit_rows is not None:
            x = x[meta.logit_rows]
        # Logits are computed from float32 inputs (quantized head) or in the dense head's own dtype (float32
        # on a CPU): a bfloat16 result would round logits near 20 to steps of 0.125 and turn near-ties into ties.
        h = self.norm(x)
        h = h.to(torch.float32 if self.output.qweight is not None else self.output.weight.dtype)
        logits = self.output(h).to(torch.float32)
        if a.final_softcap > 0.0:
            logits = a.final_softcap * torch.tanh(logits / a.final_softcap)
        return logits
