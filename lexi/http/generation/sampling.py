"""From a validated request to engine requests (sampling params after defaults, one per choice), and usage."""

from __future__ import annotations

import dataclasses
from typing import Any

from lexi.engine.request import CompletionDelta, GenerationRequest
from lexi.engine.sampling import SamplingParams
from lexi.http.errors import bad_request
from lexi.http.parsing.fields import SamplingRequest

_ENGINE_DEFAULTS = SamplingParams()


def sampling_params(
    s: SamplingRequest, num_prompt: int, ctx_size: int, extra_stop: tuple[str, ...] = ()
) -> SamplingParams:
    """The engine's params: request value, else server default (already folded in), else engine default.

    Without the client's max_tokens, the server's --n-predict capped by the room left in the context (so a
    long prompt is not refused for a limit the client never set); a prompt that leaves no room is a 400.
    """
    room = ctx_size - num_prompt
    if room < 1:
        raise bad_request(
            f"the prompt ({num_prompt} tokens) leaves no room in the context of {ctx_size} tokens",
            param="messages",
            code="context_length_exceeded",
        )
    pick = lambda value, name: getattr(_ENGINE_DEFAULTS, name) if value is None else value
    return SamplingParams(
        temperature=pick(s.temperature, "temperature"),
        top_k=pick(s.top_k, "top_k"),
        top_p=pick(s.top_p, "top_p"),
        min_p=pick(s.min_p, "min_p"),
        seed=s.seed,
        presence_penalty=s.presence_penalty,
        frequency_penalty=s.frequency_penalty,
        repeat_penalty=pick(s.repeat_penalty, "repeat_penalty"),
        logit_bias=s.logit_bias,
        max_tokens=s.max_tokens if s.max_tokens is not None else min(room, s.default_max_tokens or room),
        stop=tuple(dict.fromkeys((*s.stop, *extra_stop))),
        ignore_eos=s.ignore_eos,
        logprobs=s.logprobs,
        speculative=s.speculative,
    )


def choice_requests(
    prompt_ids: list[int], params: SamplingParams, n: int, constraints: list | None = None
) -> list[GenerationRequest]:
    """One engine request per choice, each its own random stream: with a seed s, choice i draws from s + i,
    so the whole set is reproducible (and choice 0 is what n=1 gives); without, each draws a fresh seed."""
    requests = []
    for i in range(n):
        seed = None if params.seed is None else (params.seed + i) % (1 << 64)
        requests.append(
            GenerationRequest(
                list(prompt_ids),
                dataclasses.replace(params, seed=seed),
                constraint=constraints[i] if constraints else None,
            )
        )
    return requests


def merge_usage(deltas: list[CompletionDelta]) -> CompletionDelta:
    """All events of a finished request as one: text joined, the last event's counts and finish reason."""
    last = deltas[-1]
    return dataclasses.replace(
        last,
        text="".join(d.text for d in deltas),
        token_ids=tuple(t for d in deltas for t in d.token_ids),
        logprobs=tuple(lp for d in deltas for lp in d.logprobs),
    )


def usage(groups: list[list[CompletionDelta]]) -> dict[str, Any]:
    """Each prompt once (the choices of one prompt share it: its first choice's counts), completions summed.

    `groups` holds, per prompt, the last event of each of its choices.
    """
    prompt = sum(group[0].prompt_tokens for group in groups)
    cached = sum(group[0].cached_tokens for group in groups)
    completion = sum(d.completion_tokens for group in groups for d in group)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def finish_reason(delta: CompletionDelta) -> str:
    return "length" if delta.finish_reason == "length" else "stop"
