"""POST /v1/chat/completions: parse -> start the chat turn -> generate -> one body or SSE chunks."""

from __future__ import annotations

from lexi.chat.constraint_plan import ConstraintError
from lexi.chat.prompt import ChatTurn, Conversation, start_turn
from lexi.chat.template import TemplateRenderError, ThinkingUnsupported
from lexi.engine.request import GenerationRequest
from lexi.http.completion_bodies import ChatChunks, chat_body, chat_finish_reason, tool_call_entry
from lexi.http.errors import ApiError, bad_request
from lexi.http.generation import chat_logprobs, merge_usage, output_events, sampling_params
from lexi.http.handlers.base import GenerationHandler
from lexi.http.protocol_chat import ChatRequest, parse_chat_request
from lexi.http.sse import DONE, frame


def chat_turn(state, conversation: Conversation) -> ChatTurn:
    """The prompt and output pipeline for a conversation; template faults in HTTP terms."""
    try:
        split = state.config.reasoning_format == "auto"
        return start_turn(state.template, state.runtime.tokenizer, conversation, split)
    except ConstraintError as exc:
        raise bad_request(str(exc), param=exc.param, code="invalid_constraint") from None
    except ThinkingUnsupported as exc:
        raise ApiError(501, str(exc), param="reasoning_effort", code="thinking_not_supported") from None
    except TemplateRenderError as exc:
        raise bad_request(str(exc), param="messages", code="template_error") from None
    except ValueError as exc:
        raise bad_request(str(exc), param="chat_template_kwargs") from None


class ChatCompletionsHandler(GenerationHandler):
    route = "chat_completions"

    async def post(self) -> None:
        state = self.state
        req = parse_chat_request(self.json_body(), state.sampling)
        model = state.names.resolve(req.model)
        turn = chat_turn(state, req.conversation)
        params = sampling_params(req.sampling, len(turn.prompt.ids), state.engine_config.ctx_size, state.extra_stop)
        constraint = await self.compile_constraint(turn)
        stream = await self.start_generation(GenerationRequest(turn.prompt.ids, params, constraint=constraint))
        if req.stream:
            await self.stream_failures(self._stream(req, model, stream, turn))
        else:
            await self._whole(req, model, stream, turn)

    async def _whole(self, req: ChatRequest, model: str, stream, turn: ChatTurn) -> None:
        output = turn.output()
        deltas, text = [], {"reasoning": [], "content": []}
        async for delta, events in output_events(stream, output):
            deltas.append(delta)
            for event in events:
                if event.kind != "tool_call":
                    text[event.kind].append(event.text)
        merged = merge_usage(deltas)
        self.count_tokens(merged)
        if stream.aborted or merged.finish_reason == "abort":
            return
        reasoning, content = "".join(text["reasoning"]), "".join(text["content"])
        tokenizer = self.state.runtime.tokenizer
        want_logprobs = req.sampling.logprobs is not None
        body = chat_body(
            model, merged, reasoning, content, output.calls, output.reasoning_tokens, tokenizer, want_logprobs
        )
        self.write_json(body)

    async def _stream(self, req: ChatRequest, model: str, stream, turn: ChatTurn) -> None:
        """role chunk, then reasoning/content/tool-call deltas, the finish chunk, the usage chunk if asked, [DONE]."""
        tokenizer = self.state.runtime.tokenizer
        want_logprobs = req.sampling.logprobs is not None
        output = turn.output()
        chunks = ChatChunks(model)
        self.start_sse()
        if not await self.send(frame(chunks.chunk({"role": "assistant"}))):
            return
        pending = []  # logprobs of tokens whose text the pipeline still holds back
        async for delta, events in output_events(stream, output):
            pending.extend(delta.logprobs)
            for event in events:
                if event.kind == "tool_call":
                    index = output.calls.index(event.call)
                    chunk = chunks.chunk({"tool_calls": [tool_call_entry(event.call, index)]})
                else:
                    lp = chat_logprobs(tokenizer, tuple(pending)) if want_logprobs else None
                    pending = []
                    key = "reasoning_content" if event.kind == "reasoning" else "content"
                    chunk = chunks.chunk({key: event.text}, logprobs=lp)
                if not await self.send(frame(chunk)):
                    return
        last = stream.last
        self.count_tokens(last)
        if stream.aborted or last is None or last.finish_reason == "abort":
            return
        lp = chat_logprobs(tokenizer, tuple(pending)) if want_logprobs and pending else None
        if not await self.send(frame(chunks.chunk({}, chat_finish_reason(last, output.calls), lp))):
            return
        if req.include_usage and not await self.send(frame(chunks.usage_chunk(last, output.reasoning_tokens))):
            return
        await self.send(DONE)
        self.finish()
