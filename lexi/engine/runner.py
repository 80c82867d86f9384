"""The device side of a step: owns the model and its KV cache, runs one mixed batch, samples its tokens."""

from __future__ import annotations

from collections.abc import Sequence as Seq

import torch

from lexi.engine.config import EngineConfig
from lexi.engine.sampler import Sampler, SampleResult, SamplerState
from lexi.engine.scheduler import ScheduledSeq
from lexi.kernels.paged_attention import AttentionMetadata


class ModelRunner:
    """Flattens prefill chunks and decode tokens into one forward over the paged KV cache."""

    def __init__(self, model, config: EngineConfig) -> None:
        self.model = model
        self.device = model.device
        self.block_size = config.block_size
        self.kv_cache = model.new_kv_cache(config.num_blocks, config.block_size)
        self.sampler: Sampler | None = None

    def build(self, scheduled: Seq[ScheduledSeq]) -> tuple[torch.Tensor, AttentionMetadata]:
        """Flat token ids and metadata; logits are asked only for rows that sample."""
        tokens: list[int] = []
        for item in scheduled:
            start = item.seq.num_computed
            tokens.extend(item.seq.token_ids[start : start + item.num_new])
        meta = AttentionMetadata.build(
            [s.num_new for s in scheduled],
            [s.seq.num_computed for s in scheduled],
            [s.seq.block_table for s in scheduled],
            self.block_size,
            device=self.device,
            logits_of_last_only=False,
        )
        ends = meta.query_start_host[1:]
        rows = [end - 1 for end, item in zip(ends, scheduled, strict=True) if item.sample]
        meta.logit_rows = torch.tensor(rows, dtype=torch.int64, device=self.device)
        return torch.tensor(tokens, dtype=torch.int64, device=self.device), meta

    @torch.inference_mode()
    def execute(self, scheduled: Seq[ScheduledSeq], states: Seq[SamplerState]) -> list[SampleResult | Exception | None]:
        """One forward; a result per scheduled sequence (None where it only prefilled a chunk)."""
        tokens, meta = self.build(scheduled)
        logits = self.model.forward(tokens, meta, self.kv_cache)
        sampling = [i for i, item in enumerate(scheduled) if item.sample]
        results: list[SampleResult | Exception | None] = [None] * len(scheduled)
        if not sampling:
            return results
        if self.sampler is None:
            self.sampler = Sampler(logits.shape[-1])
        picked = self.sampler.sample(
            logits, [states[i] for i in sampling], [scheduled[i].seq.token_ids for i in sampling]
        )
        for i, result in zip(sampling, picked, strict=True):
            results[i] = result
        return results
