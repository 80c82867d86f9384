"""POST /v1/responses: the chat route's prompt, sampling and reasoning split, in the Responses API's shapes.

The request becomes a chat conversation (`instructions` first, function calls and their outputs as
tool messages), rendered by the same template and read by the same output pipeline as
/v1/chat/completions, so greedy output is the same text and the same calls. Auth, the 503 while
loading, busy 429s and the abort on disconnect come from GenerationRoute as on every generation route.
With `store` (the default) the finished response is kept (lexi.http.responses.store) under the caller's key,
and `previous_response_id` puts a kept response's input and output items before this request's input.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from lexi.chat.output import ChatOutput
from lexi.http.errors import ApiError, bad_request, failed_mid_stream, renamed
from lexi.http.exchange import Reply
from lexi.http.generation.logprobs import ContentLogprobs, chat_entries
from lexi.http.generation.route import GenerationRoute
from lexi.http.generation.stream import output_events
from lexi.http.generation.turn import chat_turn
from lexi.http.responses.reply import ResponseBuilder, sse_event
from lexi.http.responses.request import parse_responses_request, previous_response_id
from lexi.http.responses.store import owner_of
from lexi.http.sse import HEADERS as SSE_HEADERS

log = logging.getLogger(__name__)

# the chat helpers name chat fields; on this route the same faults are about these
_PARAMS = {
    "messages": "input",
    "max_tokens": "max_output_tokens",
    "reasoning_effort": "reasoning.effort",
    "response_format": "text.format",
}


_WORDS = {"reasoning_effort": "reasoning.effort", "response_format": "text.format"}


def _renamed(exc: ApiError) -> ApiError:
    return renamed(exc, _PARAMS, _WORDS)


class ResponsesRoute(GenerationRoute):
    route = "responses"

    async def post(self) -> Reply | None:
        state = self.state
        body = self.json_body()
        storing = state.config.responses_store > 0
        self.owner = owner_of(self.request.headers.get("Authorization"), bool(state.config.api_keys))
        history = await self._history(previous_response_id(body, storing))
        req = parse_responses_request(body, state.sampling, history, storing)
        model = state.names.resolve(req.model)
        try:
            turn = chat_turn(state, req.conversation)
            params, stream = await self.generate(turn, req.sampling)
        except ApiError as exc:
            raise _renamed(exc) from None
        builder = ResponseBuilder(req, model, params)
        self.logprobs = ContentLogprobs(state.runtime.tokenizer) if req.logprobs else None
        if req.stream:
            return Reply(200, dict(SSE_HEADERS), frames=self._stream(builder, stream, turn.output()))
        try:
            return await self._whole(builder, stream, turn.output())
        except ApiError as exc:
            raise _renamed(exc) from None

    async def _history(self, response_id: str | None) -> list | None:
        """The items a continuation starts from; someone else's response is as unknown as one never stored.
        OpenAI's answer to an unknown id: 400 previous_response_not_found (clients look for that code)."""
        if response_id is None:
            return None
        entry = await self.state.responses.get(response_id, self.owner)
        if entry is None:
            raise bad_request(
                f"Previous response with id '{response_id}' not found.",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        return entry.history()

    async def _keep(self, builder: ResponseBuilder) -> None:
        """A finished response with store on is kept before the client sees its end, so that a GET or a
        continuation sent as soon as the answer arrives finds it."""
        if builder.req.store:
            await self.state.responses.put(self.owner, builder.body(), builder.req.items)

    async def _whole(self, builder: ResponseBuilder, stream, output: ChatOutput) -> Reply | None:
        """The same builder as the stream, its events dropped: the body is the stream's final response."""
        async for _ in self._run(builder, stream, output):
            pass
        self.count_tokens()
        if stream.cut_short:
            return None
        builder.finish(stream.last[0], output.reasoning_tokens)
        await self._keep(builder)
        return self.json(builder.body())

    async def _run(self, builder: ResponseBuilder, stream, output: ChatOutput):
        """The stream events of the generated output, one batch per engine event."""
        tokenizer = self.state.runtime.tokenizer
        async for _, delta, events in output_events(stream, [output]):
            attached = self.logprobs.feed(delta.logprobs, events, output.fed_reasoning) if self.logprobs else None
            for j, event in enumerate(events):
                entries = chat_entries(tokenizer, attached[j]) if attached is not None else None
                for item_event in builder.feed(event, entries):
                    yield item_event

    async def _stream(self, builder: ResponseBuilder, stream, output: ChatOutput) -> AsyncIterator[bytes]:
        """The typed events; a failure before the first is a status, after it an `error` event."""
        try:
            for event in builder.start():
                self.sent_any = True
                yield sse_event(event)
            async for event in self._run(builder, stream, output):
                yield sse_event(event)
            self.count_tokens()
            if stream.cut_short:
                return
            events = builder.finish(stream.last[0], output.reasoning_tokens)
            await self._keep(builder)
            for event in events:
                yield sse_event(event)
        except Exception as exc:
            if not self.sent_any:
                if isinstance(exc, ApiError):
                    raise _renamed(exc) from None
                raise
            if isinstance(exc, ApiError):
                error = _renamed(exc)
            else:
                log.exception("generation failed mid-stream")
                error = failed_mid_stream(exc)
            event = builder.event("error", code=error.code or error.type, message=error.message, param=error.param)
            yield sse_event(event)
