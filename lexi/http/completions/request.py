"""POST /v1/completions bodies: one prompt or a batch of them (strings or token-id lists), n choices each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lexi.chat.constraint_plan import plan_output
from lexi.chat.guided import GuidedText, guided_plan
from lexi.chat.response_format import ResponseFormat
from lexi.http.errors import bad_request
from lexi.http.ops.config import SamplingDefaults
from lexi.http.parsing.fields import (
    COMPLETION_SAMPLING_FIELDS,
    NO_EFFECT,
    UNSUPPORTED_PARAMETER,
    UNSUPPORTED_VALUE,
    Fields,
    SamplingRequest,
    parse_sampling,
    refuse_unknown,
    stream_options,
)
from lexi.http.parsing.guided import GUIDED_FIELDS, parse_guided, parse_response_format
from lexi.structured import ConstraintPlan

COMPLETION_FIELDS = ("model", "prompt", "echo", "best_of", "suffix", "stream", "stream_options", "response_format",
                     *COMPLETION_SAMPLING_FIELDS, *GUIDED_FIELDS, *NO_EFFECT)  # fmt: skip
MAX_PROMPTS = 64


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    model: str | None
    prompts: list[str | list[int]]  # each a string or token ids; choices come n per prompt, in order
    sampling: SamplingRequest
    stream: bool
    include_usage: bool
    echo: bool
    response_format: ResponseFormat | None = None  # a JSON answer (response_format, or vLLM's JSON forms)
    guided: GuidedText | None = None  # an answer matching a regex (vLLM's structured_outputs regex / choice)

    def plan(self) -> tuple[ConstraintPlan | None, str]:
        """What every choice's text must match (None: free), and the field that asked for it."""
        if self.guided is not None:
            return guided_plan(self.guided, None), self.guided.param
        if self.response_format is not None and self.response_format.is_json:
            return plan_output(None, "json", self.response_format, None), self.response_format.param
        return None, ""


def parse_completion_request(body: dict[str, Any], defaults: SamplingDefaults) -> CompletionRequest:
    refuse_unknown(body, COMPLETION_FIELDS)
    f = Fields(body)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        f.fail("model", "must be a string")
    if f.present("suffix"):
        f.fail("suffix", "is not supported (no fill-in-the-middle)", code=UNSUPPORTED_PARAMETER)
    sampling = parse_sampling(f, defaults, chat=False)
    if f.present("best_of") and f.integer("best_of", 1, 1 << 20) != sampling.n:
        f.fail(
            "best_of", "must equal n: every generated choice is returned (none is ranked away)", code=UNSUPPORTED_VALUE
        )
    stream, include_usage = stream_options(f)
    response_format, guided = parse_guided(f, parse_response_format(f))
    return CompletionRequest(
        model=model,
        prompts=_prompts(body.get("prompt")),
        sampling=sampling,
        stream=stream,
        include_usage=include_usage,
        echo=f.boolean("echo"),
        response_format=response_format,
        guided=guided,
    )


def _prompts(value: Any) -> list[str | list[int]]:
    """A string, token ids, or a batch: a list of strings or of token-id lists."""
    if isinstance(value, str):
        return [value]
    if _token_ids(value):
        return [list(value)]
    if isinstance(value, list) and value and len(value) <= MAX_PROMPTS:
        if all(isinstance(p, str) for p in value):
            return list(value)
        if all(_token_ids(p) for p in value):
            return [list(p) for p in value]
    raise bad_request(
        f"prompt must be a string, an array of token ids, or a batch of 1-{MAX_PROMPTS} of either "
        "(token ids are integers >= 0)",
        param="prompt",
    )


def _token_ids(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 1 << 40 for t in value)
    )
