"""POST /v1/messages and POST /v1/messages/count_tokens: parse -> the chat turn -> generate -> a message or events.

The same template, reasoning split, tool verification and constraints as /v1/chat/completions (the
generation layer's `chat_turn` and `GenerationRoute.generate`), the same slots, drain and abort on
disconnect. What differs is the edge: the key may come as `x-api-key` (Anthropic's) or `Authorization:
Bearer`, errors are in Anthropic's shape (a stream under way ends with an `error` event), and
`anthropic-version` / `anthropic-beta` are accepted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from lexi.chat.output import ChatOutput
from lexi.chat.prompt import ChatTurn
from lexi.http.errors import ApiError, renamed
from lexi.http.exchange import Reply
from lexi.http.generation.route import GenerationRoute
from lexi.http.generation.stream import EngineStream, output_events
from lexi.http.generation.turn import chat_turn
from lexi.http.messages.reply import PING, MessageBuilder, error_body, overloaded
from lexi.http.messages.request import MessagesRequest, check_thinking, parse_messages_request
from lexi.http.ops.auth import bearer_token
from lexi.http.route import Route
from lexi.http.sse import named_frame
from lexi.http.state import ServerState

# chat_turn names chat's fields; here the same faults are about these
_PARAMS = {"reasoning_effort": "thinking", "chat_template_kwargs": "thinking"}
PING_EVERY_S = 1.0  # while a streamed message waits for a slot and its prefill, so proxies see it alive


class AnthropicEdge:
    """Anthropic's key header and error shape, for both routes (a mixin before Route in the bases)."""

    request_id: str

    def presented_key(self) -> str | None:
        """`x-api-key` when sent (Anthropic's clients), else `Authorization: Bearer` (its auth_token, and others)."""
        key = self.request.headers.get("x-api-key")
        if key is None:
            return bearer_token(self.request.headers.get("Authorization"))
        return key.strip() or None

    def error_body(self, error: ApiError) -> dict:
        return error_body(error, self.request_id)

    def error_reply(self, exc: BaseException) -> Reply:
        return super().error_reply(overloaded(exc))

    def error_frame(self, error: ApiError) -> bytes:
        return named_frame(error_body(overloaded(error), self.request_id))


def messages_turn(state: ServerState, req: MessagesRequest) -> ChatTurn:
    """The chat turn for a request, its faults named in this API's fields."""
    check_thinking(req, state.template)
    try:
        return chat_turn(state, req.conversation)
    except ApiError as exc:
        raise renamed(exc, _PARAMS) from None


class MessagesRoute(AnthropicEdge, GenerationRoute):
    """A streamed message begins (200, message_start, ping) once the engine has taken the request, and pings
    every PING_EVERY_S while it waits for a slot and its prefill, as Anthropic's streams do; a busy server
    then ends it with an `error` event of type overloaded_error (a whole message is answered 529 instead)."""

    route = "messages"

    async def post(self) -> Reply | None:
        state = self.state
        req = parse_messages_request(self.json_body(), state.sampling)
        model = state.names.resolve(req.model)
        turn = messages_turn(state, req)
        _, stream = await self.generate(turn, req.sampling, wait=not req.stream)
        builder = MessageBuilder(model, req.stop_sequences, req.show_thinking)
        if req.stream:
            return self.sse(self._stream(builder, stream, turn))
        async for _ in self._events(builder, stream, turn.output()):
            pass
        return self.json(builder.body()) if builder.stop[0] is not None else None

    async def _events(self, builder: MessageBuilder, stream: EngineStream, output: ChatOutput) -> AsyncIterator[dict]:
        """Every event after the stream's start, to message_stop; nothing after an abort."""
        async for _, _, events in output_events(stream, [output]):
            for event in events:
                for item in builder.feed(event):
                    yield item
        self.count_tokens()
        if stream.cut_short:
            return
        for event in builder.finish(stream.last[0], output.calls):
            yield event

    async def _stream(self, builder: MessageBuilder, stream: EngineStream, turn: ChatTurn) -> AsyncIterator[bytes]:
        for event in builder.start(len(turn.prompt.ids)):
            yield named_frame(event)
        waiting = asyncio.ensure_future(stream.first_events())
        try:
            while not (await asyncio.wait({waiting}, timeout=PING_EVERY_S))[0]:
                yield named_frame(PING)
            waiting.result()  # a refusal (busy, past --queue-wait) raises here: an error event ends the stream
        finally:
            waiting.cancel()
        async for event in self._events(builder, stream, turn.output()):
            yield named_frame(event)


class CountTokensRoute(AnthropicEdge, Route):
    """The prompt a /v1/messages body would give the model (tools and thinking switch included), counted."""

    route = "count_tokens"

    def post(self) -> Reply:
        req = parse_messages_request(self.json_body(), self.state.sampling, counting=True)
        self.state.names.resolve(req.model)
        return self.json({"input_tokens": len(messages_turn(self.state, req).prompt.ids)})
