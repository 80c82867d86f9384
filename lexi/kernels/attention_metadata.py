"""The metadata that describes one batched attention step: the one type every attention implementation reads.

Its own module so that the dispatch (paged_attention.py) imports its implementations and they import only
this, never the dispatch back.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(slots=True)
class AttentionMetadata:
    """Everything attention needs to know about one step's flat batch of T new tokens from S sequences."""

    positions: torch.Tensor  # (T,) int64: absolute position of every new token in its sequence
    query_start: torch.Tensor  # (S+1,) int32: sequence s owns rows query_start[s]:query_start[s+1]
    seq_lens: torch.Tensor  # (S,) int32: tokens in the cache for s after this step (cached + new)
    block_tables: torch.Tensor  # (S, max_blocks) int32: physical block ids, padded with 0
    slot_mapping: torch.Tensor  # (T,) int64: block * block_size + offset where each new token's K/V goes
    query_start_host: list[int]  # host copy of query_start, so the CPU path never syncs
    seq_lens_host: list[int]  # host copy of seq_lens
    logit_rows: torch.Tensor | None = None  # (R,) int64 rows whose logits are wanted; None = all rows

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens_host)

    @classmethod
    def build(
        cls,
        new_tokens: list[int],
        cached_tokens: list[int],
        block_tables: list[list[int]],
        block_size: int,
        device: torch.device | str = "cpu",
        logits_of_last_only: bool = True,
    ) -> AttentionMetadata:
        """Metadata for S sequences, sequence s adding new_tokens[s] after cached_tokens[s] cached ones."""
        positions: list[int] = []
        slots: list[int] = []
        query_start = [0]
        seq_lens = []
        for n_new, n_cached, table in zip(new_tokens, cached_tokens, block_tables, strict=True):
            for p in range(n_cached, n_cached + n_new):
                positions.append(p)
                slots.append(table[p // block_size] * block_size + p % block_size)
            query_start.append(query_start[-1] + n_new)
            seq_lens.append(n_cached + n_new)
        width = max((len(t) for t in block_tables), default=1) or 1
        padded = [t + [0] * (width - len(t)) for t in block_tables]
        rows = None
        if logits_of_last_only:
            rows = torch.tensor([q - 1 for q in query_start[1:]], dtype=torch.int64, device=device)
        return cls(
            positions=torch.tensor(positions, dtype=torch.int64, device=device),
            query_start=torch.tensor(query_start, dtype=torch.int32, device=device),
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
            block_tables=torch.tensor(padded, dtype=torch.int32, device=device),
            slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
            query_start_host=query_start,
            seq_lens_host=seq_lens,
            logit_rows=rows,
        )
