"""From a validated request to engine events: sampling params after defaults, and errors in HTTP terms.

The engine refuses in its own terms (ContextOverflow, EngineBusy, ValueError); this module is the
one place that turns those into the statuses the spec gives them.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

from lexi.chat.output import ChatOutput, OutputError, OutputEvent
from lexi.engine.errors import ContextOverflow, EngineBusy
from lexi.engine.request import CompletionDelta, GenerationRequest, TokenLogprob
from lexi.engine.sampling import SamplingParams
from lexi.http.errors import ApiError, bad_request
from lexi.http.protocol import SamplingRequest

_ENGINE_DEFAULTS = SamplingParams()


def sampling_params(
    s: SamplingRequest, num_prompt: int, ctx_size: int, extra_stop: tuple[str, ...] = ()
) -> SamplingParams:
    """The engine's params: request value, else server default (already folded in), else engine default.

    No limit anywhere means "the room left in the context"; a prompt that leaves no room is a 400.
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
        max_tokens=room if s.max_tokens is None else s.max_tokens,
        stop=tuple(dict.fromkeys((*s.stop, *extra_stop))),
        ignore_eos=s.ignore_eos,
        logprobs=s.logprobs,
    )


class EngineStream:
    """One generation: the first event is awaited before anything is written, so refusals keep their status.

    `abort()` (from on_connection_close) asks the engine to stop at its next step and free the slot.
    """

    def __init__(self, engine, request: GenerationRequest, on_first_token: Callable[[], None] | None = None) -> None:
        self.engine = engine
        self.request = request
        self._on_first = on_first_token
        self._events: AsyncIterator[CompletionDelta] | None = None
        self._first: CompletionDelta | None = None
        self.aborted = False
        self.last: CompletionDelta | None = None

    async def start(self) -> None:
        if self.aborted:
            raise ApiError(400, "the client closed the connection before generation started")
        self._events = self.engine.generate(self.request)
        try:
            self._first = await anext(self._events)
        except EngineBusy as exc:
            message = f"all inference slots are busy: {exc}"
            raise ApiError(429, message, type="inference_busy", code="inference_busy") from None
        except ContextOverflow as exc:
            raise bad_request(str(exc), param="max_tokens", code="context_length_exceeded") from None
        except StopAsyncIteration:
            raise ApiError(500, "the engine ended the request without an event") from None
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        if self._on_first is not None:
            self._on_first()

    async def events(self) -> AsyncIterator[CompletionDelta]:
        assert self._events is not None and self._first is not None, "start() first"
        async with contextlib.aclosing(self._events):
            delta, self._first = self._first, None
            while True:
                self.last = delta
                yield delta
                if delta.finish_reason is not None or self.aborted:
                    return
                delta = await anext(self._events)

    def abort(self) -> None:
        if not self.aborted:
            self.aborted = True
            self.engine.abort(self.request.request_id)

    async def close(self) -> None:
        if self._events is not None:
            await self._events.aclose()


async def output_events(stream: EngineStream, output: ChatOutput) -> AsyncIterator[tuple[CompletionDelta, list]]:
    """Each engine event with the output events it releases; an aborted request releases nothing more.

    A forced tool call the model failed to write, or a JSON answer that is not what response_format
    asked for, is a 422: the request was fine, the answer is not what it demanded, and the client can
    act on that (retry, another seed, a larger max_tokens or model). A 5xx would say the server
    broke, which it did not.
    """
    async for delta in stream.events():
        if delta.finish_reason == "abort":
            yield delta, []
            return
        try:
            events: list[OutputEvent] = output.feed(delta.text, len(delta.token_ids), delta.finish_reason)
        except OutputError as exc:
            raise ApiError(422, str(exc), type="model_output_error", param=exc.param, code=exc.code) from None
        yield delta, events


def merge_usage(deltas: list[CompletionDelta]) -> CompletionDelta:
    """All events of a finished request as one: text joined, the last event's counts and finish reason."""
    last = deltas[-1]
    return dataclasses.replace(
        last,
        text="".join(d.text for d in deltas),
        token_ids=tuple(t for d in deltas for t in d.token_ids),
        logprobs=tuple(lp for d in deltas for lp in d.logprobs),
    )


def usage(delta: CompletionDelta) -> dict[str, Any]:
    body: dict[str, Any] = {
        "prompt_tokens": delta.prompt_tokens,
        "completion_tokens": delta.completion_tokens,
        "total_tokens": delta.prompt_tokens + delta.completion_tokens,
    }
    if delta.cached_tokens:
        body["prompt_tokens_details"] = {"cached_tokens": delta.cached_tokens}
    return body


def finish_reason(delta: CompletionDelta) -> str:
    return "length" if delta.finish_reason == "length" else "stop"


def chat_logprobs(tokenizer, logprobs: tuple[TokenLogprob, ...]) -> dict[str, Any]:
    def entry(token_id: int, logprob: float) -> dict[str, Any]:
        raw = tokenizer.token_bytes(token_id)
        return {"token": raw.decode("utf-8", "replace"), "logprob": logprob, "bytes": list(raw)}

    return {
        "content": [
            {**entry(lp.token_id, lp.logprob), "top_logprobs": [entry(t, v) for t, v in lp.top]} for lp in logprobs
        ]
    }


def completion_logprobs(tokenizer, logprobs: tuple[TokenLogprob, ...], offset: int = 0) -> dict[str, Any]:
    tokens, values, tops, offsets = [], [], [], []
    for lp in logprobs:
        text = tokenizer.token_bytes(lp.token_id).decode("utf-8", "replace")
        tokens.append(text)
        values.append(lp.logprob)
        tops.append({tokenizer.token_bytes(t).decode("utf-8", "replace"): v for t, v in lp.top})
        offsets.append(offset)
        offset += len(text)
    return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets}
