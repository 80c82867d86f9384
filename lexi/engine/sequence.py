"""One request's life inside the engine, as plain data the scheduler and block manager share (no torch)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class SeqStatus(enum.Enum):
    WAITING = "waiting"  # queued for a slot
    RUNNING = "running"  # holds a slot (prefilling or decoding)
    FINISHED = "finished"  # done; its blocks are back in the pool


@dataclass(slots=True, eq=False)
class Sequence:
    """Token ids (prompt then output) and how much of them the KV cache holds.

    ``num_computed`` tokens have K/V in the cache; the prompt is prefilled while
    ``num_computed < num_prompt``; after that every step feeds the last sampled token.
    """

    request_id: str
    token_ids: list[int]
    max_tokens: int
    num_prompt: int = 0
    num_computed: int = 0
    num_cached: int = 0  # prompt tokens reused from the prefix cache
    block_table: list[int] = field(default_factory=list)
    block_hashes: list[int] = field(default_factory=list)  # chained hashes of this sequence's full blocks
    status: SeqStatus = SeqStatus.WAITING
    arrival: float = 0.0  # clock time it was queued
    deadline: float = 0.0  # latest clock time it may still take a slot
    payload: Any = None  # the engine's per-request state (stream, sampler state, detokenizer)
    group: list[Sequence] | None = None  # the sequences admitted together with this one (one request's), in order
    leader: Sequence | None = None  # computes the prompt this one shares; this one then reuses its KV blocks
    awaiting_leader: bool = False  # matches the prefix cache once the leader has prefilled (or left)
    prompt_logprobs_top: int | None = None  # the prompt's logprobs are wanted, with this many alternatives
    draft: list[int] = field(default_factory=list)  # tokens proposed after the last one, checked next step
    draft_proposed: int = 0  # draft tokens checked for this sequence so far
    draft_taken: int = 0  # ... and taken

    @property
    def wants_prompt_logits(self) -> bool:
        """Every prompt row's logits are computed (none come from the prefix cache)."""
        return self.prompt_logprobs_top is not None

    def __post_init__(self) -> None:
        self.token_ids = list(self.token_ids)
        self.num_prompt = len(self.token_ids)

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def num_output(self) -> int:
        return len(self.token_ids) - self.num_prompt

    @property
    def prefilling(self) -> bool:
        return self.num_computed < self.num_prompt

    @property
    def output_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt :]
