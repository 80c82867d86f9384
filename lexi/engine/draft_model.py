"""Draft-model proposals for speculative decoding (`--spec draft --model-draft PATH`): a smaller model with the
target's vocabulary writes each decoding sequence's next few tokens greedily, and the target checks them in one
step, as it checks prompt-lookup drafts.

The draft model keeps its own K/V, in a cache of its own shaped like the target's pool and addressed through the
target's block tables: a sequence's blocks hold both models' K/V for its positions, so nothing else is allocated
or freed, and prefix-cache sharing needs nothing either (a shared block's tokens are the same for every sequence
holding it). What the draft model has computed of a sequence is followed by a `DraftCursor`: before each
proposal it catches up on the tokens the sequence gained since (a new sequence's whole prompt, in chunks of
--batch-size), keeping the K/V of the draft tokens the target took. A draft stops at --spec-max tokens, or before
a token the draft model itself gives less than --spec-p-min probability (the target would likely refuse it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lexi.kernels.attention_metadata import AttentionMetadata


@dataclass(slots=True)
class DraftCursor:
    """How much of one sequence the draft model's K/V holds: positions [0, computed) are the sequence's own
    tokens, and `fed` the draft tokens it fed at the positions after them in its last proposal."""

    computed: int = 0
    fed: tuple[int, ...] = ()

    def sync(self, tokens: list[int]) -> None:
        """Keep the fed draft tokens the sequence took (their K/V are its own now); the rest is written over."""
        taken = 0
        for j, token in enumerate(self.fed):
            if self.computed + j >= len(tokens) or tokens[self.computed + j] != token:
                break
            taken += 1
        self.computed = min(self.computed + taken, len(tokens))
        self.fed = ()


@dataclass(frozen=True, slots=True)
class DraftRow:
    """One sequence to propose for: its tokens so far, its block table (room for len(tokens) + limit - 1
    positions), its cursor, the most tokens to propose, and tokens never to propose (the end-of-generation ids of
    a request that ignores them: the check would refuse them)."""

    tokens: list[int]
    block_table: list[int]
    cursor: DraftCursor
    limit: int
    banned: tuple[int, ...] = ()


class DraftProposer:
    """Greedy drafts from the draft model, every proposing sequence in the same forward passes."""

    def __init__(self, model, num_blocks: int, block_size: int, chunk: int, vocab_size: int, p_min: float) -> None:
        self.model = model
        self.block_size = block_size
        self.chunk = chunk
        self.vocab_size = vocab_size  # the vocabulary both models share (a draft logit past it is never proposed)
        self.p_min = p_min
        self.kv_cache = model.new_kv_cache(num_blocks, block_size)

    @torch.inference_mode()
    def propose(self, rows: list[DraftRow]) -> list[list[int]]:
        """A draft for each row (possibly empty), in order."""
        for row in rows:
            row.cursor.sync(row.tokens)
            if row.cursor.computed == len(row.tokens):  # the last token is always fed: its logits are the first pick
                row.cursor.computed -= 1
            while len(row.tokens) - row.cursor.computed > self.chunk:  # a long backlog: catch up without logits
                start = row.cursor.computed
                self._forward([row.tokens[start : start + self.chunk]], [start], [row.block_table])
                row.cursor.computed += self.chunk
        drafts: list[list[int]] = [[] for _ in rows]
        active = [i for i, row in enumerate(rows) if row.limit > 0]
        feeds = {i: rows[i].tokens[rows[i].cursor.computed :] for i in active}
        starts = {i: rows[i].cursor.computed for i in active}
        fed: dict[int, list[int]] = {i: [] for i in active}  # draft tokens fed (their K/V written)
        while active:
            logits = self._forward([feeds[i] for i in active], [starts[i] for i in active],
                                   [rows[i].block_table for i in active])  # fmt: skip
            logits = logits[:, : self.vocab_size].float()
            for r, i in enumerate(active):
                if rows[i].banned:
                    logits[r, list(rows[i].banned)] = float("-inf")
            probs = torch.softmax(logits, dim=-1)
            best, picks = probs.max(dim=-1)
            still = []
            for i, p, token in zip(active, best.tolist(), picks.tolist(), strict=True):
                row = rows[i]
                if starts[i] + len(feeds[i]) >= len(row.tokens):
                    row.cursor.computed = len(row.tokens)  # the catch-up's K/V are written
                if p < self.p_min:
                    continue
                drafts[i].append(token)
                if len(drafts[i]) < row.limit:
                    starts[i] += len(feeds[i])
                    feeds[i] = [token]
                    fed[i].append(token)
                    still.append(i)
            active = still
        for i, tokens in fed.items():
            rows[i].cursor.fed = tuple(tokens)
        return drafts

    def _forward(self, feeds: list[list[int]], starts: list[int], tables: list[list[int]]) -> torch.Tensor:
        """Logits of each feed's last token, its K/V written after `starts` cached positions."""
        meta = AttentionMetadata.build([len(f) for f in feeds], starts, tables, self.block_size,
                                       device=self.model.device)  # fmt: skip
        tokens = torch.tensor([t for f in feeds for t in f], dtype=torch.int64, device=self.model.device)
        return self.model(tokens, meta, self.kv_cache)
