"""POST /v1/chat/completions: parse -> start the chat turn -> generate n choices -> one body or SSE chunks."""

from __future__ import annotations

from collections.abc import AsyncIterator

from lexi.chat.constraint_plan import ConstraintError
from lexi.chat.prompt import ChatTurn, Conversation, start_turn
from lexi.chat.template import TemplateRenderError, ThinkingUnsupported
from lexi.http.chat.reply import ChatChunks, chat_body, chat_choice, chat_finish_reason, tool_call_entry
from lexi.http.chat.request import ChatRequest, parse_chat_request
from lexi.http.errors import ApiError, bad_request
from lexi.http.exchange import Reply
from lexi.http.generation.logprobs import ContentLogprobs, chat_entries
from lexi.http.generation.sampling import choice_requests, sampling_params
from lexi.http.generation.stream import output_events
from lexi.http.route import GenerationRoute
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


class ChatCompletionsRoute(GenerationRoute):
    route = "chat_completions"

    async def post(self) -> Reply | None:
        state = self.state
        req = parse_chat_request(self.json_body(), state.sampling)
        model = state.names.resolve(req.model)
        self.check_choices(req.sampling.n)
        turn = chat_turn(state, req.conversation)
        params = sampling_params(req.sampling, len(turn.prompt.ids), state.engine_config.ctx_size, state.extra_stop)
        constraints = [await self.compile_constraint(turn, params.max_tokens) for _ in range(req.sampling.n)]
        requests = choice_requests(turn.prompt.ids, params, req.sampling.n, constraints if turn.plan else None)
        stream = await self.start_generation(requests)
        if req.stream:
            return self.sse(self._stream(req, model, stream, turn))
        return await self._whole(req, model, stream, turn)

    async def _whole(self, req: ChatRequest, model: str, stream, turn: ChatTurn) -> Reply | None:
        n = stream.n
        outputs = [turn.output() for _ in range(n)]
        tokenizer = self.state.runtime.tokenizer
        logprobs = [ContentLogprobs(tokenizer) for _ in range(n)]
        text = [{"reasoning": [], "content": [], "logprobs": []} for _ in range(n)]
        async for i, delta, events in output_events(stream, outputs):
            attached = logprobs[i].feed(delta.logprobs, events, outputs[i].fed_reasoning)
            for event, tokens in zip(events, attached, strict=True):
                if event.kind != "tool_call":
                    text[i][event.kind].append(event.text)
                text[i]["logprobs"] += tokens
        self.count_tokens()
        if stream.aborted or any(d is None or d.finish_reason == "abort" for d in stream.last):
            return None
        want_logprobs = req.sampling.logprobs is not None
        choices = [
            chat_choice(
                i, "".join(text[i]["reasoning"]), "".join(text[i]["content"]), outputs[i].calls, stream.last[i],
                {"content": chat_entries(tokenizer, text[i]["logprobs"])} if want_logprobs else None,
            )
            for i in range(n)
        ]  # fmt: skip
        reasoning_tokens = sum(o.reasoning_tokens for o in outputs)
        return self.json(chat_body(model, self.state.fingerprint, choices, stream.last, reasoning_tokens))

    async def _stream(self, req: ChatRequest, model: str, stream, turn: ChatTurn) -> AsyncIterator[bytes]:
        """Per choice: a role chunk, then reasoning/content/tool-call deltas and a finish chunk; then the usage
        chunk if asked, then [DONE]."""
        n = stream.n
        tokenizer = self.state.runtime.tokenizer
        want_logprobs = req.sampling.logprobs is not None
        outputs = [turn.output() for _ in range(n)]
        logprobs = [ContentLogprobs(tokenizer) for _ in range(n)]
        chunks = ChatChunks(model, self.state.fingerprint, req.include_usage)
        tools = req.conversation.tools
        first = {"role": "assistant", "content": None if tools is not None and tools.forced else ""}
        for i in range(n):  # a forced call's first delta carries no text, as OpenAI's does
            yield frame(chunks.chunk(i, first))
        async for i, delta, events in output_events(stream, outputs):
            attached = logprobs[i].feed(delta.logprobs, events, outputs[i].fed_reasoning)
            for event, tokens in zip(events, attached, strict=True):
                if event.kind == "tool_call":
                    index = outputs[i].calls.index(event.call)
                    chunk = chunks.chunk(i, {"tool_calls": [tool_call_entry(event.call, index)]})
                else:
                    content = event.kind == "content"
                    lp = {"content": chat_entries(tokenizer, tokens)} if want_logprobs and content else None
                    key = "reasoning_content" if event.kind == "reasoning" else "content"
                    chunk = chunks.chunk(i, {key: event.text}, logprobs=lp)
                yield frame(chunk)
            if delta.finish_reason is not None and delta.finish_reason != "abort":
                finish = chat_finish_reason(delta, outputs[i].calls)
                yield frame(chunks.chunk(i, {}, finish))
        self.count_tokens()
        if stream.aborted or any(d is None or d.finish_reason == "abort" for d in stream.last):
            return
        reasoning_tokens = sum(o.reasoning_tokens for o in outputs)
        if req.include_usage:
            yield frame(chunks.usage_chunk(stream.last, reasoning_tokens))
        yield DONE
