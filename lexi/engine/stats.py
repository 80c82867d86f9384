"""Counters the engine owns (no globals): what /metrics and the bench read. Written by the engine thread only."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(slots=True)
class EngineStats:
    slots_total: int = 0
    slots_busy: int = 0
    queue_depth: int = 0
    kv_blocks_total: int = 0
    kv_blocks_free: int = 0  # nobody holds them (prefix-cached ones included: evictable)
    requests_total: int = 0  # accepted onto the queue
    requests_finished: int = 0
    requests_rejected: int = 0  # EngineBusy
    requests_aborted: int = 0
    requests_failed: int = 0
    prompt_tokens_total: int = 0  # prompt tokens of admitted requests
    cached_tokens_total: int = 0  # of which reused from the prefix cache
    prefill_tokens_total: int = 0  # prompt tokens actually computed
    generated_tokens_total: int = 0
    steps_total: int = 0
    spec_steps_total: int = 0  # decode rows that checked a draft
    spec_proposed_total: int = 0  # draft tokens proposed
    spec_accepted_total: int = 0  # of which the model's own choice (taken)
    spec_budget_cut_total: int = 0  # draft tokens proposed but not checked: not worth their rows (draft_budget.py)
    spec_batch_rows_max: int = 0  # most rows one step fed for several decoding sequences (a token each + drafts)
    ttft_count: int = 0
    ttft_sum_s: float = 0.0  # queueing included: request submitted -> first token sampled
    ttft_last_s: float = 0.0

    @property
    def kv_blocks_used(self) -> int:
        """Blocks some request holds; 0 once the server is idle (a leak shows here, cached blocks do not)."""
        return self.kv_blocks_total - self.kv_blocks_free

    @property
    def ttft_mean_s(self) -> float:
        return self.ttft_sum_s / self.ttft_count if self.ttft_count else 0.0

    def snapshot(self) -> dict[str, float]:
        data = asdict(self)
        data["ttft_mean_s"] = self.ttft_mean_s
        data["kv_blocks_used"] = self.kv_blocks_used
        return data
