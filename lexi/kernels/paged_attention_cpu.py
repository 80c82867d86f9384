"""CPU attention for decode steps, and the row-by-row attention that `--deterministic` relies on.

A decode step (every sequence adds one token, or a few: a speculative draft's positions are checked in one
step) runs attention once per layer over the same block tables, so what can be worked out once is, in
`DecodeBatch`: which blocks each sequence reads, whether a lone sequence's blocks are consecutive in the pool
(then its keys are a view, not a gather), and the masks of the padded batch. Each layer then makes a gather (or
none), two grouped float32 einsums, and no Python loop over sequences. A sequence's several new rows are more
queries over the same keys (each masked to the keys before it), so its keys are read once, not once per row:
feeding a draft's rows as one-token sequences that share a block table gathered them once per row, and checking
a draft through the prefill path (per-layer masks, SDPA's math kernel) cost 2.5x a decode step at 9 rows.

`attention_rowwise` answers a different question: the same row must get bit-identical output whether it is
decoded alone, decoded beside other sequences, or prefilled in a chunk of any length after a prefix-cache
hit. So every row attends on its own, with a query of one row and exactly its own keys (no padding, no
mask): the kernel then sees the same shapes and values in every case. It is slower (a call per row).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lexi.kernels.attention_metadata import AttentionMetadata
from lexi.kernels.paged_attention import gather_kv, softmax_with_sinks

SHORT_STEP_ROWS = 16  # the most new rows a sequence may add for its step to run as a decode step


@dataclass(frozen=True, slots=True)
class DecodeBatch:
    """What every layer of one decode step shares: S sequences, sequence s adding n_s <= SHORT_STEP_ROWS rows, the
    last at position lengths[s] - 1."""

    lengths: tuple[int, ...]  # keys of each sequence after this step (cached + the new rows)
    blocks: torch.Tensor | None  # (S, n_blocks) int64 block ids to gather; None: one sequence, consecutive blocks
    first_block: int  # the lone sequence's first block when `blocks` is None
    pad_slots: torch.Tensor | None  # flat slots of the gathered (S * n_blocks * block_size) rows past each length
    masks: dict[int, torch.Tensor | None]  # sliding window (0 = none) -> (S, 1, rows, keys) bool, None = all keys
    rows: int = 1  # query rows per sequence in the padded batch (the most any sequence adds)
    # With rows > 1: (S * rows,) the step's row behind each padded query (padding repeats the sequence's last row),
    # and (T,) where each of the step's rows sits among the padded queries.
    padded: torch.Tensor | None = None
    unpadded: torch.Tensor | None = None

    @classmethod
    def build(cls, meta: AttentionMetadata, block_size: int, windows: frozenset[int]) -> DecodeBatch | None:
        """The plan of a step where every sequence adds between 1 and SHORT_STEP_ROWS rows; None for any other."""
        qs = meta.query_start_host
        counts = [qs[s + 1] - qs[s] for s in range(meta.num_seqs)]
        if not counts or min(counts) < 1 or max(counts) > SHORT_STEP_ROWS:
            return None
        if max(counts) > 1:
            return cls._short(meta, block_size, windows, counts)
        lengths = tuple(meta.seq_lens_host)
        n_blocks = -(-max(lengths) // block_size)
        tables = meta.block_tables[:, :n_blocks]
        if len(lengths) == 1:
            ids = tables[0].tolist()
            if ids == list(range(ids[0], ids[0] + n_blocks)):
                return cls(lengths, None, ids[0], None, {})
            return cls(lengths, tables.long(), 0, None, {})
        width = n_blocks * block_size
        key_pos = torch.arange(width, device=tables.device)[None, :]
        length = torch.tensor(lengths, device=tables.device)[:, None]
        masks = {}
        for window in windows:
            allowed = key_pos < length
            if window > 0:
                allowed &= key_pos >= length - window
            masks[window] = allowed[:, None, None, :]
        # Stale slots past a sequence's length (freed blocks) are masked out, but a masked NaN would still poison
        # the weighted sum of values: they are zeroed in the gathered copy.
        pad = (key_pos >= length).flatten().nonzero().flatten()
        return cls(lengths, tables.long(), 0, pad if pad.numel() else None, masks)

    @classmethod
    def _short(
        cls, meta: AttentionMetadata, block_size: int, windows: frozenset[int], counts: list[int]
    ) -> DecodeBatch:
        """Several rows for some sequence: queries padded to the most rows, each masked to its own keys."""
        qs, lengths = meta.query_start_host, tuple(meta.seq_lens_host)
        rows, device = max(counts), meta.block_tables.device
        n_blocks = -(-max(lengths) // block_size)
        tables = meta.block_tables[:, :n_blocks]
        blocks, first = tables.long(), 0
        if len(lengths) == 1:
            ids = tables[0].tolist()
            if ids == list(range(ids[0], ids[0] + n_blocks)):
                blocks, first = None, ids[0]
        padded = [qs[s] + min(j, n - 1) for s, n in enumerate(counts) for j in range(rows)]
        unpadded = [s * rows + j for s, n in enumerate(counts) for j in range(n)]
        # Query j of sequence s sits at position lengths[s] - counts[s] + j (padding repeats the last one).
        width = max(lengths) if blocks is None else n_blocks * block_size
        key_pos = torch.arange(width, device=device)[None, None, :]
        last = torch.tensor(lengths, device=device)[:, None, None] - 1
        back = torch.tensor([[max(n - 1 - j, 0) for j in range(rows)] for n in counts], device=device)[:, :, None]
        q_pos = last - back  # (S, rows, 1)
        masks = {}
        for window in windows:
            allowed = key_pos <= q_pos
            if window > 0:
                allowed &= key_pos > q_pos - window
            masks[window] = allowed[:, None]
        pad = None
        if blocks is not None:
            beyond = (key_pos[:, 0] > last[:, 0]).flatten().nonzero().flatten()
            pad = beyond if beyond.numel() else None
        return cls(
            lengths,
            blocks,
            first,
            pad,
            masks,
            rows,
            torch.tensor(padded, device=device),
            torch.tensor(unpadded, device=device),
        )

    def keys(self, cache: torch.Tensor) -> torch.Tensor:
        """One layer's cache rows for every sequence: (S, keys, n_kv_heads, head_dim)."""
        if self.blocks is None:
            n = self.lengths[0]
            flat = cache.view(-1, *cache.shape[2:])
            start = self.first_block * cache.shape[1]
            return flat[start : start + n].unsqueeze(0)
        rows = cache[self.blocks]  # (S, n_blocks, block_size, KVH, D)
        rows = rows.view(rows.shape[0], -1, *cache.shape[2:])
        if len(self.lengths) == 1 and self.rows == 1:
            return rows[:, : self.lengths[0]]
        if self.pad_slots is not None:
            rows.view(-1, *cache.shape[2:]).index_fill_(0, self.pad_slots, 0.0)
        return rows


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    batch: DecodeBatch,
    *,
    scale: float,
    sliding_window: int = 0,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """q (T, H, D), the step's rows (one per sequence, or a few: see DecodeBatch), over their cached keys (this
    step's already written) -> (T, H, D).
    `sinks` (H,): gpt-oss's per-head sink logits (see `softmax_with_sinks`).

    Two float32 einsums over the grouped heads (each KV head's G query heads at once), not
    `scaled_dot_product_attention`: over a bfloat16 cache with grouped heads that took 132 us a layer at SmolLM2's
    shape and 128 keys (these 57 us), and 13.2 ms at Llama-3-8B's with 1,024 keys (these 0.97 ms), on one core.
    """
    if batch.rows > 1:
        return _short_attention(q, k_cache, v_cache, batch, scale=scale, sliding_window=sliding_window, sinks=sinks)
    k = batch.keys(k_cache)
    v = batch.keys(v_cache)
    mask = None
    if len(batch.lengths) == 1:
        if sliding_window > 0 and k.shape[1] > sliding_window:
            k, v = k[:, -sliding_window:], v[:, -sliding_window:]
    else:
        mask = batch.masks[sliding_window]
    b, keys, kv_heads, d = k.shape
    heads = q.shape[1]
    grouped = q.to(torch.float32).view(b, kv_heads, heads // kv_heads, d)
    scores = torch.einsum("bkgd,blkd->bkgl", grouped, k.to(torch.float32)).mul_(scale)
    if mask is not None:
        scores.masked_fill_(~mask.view(b, 1, 1, keys), float("-inf"))
    if sinks is None:
        weights = torch.softmax(scores, dim=-1)
    else:  # (b, kv_heads, g, keys): head kv * g + j's sink joins its row
        weights = softmax_with_sinks(scores.view(b, heads, 1, keys), sinks).view(b, kv_heads, heads // kv_heads, keys)
    out = torch.einsum("bkgl,blkd->bkgd", weights, v.to(torch.float32))
    return out.reshape(b, heads, d).to(q.dtype)


def _short_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    batch: DecodeBatch,
    *,
    scale: float,
    sliding_window: int,
    sinks: torch.Tensor | None,
) -> torch.Tensor:
    """decode_attention for steps where a sequence adds several rows: q (T, H, D) -> (T, H, D).

    One pair of einsums for all rows. Row j's sums run over every key of its sequence, the ones after it masked
    (zero weight), where decoding it alone sums over its own keys only: the sums are grouped differently and can
    differ in the last bit, which the bfloat16 output then rounds to one ulp now and then (a near-tie can flip, as
    batching can; --deterministic takes attention_rowwise instead). A loop of one-row einsums, exact, cost 700 us
    a layer at 9 rows against 70."""
    k = batch.keys(k_cache).to(torch.float32)  # (S, keys, KVH, D)
    v = batch.keys(v_cache).to(torch.float32)
    s, keys, kv_heads, d = k.shape
    heads, n = q.shape[1], batch.rows
    g = heads // kv_heads
    grouped = q[batch.padded].to(torch.float32).view(s, n, kv_heads, g, d)
    scores = torch.einsum("snkgd,slkd->skgnl", grouped, k).mul_(scale)  # (S, KVH, G, rows, keys)
    scores.masked_fill_(~batch.masks[sliding_window].view(s, 1, 1, n, keys), float("-inf"))
    if sinks is None:
        weights = torch.softmax(scores, dim=-1)
    else:
        weights = softmax_with_sinks(scores.view(s, heads, n, keys), sinks).view(s, kv_heads, g, n, keys)
    out = torch.einsum("skgnl,slkd->snkgd", weights, v).reshape(s * n, heads, d)
    return out[batch.unpadded].to(q.dtype)


def attention_rowwise(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    *,
    scale: float,
    sliding_window: int = 0,
    softcap: float = 0.0,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Same contract as `paged_attention_ref`, each row computed alone over exactly the keys it may see."""
    out = torch.empty_like(q)
    for s in range(meta.num_seqs):
        start, end = meta.query_start_host[s], meta.query_start_host[s + 1]
        if end == start:
            continue
        length = meta.seq_lens_host[s]
        # (KVH, L, D), contiguous: every row's keys are then a slice of the same layout, alone or in a chunk.
        k = gather_kv(k_cache, meta.block_tables[s], length).transpose(0, 1).contiguous()
        v = gather_kv(v_cache, meta.block_tables[s], length).transpose(0, 1).contiguous()
        for row in range(start, end):
            p = length - (end - row)  # this row's position
            lo = max(0, p - sliding_window + 1) if sliding_window > 0 else 0
            ks, vs = k[None, :, lo : p + 1], v[None, :, lo : p + 1]
            qs = q[row][None, :, None, :]
            if softcap > 0.0 or sinks is not None:
                group = q.shape[1] // k.shape[0]
                ks, vs = ks.repeat_interleave(group, dim=1).float(), vs.repeat_interleave(group, dim=1).float()
                scores = (qs.float() @ ks.transpose(-1, -2)) * scale
                if softcap > 0.0:
                    scores = softcap * torch.tanh(scores / softcap)
                o = softmax_with_sinks(scores[0], sinks)[None] @ vs
            else:
                o = F.scaled_dot_product_attention(qs, ks, vs, scale=scale, enable_gqa=True)
            out[row] = o[0, :, 0].to(q.dtype)
    return out
