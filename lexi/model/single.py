"""`SingleSequence`: one sequence in contiguous cache blocks, for tests, `generate` and peer comparisons.

The engine owns a shared block pool and a scheduler; this is the smallest honest user of the same
`Transformer.forward` seam, so what it computes is what the engine computes for one request.
"""

from __future__ import annotations

import torch

from lexi.kernels.paged_attention import AttentionMetadata
from lexi.model.transformer import Transformer


class SingleSequence:
    """Feed tokens in any chunks with `extend`; the cache keeps everything fed so far."""

    def __init__(self, model: Transformer, max_tokens: int, block_size: int = 16) -> None:
        if max_tokens <= 0 or block_size <= 0:
            raise ValueError(f"max_tokens and block_size must be > 0, got {max_tokens} and {block_size}")
        self.model = model
        self.max_tokens = max_tokens
        self.block_size = block_size
        num_blocks = (max_tokens + block_size - 1) // block_size
        self.block_table = list(range(num_blocks))
        self.kv_cache = model.new_kv_cache(num_blocks, block_size)
        self.tokens: list[int] = []

    @property
    def num_cached(self) -> int:
        return len(self.tokens)

    def extend(self, token_ids: list[int], all_logits: bool = False) -> torch.Tensor:
        """Run the new tokens; float32 logits of the last one (vocab,), or of every new one (n, vocab)."""
        n = len(token_ids)
        if n == 0:
            raise ValueError("extend needs at least one token")
        if self.num_cached + n > self.max_tokens:
            raise ValueError(f"{self.num_cached} cached + {n} new tokens exceed max_tokens={self.max_tokens}")
        meta = AttentionMetadata.build(
            [n],
            [self.num_cached],
            [self.block_table],
            self.block_size,
            device=self.model.device,
            logits_of_last_only=not all_logits,
        )
        tokens = torch.tensor(token_ids, dtype=torch.int64, device=self.model.device)
        logits = self.model(tokens, meta, self.kv_cache)
        self.tokens.extend(token_ids)
        return logits if all_logits else logits[0]
