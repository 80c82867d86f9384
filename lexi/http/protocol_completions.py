"""POST /v1/completions bodies: a prompt string (or a one-element list of one) or token ids."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lexi.http.config import SamplingDefaults
from lexi.http.errors import bad_request
from lexi.http.protocol import Fields, SamplingRequest, parse_sampling, stream_options


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    model: str | None
    prompt: str | list[int]
    sampling: SamplingRequest
    stream: bool
    include_usage: bool
    echo: bool


def parse_completion_request(body: dict[str, Any], defaults: SamplingDefaults) -> CompletionRequest:
    f = Fields(body)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        f.fail("model", "must be a string")
    if f.present("suffix"):
        f.fail("suffix", "is not supported")
    if f.present("best_of") and f.integer("best_of", 1, 1 << 20) != 1:
        f.fail("best_of", "must be 1")
    stream, include_usage = stream_options(f)
    return CompletionRequest(
        model=model,
        prompt=_prompt(body.get("prompt")),
        sampling=parse_sampling(f, defaults, chat=False),
        stream=stream,
        include_usage=include_usage,
        echo=f.boolean("echo"),
    )


def _prompt(value: Any) -> str | list[int]:
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str | list):
        value = value[0]  # OpenAI's batch form with a single prompt
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        if any(t < 0 for t in value):
            raise bad_request("prompt token ids must be >= 0", param="prompt")
        return list(value)
    raise bad_request("prompt must be a string, one string in an array, or an array of token ids", param="prompt")
