"""What callers hand the engine and what they get back: the request, its constraint hook, its events."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from lexi.engine.sampling import SamplingParams

if TYPE_CHECKING:
    import torch


@runtime_checkable
class TokenConstraint(Protocol):
    """A per-sequence mask hook (Outlines guides implement it). Called on the engine thread only."""

    def allowed_tokens(self) -> torch.Tensor | None:
        """bool (vocab,) of tokens allowed next, or None for no restriction."""

    def advance(self, token_id: int) -> None:
        """The sampled token; the constraint moves to its next state."""

    def is_finished(self) -> bool:
        """True once the constrained output is complete: the request finishes with "stop"."""


@dataclass(slots=True)
class GenerationRequest:
    prompt_ids: list[int]
    params: SamplingParams
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    constraint: TokenConstraint | None = None


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """The chosen token's log-probability and the top-n alternatives, best first."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()  # (token_id, logprob) pairs


@dataclass(frozen=True, slots=True)
class CompletionDelta:
    """One event on a request's stream. Usage counts are running totals; the last event is final."""

    text: str  # new visible text (stop strings and broken UTF-8 held back)
    token_ids: tuple[int, ...]
    logprobs: tuple[TokenLogprob, ...] = ()
    finish_reason: str | None = None  # None | "stop" | "length" | "abort"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens whose KV came from the prefix cache
