"""What callers hand the engine and what they get back: the request, its constraint hook, its events."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from lexi.engine.sampling import SamplingParams

if TYPE_CHECKING:
    from collections.abc import Hashable

    import numpy as np


@runtime_checkable
class TokenConstraint(Protocol):
    """A per-sequence mask hook (lexi.structured.compile makes one). Called on the engine thread only.

    Plain data both ways, so the layer that implements it needs no torch.
    """

    def mask_key(self) -> Hashable | None:
        """What the next step allows, named: None when nothing is restricted; equal keys (from any request of
        this engine) name equal sets, so the engine compiles each set once."""

    def fill_mask(self, row: np.ndarray) -> tuple[bool, np.ndarray] | None:
        """Write the set named by the last `mask_key` as bits of `row` (int32 words, zeroed; token t = bit
        t%32 of word t//32). Called only when the engine has not compiled that key yet. May also return the set
        as ids when it knows them without reading the row back: (True, the ids it allows) or (False, every other
        id of the row's bits)."""

    def advance(self, token_id: int) -> None:
        """The sampled token; the constraint moves to its next state (raises for a token it did not allow)."""

    def is_finished(self) -> bool:
        """True once nothing but the end of output may follow: the request finishes with "stop"."""

    # Optional, for speculation (not part of the runtime check): `snapshot() -> object` and `restore(snapshot)`,
    # so the engine can walk the constraint along a draft to find each position's mask and come back
    # (lexi.structured.turn.TurnConstraint has them); a constraint without them takes no drafts.


@dataclass(slots=True)
class GenerationRequest:
    prompt_ids: list[int]
    params: SamplingParams
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    constraint: TokenConstraint | None = None
    prompt_logprobs: int | None = None  # the prompt tokens' logprobs too, with this many alternatives (0-20)


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
    draft_proposed: int = 0  # speculation's draft tokens checked for this request so far (--spec)
    draft_taken: int = 0  # ... and taken
    prompt_logprobs: tuple[TokenLogprob | None, ...] = ()  # on the first event, when asked: None for the first token
    stop_string: str | None = None  # on the last event: the stop string that ended the output, if one did
