"""POST /v1/responses: the chat route's prompt, sampling and reasoning split, in the Responses API's shapes.

The request becomes chat messages (`instructions` first), rendered by the same template as
/v1/chat/completions, so greedy output is the same text. Auth, the 503 while loading, busy 429s and
the abort on disconnect come from GenerationHandler as on every generation route.
"""

from __future__ import annotations

import logging

from lexi.chat.reasoning import ReasoningSplitter
from lexi.engine.request import GenerationRequest
from lexi.http.errors import ApiError
from lexi.http.generation import sampling_params
from lexi.http.handlers.base import GenerationHandler
from lexi.http.handlers.chat import render_prompt
from lexi.http.handlers.responses_events import ResponseBuilder, sse_event
from lexi.http.protocol_chat import ChatRequest
from lexi.http.protocol_responses import parse_responses_request

log = logging.getLogger(__name__)

# the chat helpers name chat fields; on this route the same faults are about these
_PARAMS = {"messages": "input", "max_tokens": "max_output_tokens", "reasoning_effort": "reasoning.effort"}


def _renamed(exc: ApiError) -> ApiError:
    if exc.param in _PARAMS:
        exc.param = _PARAMS[exc.param]
        exc.message = exc.message.replace("reasoning_effort", "reasoning.effort")
    return exc


class ResponsesHandler(GenerationHandler):
    route = "responses"

    async def post(self) -> None:
        state = self.state
        req = parse_responses_request(self.json_body(), state.sampling)
        model = state.names.resolve(req.model)
        chat = ChatRequest(
            model=req.model,
            messages=req.messages,
            tools=None,
            sampling=req.sampling,
            stream=req.stream,
            include_usage=False,
            template_kwargs=req.template_kwargs,
            reasoning_effort=req.reasoning_effort,
        )
        try:
            prompt = render_prompt(state, chat)
            params = sampling_params(req.sampling, len(prompt.ids), state.engine_config.ctx_size, state.extra_stop)
            stream = await self.start_generation(GenerationRequest(prompt.ids, params))
        except ApiError as exc:
            raise _renamed(exc) from None
        split = state.config.reasoning_format == "auto"
        splitter = ReasoningSplitter(opened=prompt.opened) if split else None
        builder = ResponseBuilder(req, model, params)
        if req.stream:
            await self._stream(builder, stream, splitter)
        else:
            await self._whole(builder, stream, splitter)

    async def _whole(self, builder: ResponseBuilder, stream, splitter: ReasoningSplitter | None) -> None:
        """The same builder as the stream, its events dropped: the body is the stream's final response."""
        async for _ in self._run(builder, stream, splitter):
            pass
        last = stream.last
        self.count_tokens(last)
        if stream.aborted or last is None or last.finish_reason == "abort":
            return
        builder.finish(last)
        self.write_json(builder.body())

    async def _run(self, builder: ResponseBuilder, stream, splitter: ReasoningSplitter | None):
        """The stream events of the generated text, one batch per engine event."""
        async for delta in stream.events():
            if splitter is None:
                found = [("content", delta.text)]
            else:
                more = splitter.finish() if delta.finish_reason is not None else []
                found = [(e.kind, e.text) for e in splitter.feed(delta.text) + more]
            builder.count(delta, {kind for kind, text in found if text})
            for kind, text in found:
                for event in builder.feed(kind, text):
                    yield event

    async def _stream(self, builder: ResponseBuilder, stream, splitter: ReasoningSplitter | None) -> None:
        self.start_sse()
        try:
            for event in builder.start():
                if not await self.send(sse_event(event)):
                    return
            async for event in self._run(builder, stream, splitter):
                if not await self.send(sse_event(event)):
                    return
            last = stream.last
            self.count_tokens(last)
            if stream.aborted or last is None or last.finish_reason == "abort":
                return
            for event in builder.finish(last):
                if not await self.send(sse_event(event)):
                    return
            self.finish()
        except Exception as exc:
            if not self.sent_any:
                raise
            if isinstance(exc, ApiError):
                error = _renamed(exc)
            else:
                log.exception("generation failed mid-stream")
                error = ApiError(500, f"generation failed: {exc}", type="server_error")
            event = builder.event("error", code=error.code or error.type, message=error.message, param=error.param)
            await self.send(sse_event(event))
            self.finish()
