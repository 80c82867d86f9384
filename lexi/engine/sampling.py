"""Per-request sampling parameters, validated once when the request is built (no torch here)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

MAX_LOGPROBS = 20  # OpenAI's top_logprobs ceiling


def _check(name: str, value: float, low: float, high: float) -> None:
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How one request turns logits into tokens, and when it stops.

    Order of application (llama.cpp's chain): logit_bias, repeat/presence/frequency penalties, the
    constraint mask, then top_k, top_p and min_p on the untempered distribution, then temperature.
    temperature 0 is greedy. repeat_penalty (1 = off) divides positive logits and multiplies
    negative ones of tokens seen in the last `repeat_last_n` tokens of prompt + output; presence and
    frequency penalties (OpenAI's meaning) count generated tokens only.
    """

    temperature: float = 0.8
    top_k: int = 40  # 0 = off
    top_p: float = 0.95  # 1 = off
    min_p: float = 0.05  # 0 = off
    seed: int | None = None  # same seed + prompt = same text; None draws a fresh seed
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    logit_bias: Mapping[int, float] = field(default_factory=dict)
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    logprobs: int | None = None  # top-n alternatives reported per token; None = no logprobs
    speculative: bool = True  # may take proposed tokens checked in one step, where the server speculates

    def __post_init__(self) -> None:
        _check("temperature", self.temperature, 0.0, 2.0)
        _check("top_k", self.top_k, 0, 1 << 20)
        _check("top_p", self.top_p, 0.0, 1.0)
        _check("min_p", self.min_p, 0.0, 1.0)
        _check("presence_penalty", self.presence_penalty, -2.0, 2.0)
        _check("frequency_penalty", self.frequency_penalty, -2.0, 2.0)
        if not 0.0 < self.repeat_penalty <= 10.0:
            raise ValueError(f"repeat_penalty must be in (0, 10], got {self.repeat_penalty}")
        _check("repeat_last_n", self.repeat_last_n, 0, 1 << 20)
        _check("max_tokens", self.max_tokens, 1, 1 << 20)
        if self.seed is not None and not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer or None, got {self.seed!r}")
        if self.logprobs is not None:
            _check("logprobs", self.logprobs, 0, MAX_LOGPROBS)
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        if any(not isinstance(s, str) or not s for s in stop):
            raise ValueError(f"stop must hold non-empty strings, got {stop!r}")
        object.__setattr__(self, "stop", stop)
        bias: dict[int, float] = {}
        for key, value in self.logit_bias.items():
            token = int(key)
            if token < 0:
                raise ValueError(f"logit_bias keys must be token ids >= 0, got {key!r}")
            _check(f"logit_bias[{token}]", float(value), -100.0, 100.0)
            bias[token] = float(value)
        object.__setattr__(self, "logit_bias", MappingProxyType(bias))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def has_penalties(self) -> bool:
        return self.presence_penalty != 0.0 or self.frequency_penalty != 0.0 or self.repeat_penalty != 1.0
